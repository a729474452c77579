//! The checked settings the gateway runs on and needs a restart to change: `[server]`
//! (the listeners, the mode, the upstream, the trusted proxies, check mode's headers) and
//! `[redis]` (where, how long to wait, the breaker, the key prefix, the rules key).

use super::redis_connection::{redacted, redis_connection, redis_target};
pub use super::redis_connection::{RedisConnection, RedisTarget};
use super::schema::{RedisSection, ServerSection};
use super::upstream_target::{upstream_target, UpstreamTarget};
use crate::net::listen::ListenAddress;
use crate::rules::one_of::one_of;
use ipnet::IpNet;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

/// `[server] mode`: what the gateway does with a request it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward allowed requests to the upstream.
    Proxy,
    /// Answer whether a request may pass, for a proxy that asks first.
    Check,
}

/// `[redis] backend`: what the gateway's calls are answered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    /// The module's commands (`RL.HIT`, ...).
    Module,
    /// The Functions library (`FCALL rl_hit ...`).
    Functions,
    /// The module where the server has it, else the library.
    Auto,
}

/// `[redis] functions_load`: whether the gateway loads the library where it is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FunctionsLoad {
    /// The library is installed by its operator; the gateway only looks for it.
    Never,
    /// Loaded by the gateway into a server that has no library of that name.
    IfMissing,
}

/// `[server]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    /// Where the HTTP listener for clients binds (an address, or a name resolved at start).
    pub listen: ListenAddress,
    /// Where `/metrics` and the health checks are served.
    pub admin_listen: ListenAddress,
    /// Proxy or check.
    pub mode: Mode,
    /// The upstream (proxy mode): its `scheme://authority` and, for `https://`, its TLS.
    pub(crate) upstream: Option<UpstreamTarget>,
    pub(crate) trusted_proxies: Vec<IpNet>,
    /// How often the rules file is read again (from `reload_interval_ms`).
    pub reload_interval: Duration,
    pub(crate) check_deny_status: u16,
    /// Which headers carry the request asked about in check mode.
    pub(crate) check_headers: CheckHeaders,
    /// How long the upstream may take to start its answer before the gateway says 504.
    pub(crate) upstream_timeout: Duration,
    /// Threads serving requests; 0: one per CPU the process may use. See [`Self::threads`].
    pub(crate) worker_threads: usize,
    /// `[connections]`.
    pub connections: crate::net::connection_limits::ConnectionLimits,
    /// `[client_ip]`: the network a `key = "ip"` rule counts a client by.
    pub(crate) client_prefixes: crate::rules::client_ip::Prefixes,
    /// `[requests]`: path canonicalisation and the head size cap.
    pub(crate) requests: crate::rules::request_policy::RequestPolicy,
}

impl ServerSettings {
    /// How many threads serve requests: `worker_threads`, or when that is 0 one per CPU the
    /// process may use (its affinity and cgroup quota). At 1 the gateway runs a
    /// single-threaded runtime, where a task that another one wakes waits its turn behind
    /// the tasks already ready: the RL.HITs of requests that arrived together then leave in
    /// one write, as one pipeline, where the multi-threaded scheduler's "run the woken task
    /// next" sends each alone.
    pub fn threads(&self) -> usize {
        match self.worker_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    pub(crate) fn is_trusted_proxy(&self, ip: IpAddr) -> bool {
        crate::rules::client_ip::is_trusted(ip, &self.trusted_proxies)
    }

    /// The network `ip` is counted by (`[client_ip]`): the address itself, or its prefix.
    pub(crate) fn client_network(&self, ip: IpAddr) -> IpAddr {
        self.client_prefixes.aggregate(ip)
    }
}

/// The headers a proxy in front of check mode names the original request with. Only the
/// configured pair is read: the other may come from the client untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckHeaders {
    /// nginx (`proxy_set_header X-Original-Method / X-Original-URI`).
    Original,
    /// Traefik ForwardAuth (`X-Forwarded-Method / X-Forwarded-Uri`).
    Forwarded,
}

impl CheckHeaders {
    /// The method header and the URI header.
    pub(crate) fn names(self) -> [&'static str; 2] {
        match self {
            CheckHeaders::Original => ["x-original-method", "x-original-uri"],
            CheckHeaders::Forwarded => ["x-forwarded-method", "x-forwarded-uri"],
        }
    }
}

/// `[redis]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct RedisSettings {
    /// The server, cluster or Sentinel-managed primary to connect to.
    pub target: RedisTarget,
    /// TLS and credentials.
    pub connection: RedisConnection,
    pub(crate) deadline: Duration,
    /// Put before every key the gateway writes, so that tenants can share a Redis.
    pub key_prefix: String,
    pub(crate) breaker_failures: u32,
    pub(crate) breaker_open: Duration,
    /// The breaker opens only after Redis has answered nothing for this long.
    pub(crate) breaker_silence: Duration,
    /// `[redis] gateways`: what local limits are divided by, instead of the live count.
    pub(crate) gateways: Option<u64>,
    /// How often each gateway tells Redis it is alive and reads how many are.
    pub heartbeat: Duration,
    /// A Redis key holding rules (`[[rule]]`, `[default]`, `[headers]`) that, while it
    /// exists, replace the file's; read every `rules_refresh`.
    pub(crate) rules_key: Option<String>,
    pub(crate) rules_refresh: Duration,
    /// The module, the Functions library, or whichever the server has.
    pub backend: BackendChoice,
    /// Whether the library is loaded where it is missing.
    pub functions_load: FunctionsLoad,
}

pub(super) fn server_settings(mut section: ServerSection) -> Result<ServerSettings, String> {
    let address = |name: &str, value: &str| {
        ListenAddress::parse(value).ok_or_else(|| {
            format!(
                "[server] {name} '{value}' is not an address like 127.0.0.1:8080 or a \
                 host:port like localhost:8080"
            )
        })
    };
    let mode = one_of(
        "[server] mode",
        &section.mode,
        &[("proxy", Mode::Proxy), ("check", Mode::Check)],
    )?;
    let upstream = match (upstream_target(&mut section)?, mode) {
        (None, Mode::Proxy) => return Err("[server] upstream is needed in mode = \"proxy\"".into()),
        (upstream, _) => upstream,
    };
    let trusted_proxies = section
        .trusted_proxies
        .iter()
        .map(|net| {
            net.parse::<IpNet>()
                .or_else(|_| net.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| format!("[server] trusted_proxies: '{net}' is not an address or CIDR"))
                .and_then(|parsed| {
                    // Trusting every address lets every client write its own address into
                    // X-Forwarded-For: a fresh budget per request.
                    if parsed.prefix_len() == 0 {
                        Err(format!(
                            "[server] trusted_proxies: '{net}' trusts every address, so any \
                             client could name its own address in X-Forwarded-For; name the \
                             proxies' networks"
                        ))
                    } else {
                        Ok(parsed)
                    }
                })
        })
        .collect::<Result<_, _>>()?;
    if !(200..=599).contains(&section.check_deny_status) {
        return Err("[server] check_deny_status must be an HTTP status (200-599)".into());
    }
    let check_headers = match section.check_headers.as_str() {
        "x-original" => CheckHeaders::Original,
        "x-forwarded" => CheckHeaders::Forwarded,
        other => {
            return Err(format!(
                "[server] check_headers '{other}' must be \"x-original\" (nginx) or \"x-forwarded\" (Traefik)"
            ))
        }
    };
    if section.upstream_timeout_ms == 0 {
        return Err("[server] upstream_timeout_ms must be at least 1".into());
    }
    if section.worker_threads > MAX_WORKER_THREADS {
        return Err(format!(
            "[server] worker_threads must be 0 (one per CPU) to {MAX_WORKER_THREADS}"
        ));
    }
    Ok(ServerSettings {
        check_headers,
        upstream_timeout: Duration::from_millis(section.upstream_timeout_ms),
        worker_threads: section.worker_threads,
        listen: address("listen", &section.listen)?,
        admin_listen: address("admin_listen", &section.admin_listen)?,
        mode,
        upstream,
        trusted_proxies,
        reload_interval: Duration::from_millis(section.reload_interval_ms),
        check_deny_status: section.check_deny_status,
        connections: Default::default(),
        client_prefixes: Default::default(),
        requests: Default::default(),
    })
}

/// More threads than this is a typo, not a machine.
const MAX_WORKER_THREADS: usize = 1024;

pub(super) fn redis_settings(mut section: RedisSection) -> Result<RedisSettings, String> {
    let target = redis_target(&mut section)?;
    if let RedisTarget::Single(url) = &target {
        redis::Client::open(url.as_str())
            .map_err(|e| format!("[redis] '{}': {e}", redacted(url)))?;
    }
    let connection = redis_connection(&mut section, &target)?;
    if section.key_prefix.contains(['{', '}']) {
        return Err(
            "[redis] key_prefix must not contain '{' or '}' (the hash tag is the client's)".into(),
        );
    }
    if section.key_prefix.len() > crate::rules::MAX_KEY_PREFIX_BYTES {
        return Err(format!(
            "[redis] key_prefix is longer than {} bytes",
            crate::rules::MAX_KEY_PREFIX_BYTES
        ));
    }
    if section.gateways == Some(0) {
        return Err("[redis] gateways must be at least 1 (or left out: counted live)".into());
    }
    if !(100..=60_000).contains(&section.heartbeat_ms) {
        return Err("[redis] heartbeat_ms must be between 100 and 60000".into());
    }
    if section.deadline_ms == 0 {
        return Err("[redis] deadline_ms must be at least 1".into());
    }
    if section.breaker_failures == 0 {
        return Err("[redis] breaker_failures must be at least 1".into());
    }
    let backend = one_of(
        "[redis] backend",
        &section.backend,
        &[
            ("auto", BackendChoice::Auto),
            ("module", BackendChoice::Module),
            ("functions", BackendChoice::Functions),
        ],
    )?;
    let functions_load = one_of(
        "[redis] functions_load",
        &section.functions_load,
        &[
            ("never", FunctionsLoad::Never),
            ("if-missing", FunctionsLoad::IfMissing),
        ],
    )?;
    Ok(RedisSettings {
        target,
        backend,
        functions_load,
        connection,
        deadline: Duration::from_millis(section.deadline_ms),
        key_prefix: section.key_prefix,
        breaker_failures: section.breaker_failures,
        breaker_open: Duration::from_millis(section.breaker_open_ms),
        breaker_silence: Duration::from_millis(section.breaker_silence_ms),
        gateways: section.gateways,
        heartbeat: Duration::from_millis(section.heartbeat_ms),
        rules_key: section.rules_key.filter(|k| !k.is_empty()),
        rules_refresh: Duration::from_millis(section.rules_refresh_ms.max(100)),
    })
}

impl ServerSettings {
    /// Reads the files `[server]` names (the upstream's TLS), relative paths taken from
    /// `base`, the configuration file's directory.
    pub(super) fn read_files(&mut self, base: Option<&Path>) -> Result<(), String> {
        match &mut self.upstream {
            Some(upstream) => upstream.read_files(base),
            None => Ok(()),
        }
    }
}

impl RedisSettings {
    /// Reads the files `[redis]` names (TLS), relative paths taken from `base`, the
    /// configuration file's directory.
    pub(super) fn read_files(&mut self, base: Option<&Path>) -> Result<(), String> {
        self.connection.read_files(base)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{assert_refused, parse};

    #[test]
    fn mistakes_in_the_settings_are_named() {
        assert_refused(&[
            ("[redis]\ndeadline_ms = 0\n", "deadline_ms"),
            ("[redis]\nkey_prefix = \"rl:{x}:\"\n", "key_prefix"),
            (
                "[redis]\nkey_prefix = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n",
                "longer than 32",
            ),
            ("[requests]\nmax_path_segments = 0\n", "max_path_segments"),
            ("[redis]\nbackend = \"lua\"\n", "backend 'lua'"),
            (
                "[redis]\nfunctions_load = \"always\"\n",
                "functions_load 'always'",
            ),
        ]);
    }

    #[test]
    fn the_backend_is_auto_and_the_library_never_loaded_unless_asked() {
        use crate::config::{parse_after_server, BackendChoice, FunctionsLoad};
        let redis = parse_after_server("[redis]\n").expect("loads").redis;
        assert_eq!(redis.backend, BackendChoice::Auto);
        assert_eq!(redis.functions_load, FunctionsLoad::Never);
        let text = "[redis]\nbackend = \"functions\"\nfunctions_load = \"if-missing\"\n";
        let redis = parse_after_server(text).expect("loads").redis;
        assert_eq!(redis.backend, BackendChoice::Functions);
        assert_eq!(redis.functions_load, FunctionsLoad::IfMissing);
    }

    #[test]
    fn proxy_mode_needs_an_upstream() {
        assert!(parse("[server]\nlisten = \"127.0.0.1:8080\"\n")
            .unwrap_err()
            .to_string()
            .contains("upstream"));
    }
}
