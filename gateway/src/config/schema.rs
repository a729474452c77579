//! The file as written: the TOML tables, each field with its default, before anything is
//! checked. `settings` and `rule_set` turn these into what the gateway runs on; nothing
//! here judges a value.
//!
//! These structs are also the configuration reference: `reference.rs` renders the tables
//! of `docs/src/gateway/configuration.md` (and the rule table of `rules.md`) from their
//! JSON Schema, so each field's doc comment is its row's text, written for the user. The
//! attributes say what the doc comment cannot: `x-type` (a type more telling than the JSON
//! one), `default` (the default applied after loading, for a field serde leaves `None`),
//! `x-default` (a default that is no value, as prose) and `x-reload` (on the struct for
//! every field, on a field for an exception).

use crate::front::envoy::grpc_listener::GrpcLimits;
use crate::front::envoy::settings::{LimitHeaders, DEFAULT_NEAR_LIMIT_RATIO};
use schemars::JsonSchema;
use serde::Deserialize;

/// The whole file.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) server: ServerSection,
    /// Left out: the default server, and then the file must have rules (else it would
    /// limit nothing).
    pub(super) redis: Option<RedisSection>,
    #[serde(default)]
    pub(super) headers: HeadersSection,
    #[serde(default)]
    pub(super) deny_cache: DenyCacheSection,
    #[serde(default)]
    pub(super) local_quota: LocalQuotaSection,
    #[serde(default, rename = "rule")]
    pub(super) rules: Vec<RuleSection>,
    pub(super) default: Option<RuleSection>,
    #[serde(default)]
    pub(super) connections: crate::net::connection_limits::ConnectionSection,
    #[serde(default)]
    pub(super) client_ip: crate::rules::client_ip::PrefixSection,
    #[serde(default)]
    pub(super) requests: crate::rules::request_policy::RequestsSection,
    pub(super) envoy: Option<EnvoySection>,
}

/// `[envoy]`: Envoy's rate limit service over gRPC, beside the HTTP listener. Each mode
/// named in capitals is envoyproxy/ratelimit's setting of the same effect.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("x-reload" = "restart"))]
pub(super) struct EnvoySection {
    /// The gRPC listener (plain HTTP/2): `ip:port` or `name:port`, as `[server] listen`.
    #[schemars(extend("x-type" = "address"))]
    pub(super) listen: String,
    /// envoyproxy/ratelimit's YAML: a file, or every `*.yaml` / `*.yml` in a directory;
    /// relative to this file.
    #[schemars(extend("x-type" = "path", "x-reload" = "files: yes"))]
    pub(super) descriptors: String,
    /// `RateLimit` / `RateLimit-Policy` (and `Retry-After`) in `response_headers_to_add`.
    #[serde(default = "default_true")]
    pub(super) response_headers: bool,
    /// At least 1: connections to the gRPC listener at once.
    #[schemars(extend("default" = (GrpcLimits::default().max_connections)))]
    pub(super) max_connections: Option<usize>,
    /// 1 to 3600000: the HTTP/2 preface must come within it.
    #[schemars(extend("default" = (millis(GrpcLimits::default().handshake_timeout))))]
    pub(super) handshake_timeout_ms: Option<u64>,
    /// 1 to 3600000: a call, read, decided and answered.
    #[schemars(extend("default" = (millis(GrpcLimits::default().request_timeout))))]
    pub(super) request_timeout_ms: Option<u64>,
    /// Descriptor files of one domain are merged instead of refused (envoyproxy/ratelimit's
    /// `MERGE_DOMAIN_CONFIG`).
    #[serde(default)]
    pub(super) merge_domains: bool,
    /// Every status keeps its code, `overall_code` is always OK (`SHADOW_MODE`); counted
    /// in `rl_gateway_envoy_total{result="shadow_mode"}`.
    #[serde(default)]
    pub(super) shadow_mode: bool,
    /// Every descriptor is a quota descriptor (`QUOTA_MODE`).
    #[serde(default)]
    pub(super) quota_mode: bool,
    /// Every descriptor limit with `requests_per_unit` (not a policy) takes its budget in
    /// batches, as `local_quota = true` on a rule; `[local_quota]` sizes them. Not with
    /// `shadow_mode` or `quota_mode`, whose descriptors are charged apart.
    #[serde(default)]
    pub(super) local_quota: bool,
    /// The request and the passing descriptors' `metadata` in the response's
    /// `dynamic_metadata` (`RESPONSE_DYNAMIC_METADATA`).
    #[serde(default)]
    pub(super) response_dynamic_metadata: bool,
    /// envoyproxy/ratelimit's three headers of the status with the least remaining
    /// (`LIMIT_RESPONSE_HEADERS_ENABLED`); may be on beside `response_headers`.
    #[serde(default)]
    pub(super) limit_headers: bool,
    /// Only with `limit_headers`: the name of the header with the limit
    /// (`LIMIT_LIMIT_HEADER`); a valid HTTP header name, not one of the other two, nor one
    /// that `response_headers` writes.
    #[schemars(extend("default" = (LimitHeaders::default().limit)))]
    pub(super) limit_header: Option<String>,
    /// Only with `limit_headers`: the name of the header with what is left
    /// (`LIMIT_REMAINING_HEADER`); as `limit_header`.
    #[schemars(extend("default" = (LimitHeaders::default().remaining)))]
    pub(super) remaining_header: Option<String>,
    /// Only with `limit_headers`: the name of the header with the seconds until the reset
    /// (`LIMIT_RESET_HEADER`); as `limit_header`.
    #[schemars(extend("default" = (LimitHeaders::default().reset)))]
    pub(super) reset_header: Option<String>,
    /// Above 0, at most 1: hits above this share of a limit count as `near_limit` in
    /// `rl_gateway_envoy_hits_total` (`NEAR_LIMIT_RATIO`).
    #[schemars(extend("default" = DEFAULT_NEAR_LIMIT_RATIO))]
    pub(super) near_limit_ratio: Option<f64>,
}

fn default_true() -> bool {
    true
}

/// A default duration as the `_ms` setting that would set it.
fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `[server]`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("x-reload" = "restart"))]
pub(super) struct ServerSection {
    /// Where the HTTP listener binds: `ip:port` (`0.0.0.0:8080`, `[::1]:8080`) or
    /// `name:port` (`localhost:8080`). A name is resolved once, at start, and bound on its
    /// first IPv4 address (else its first); one that does not resolve stops the start.
    #[schemars(extend("x-type" = "address"))]
    pub(super) listen: String,
    /// Where `GET /metrics`, `GET /healthz` and `GET /readyz` are served; written as
    /// `listen`.
    #[serde(default = "default_admin_listen")]
    #[schemars(extend("x-type" = "address"))]
    pub(super) admin_listen: String,
    /// `"proxy"` (forward allowed requests to the upstream) or `"check"` (answer whether a
    /// request may pass, for a proxy that asks first).
    #[serde(default = "default_mode")]
    pub(super) mode: String,
    /// The API allowed requests go to: `http://host:port` or `https://host:port`
    /// ([HTTPS upstreams](proxying.md#https-upstreams)), no user, path or query. A host
    /// name is looked up for each new connection, and one that does not resolve answers
    /// 502 until it does (not a load error).
    #[schemars(extend("x-type" = "URL", "x-default" = "none; required in proxy mode"))]
    pub(super) upstream: Option<String>,
    /// `https://` only: a PEM bundle of the CAs that sign the upstream's certificate,
    /// instead of the system's roots; read at load.
    #[schemars(extend("x-type" = "path", "x-default" = "the system's roots, else Mozilla's"))]
    pub(super) upstream_ca_file: Option<String>,
    /// `https://` only, with `upstream_key_file`: a client certificate chain (PEM) for an
    /// upstream that requires one.
    #[schemars(extend("x-type" = "path"))]
    pub(super) upstream_cert_file: Option<String>,
    /// `https://` only, with `upstream_cert_file`: the client certificate's private key
    /// (PEM).
    #[schemars(extend("x-type" = "path"))]
    pub(super) upstream_key_file: Option<String>,
    /// `https://` only: the name the upstream's certificate must carry and SNI sends, when
    /// not the URL's host (an upstream reached by address).
    #[schemars(extend("x-default" = "the URL's host"))]
    pub(super) upstream_server_name: Option<String>,
    /// Addresses or networks whose `X-Forwarded-For` is believed; `0.0.0.0/0` is refused.
    #[serde(default)]
    #[schemars(extend("x-type" = "list of CIDR"))]
    pub(super) trusted_proxies: Vec<String>,
    /// How often the file's modification time is checked; `0`: SIGHUP only.
    #[serde(default = "default_reload_interval_ms")]
    pub(super) reload_interval_ms: u64,
    /// 200 to 599: check mode's denial (403 for nginx).
    #[serde(default = "default_check_deny_status")]
    pub(super) check_deny_status: u16,
    /// Which headers name the request asked about in check mode: `"x-original"` (nginx)
    /// or `"x-forwarded"` (Traefik).
    #[serde(default = "default_check_headers")]
    pub(super) check_headers: String,
    /// At least 1: how long the upstream may take to start its answer; a slower one gets
    /// the client a 504.
    #[serde(default = "default_upstream_timeout_ms")]
    pub(super) upstream_timeout_ms: u64,
    /// The threads serving requests: 0 (one per CPU the process may use) to 1024.
    #[serde(default)]
    pub(super) worker_threads: usize,
}

fn default_check_headers() -> String {
    "x-original".into()
}
fn default_upstream_timeout_ms() -> u64 {
    30_000
}

fn default_admin_listen() -> String {
    "127.0.0.1:9090".into()
}
fn default_mode() -> String {
    "proxy".into()
}
fn default_reload_interval_ms() -> u64 {
    1000
}
fn default_check_deny_status() -> u16 {
    429
}

/// `[redis]`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(extend("x-reload" = "restart"))]
pub(super) struct RedisSection {
    /// One server: `redis://host:port`, `rediss://` for TLS; may hold `user:password@`
    /// (better kept out: `username`, `password_env`, `password_file`).
    #[schemars(extend(
        "x-type" = "URL",
        "x-default" = "`\"redis://127.0.0.1:6379\"` when neither `cluster` nor `sentinels` is given"
    ))]
    pub(super) url: Option<String>,
    /// The seed nodes of a Redis Cluster, all `redis://` or all `rediss://`; not with
    /// `url`.
    #[schemars(extend("x-type" = "list of URL"))]
    pub(super) cluster: Option<Vec<String>>,
    /// Redis Sentinel: the sentinels' `host:port`, asked for the primary of `master_name`;
    /// not with `url` or `cluster`.
    #[schemars(extend("x-type" = "list of `host:port`"))]
    pub(super) sentinels: Option<Vec<String>>,
    /// The name the sentinels monitor the primary under (`sentinel monitor NAME ...`).
    #[schemars(extend("x-default" = "none; required with `sentinels`"))]
    pub(super) master_name: Option<String>,
    /// With `sentinels` only: TLS to the sentinels and to the primary (`url` and `cluster`
    /// say it by `rediss://`).
    #[schemars(extend("default" = false))]
    pub(super) tls: Option<bool>,
    /// A PEM bundle of the CAs that sign the servers' certificates, instead of the
    /// system's roots; read at load.
    #[schemars(extend("x-type" = "path", "x-default" = "the system's roots, else Mozilla's"))]
    pub(super) tls_ca_file: Option<String>,
    /// The client certificate (PEM), for servers with `tls-auth-clients yes`; needs
    /// `tls_key_file`.
    #[schemars(extend("x-type" = "path"))]
    pub(super) tls_cert_file: Option<String>,
    /// The client certificate's private key (PEM); needs `tls_cert_file`.
    #[schemars(extend("x-type" = "path"))]
    pub(super) tls_key_file: Option<String>,
    /// With `url` only: the name the server's certificate is checked against, when not the
    /// URL's host.
    #[schemars(extend("x-default" = "the URL's host"))]
    pub(super) tls_server_name: Option<String>,
    /// The ACL user; not with a user in the URL.
    #[schemars(extend("x-default" = "the URL's, else `default`"))]
    pub(super) username: Option<String>,
    /// The environment variable holding the password, read at start (never logged).
    pub(super) password_env: Option<String>,
    /// The file holding the password (a mounted secret), one trailing newline dropped,
    /// read at start; not with `password_env` nor a password in the URL.
    #[schemars(extend("x-type" = "path"))]
    pub(super) password_file: Option<String>,
    /// With `sentinels`: the ACL user the sentinels themselves ask for.
    pub(super) sentinel_username: Option<String>,
    /// With `sentinels`: the environment variable holding the sentinels' password.
    pub(super) sentinel_password_env: Option<String>,
    /// With `sentinels`: the file holding the sentinels' password; not with
    /// `sentinel_password_env`.
    #[schemars(extend("x-type" = "path"))]
    pub(super) sentinel_password_file: Option<String>,
    /// At least 1: how long one decision may take before the rule's `on_redis_failure`
    /// decides.
    pub(super) deadline_ms: u64,
    /// Put before every key the gateway writes, so that tenants can share a Redis: at
    /// most 32 bytes, no `{` or `}`.
    pub(super) key_prefix: String,
    /// At least 1: outages in a row that open the circuit breaker.
    pub(super) breaker_failures: u32,
    /// How long Redis must have answered nothing for the breaker to open.
    pub(super) breaker_silence_ms: u64,
    /// How long an open breaker skips Redis.
    pub(super) breaker_open_ms: u64,
    /// 100 to 60000: each gateway's heartbeat, which counts the live gateways.
    pub(super) heartbeat_ms: u64,
    /// At least 1: a fixed number of gateways that local limits (`on_redis_failure =
    /// "local"`) divide by, instead of the count of live gateways the heartbeat reads.
    #[schemars(extend("x-default" = "none (counted live)"))]
    pub(super) gateways: Option<u64>,
    /// A Redis key holding the rules as a TOML document, in force instead of the file's
    /// while it exists (see [Rules kept in Redis](rules.md#rules-kept-in-redis)).
    pub(super) rules_key: Option<String>,
    /// How often `rules_key` is read.
    pub(super) rules_refresh_ms: u64,
    /// How the gateway decides: `"module"` (the module's commands), `"functions"` (the
    /// Functions library, for a server that cannot load modules) or `"auto"`: the module
    /// where the server has it, else the library (see [Managed Redis and
    /// Valkey](../operations/redis-connection.md#managed-redis-and-valkey)).
    pub(super) backend: String,
    /// `"never"` or `"if-missing"`: load the gateway's own copy of the Functions library
    /// into a server (every primary of a cluster) that has none. A library of another
    /// version is never replaced.
    pub(super) functions_load: String,
}

impl Default for RedisSection {
    fn default() -> Self {
        RedisSection {
            url: None,
            cluster: None,
            sentinels: None,
            master_name: None,
            tls: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_server_name: None,
            username: None,
            password_env: None,
            password_file: None,
            sentinel_username: None,
            sentinel_password_env: None,
            sentinel_password_file: None,
            deadline_ms: 5,
            key_prefix: "rl:".into(),
            breaker_failures: 5,
            breaker_silence_ms: 100,
            breaker_open_ms: 1000,
            heartbeat_ms: 1000,
            gateways: None,
            rules_key: None,
            rules_refresh_ms: 5000,
            backend: "auto".into(),
            functions_load: "never".into(),
        }
    }
}

/// `[headers]`: the headers of the answer; reloaded with the rules.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(extend("x-reload" = "yes"))]
pub(super) struct HeadersSection {
    /// Also send `X-RateLimit-Limit`, `-Remaining` and `-Reset`.
    pub(super) legacy: bool,
    /// The header set on the upstream request when a decision failed open.
    pub(super) fail_open: String,
}

impl Default for HeadersSection {
    fn default() -> Self {
        HeadersSection {
            legacy: false,
            fail_open: "X-RateLimit-Fail-Open".into(),
        }
    }
}

/// `[local_quota]`: how rules with `local_quota = true` take and hold their batches.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(extend("x-reload" = "restart"))]
pub(super) struct LocalQuotaSection {
    /// 1 to 10000: a batch is the units the key's requests asked for in about this long
    /// (so it lasts about this long at the key's rate); a key asking fewer than 4 units in
    /// it takes each request's own.
    pub(super) interval_ms: u64,
    /// `interval_ms` to 60000: units are spent within this long of being taken, else
    /// given back (so a key that goes quiet gives its units back after it); for `token`,
    /// `gcra` and `log` the limit then holds as if each window were this much longer.
    pub(super) hold_ms: u64,
    /// 1 to 50: a batch is at most this percent of the rule's smallest limit, which bounds
    /// what one gateway holds while another is denied (about one and a half batches).
    pub(super) max_batch_percent: u64,
}

impl Default for LocalQuotaSection {
    fn default() -> Self {
        let settings = crate::decider::quota::QuotaSettings::default();
        LocalQuotaSection {
            interval_ms: millis(settings.interval),
            hold_ms: millis(settings.hold),
            max_batch_percent: settings.max_batch_percent,
        }
    }
}

/// `[deny_cache]`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(extend("x-reload" = "restart"))]
pub(super) struct DenyCacheSection {
    /// Denied keys answered locally until their retry time, at most (entries, not
    /// bytes); `0` turns the cache off.
    pub(super) capacity: usize,
}

impl Default for DenyCacheSection {
    fn default() -> Self {
        DenyCacheSection { capacity: 10_000 }
    }
}

/// A `[[rule]]`, or `[default]`; reloaded.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("x-reload" = "yes"))]
pub(super) struct RuleSection {
    /// The rule's name in its keys, metrics and log lines: letters, digits, `-`, `_` or
    /// `.`, at most 48 bytes, one per rule (`default` is `[default]`'s). Every `[[rule]]`
    /// has one; `[default]` takes none.
    #[schemars(extend("x-default" = "none; required in a `[[rule]]`"))]
    pub(super) name: Option<String>,
    /// The methods the rule matches, in any case (`["GET", "HEAD"]`); left out, every
    /// method. Not on `[default]`; see [Rules that guard
    /// credentials](#rules-that-guard-credentials) before naming some.
    #[schemars(extend("x-default" = "every method"))]
    pub(super) methods: Option<Vec<String>>,
    /// The path the rule matches: `*` is one path segment, `**` any number (none too). The
    /// query is not part of the path, and the path is made canonical first (`[requests]`,
    /// see [Configuration file](configuration.md#requests)), so `//home`, `/./home`,
    /// `/%68ome` and `/home;v=1` are `/home` for matching, keys and the upstream alike; a
    /// trailing `/` is kept for the upstream but ignored by matching and keys. A
    /// `[[rule]]` names `path`, `methods` or both; not on `[default]`.
    #[schemars(extend("x-default" = "every path"))]
    pub(super) path: Option<String>,
    /// Whose budget: `"ip"` (the client IP, see [Client IP](#client-ip)),
    /// `"header:<name>"`, `"segment:<n>"` (1-based path segment) or `"global"` (one budget
    /// for every client: a cap on the rule, or on each endpoint with `per_endpoint`; key
    /// `rl:{global}:<rule>...`); a request without the header or segment is keyed by its
    /// IP, so leaving it out escapes nothing (nor does naming it in `Connection`:
    /// hop-by-hop headers are dropped before the decision). A client can still invent
    /// header values: key by a header your API authenticates, such as an API key.
    #[serde(default = "default_key")]
    pub(super) key: String,
    /// A budget per method and path rather than one for the whole rule.
    #[serde(default)]
    pub(super) per_endpoint: bool,
    /// `true`: matching goes on after this rule, so the next matching rule applies too
    /// (and after it the next, while they stack; `[default]` when no rule ended the list);
    /// every applying rule must allow the request; see [Stacking rules](#stacking-rules).
    #[serde(default)]
    pub(super) stack: bool,
    /// Tiers `"<count>/<window>"` (`ms`, `s`, `m`, `h`, `d`, or a calendar period:
    /// `"1000/month"`, `"50/day"`), all must allow; `[]` matches without limiting. A rule
    /// has `limits`, `policy` or `concurrency`, never both `limits` and `policy`.
    pub(super) limits: Option<Vec<String>>,
    /// For calendar tiers: the IANA zone of the windows (`tz = "Europe/Paris"`), as `TZ` in
    /// `RL.HIT` (see [Calendar windows](../concepts/calendar.md)); `RateLimit-Policy`
    /// gives a calendar tier no `w`, since it has no one length.
    #[schemars(extend("x-default" = "UTC"))]
    pub(super) tz: Option<String>,
    /// The day a `month` tier resets on, 1 to 31 (a billing day: `anchor = 5`), as
    /// `ANCHOR` in `RL.HIT`.
    #[schemars(extend("x-default" = "the 1st"))]
    pub(super) anchor: Option<u64>,
    /// As `ALGO` in `RL.HIT`: `"fixed"`, `"sliding"`, `"log"`, `"token"` or `"gcra"`.
    #[schemars(extend("x-default" = "the module's"))]
    pub(super) algorithm: Option<String>,
    /// As `BURST` in `RL.HIT` (`token` and `gcra` with one tier).
    #[schemars(extend("x-default" = "the module's"))]
    pub(super) burst: Option<u64>,
    /// Instead of `limits`: a named policy stored in Redis (`RL.HIT key POLICY name`),
    /// which holds the algorithm, burst, `tz` and `anchor` too.
    pub(super) policy: Option<String>,
    /// Units per request; more than a tier's limit, or burst, is refused when the file
    /// loads.
    #[serde(default = "default_cost")]
    pub(super) cost: u64,
    /// `"all"` or a list of statuses: the hit is charged before forwarding (so parallel
    /// requests cannot overshoot) and refunded with `RL.REFUND` before the response is
    /// returned when its status is not in the list.
    #[schemars(extend("default" = "all"))]
    pub(super) count: Option<CountSection>,
    /// `"enforce"`, or `"shadow"`: never denies, counts `shadow_denied` in the metrics,
    /// shows the client nothing.
    #[serde(default = "default_rule_mode")]
    pub(super) mode: String,
    /// While Redis cannot decide: `"local"` (the gateway enforces the rule in its own
    /// memory at its limit divided by the live gateways), `"open"` (let every request
    /// through) or `"closed"` (answer 503).
    #[serde(default = "default_on_failure")]
    pub(super) on_redis_failure: String,
    /// What an error reply of the module (a policy deleted in Redis, say) means, a
    /// misconfiguration: `"closed"` (answer 503) or `"open"`; see [Failure
    /// modes](failure-modes.md).
    #[serde(default = "default_on_module_error")]
    pub(super) on_module_error: String,
    /// At most this many requests (1 to 10,000) of one key in flight at once, proxy mode
    /// only; each holds a lease from before it is forwarded until its response ends, and
    /// the rule's `limits`, if any, count in the same call; see [Concurrency
    /// limits](#concurrency-limits).
    pub(super) concurrency: Option<u64>,
    /// With `concurrency`: how long a lease lives if it is never given back, 1ms to 366d
    /// (it is renewed while its response is in flight).
    #[schemars(extend("default" = DEFAULT_LEASE_TTL))]
    pub(super) lease_ttl: Option<String>,
    /// `true`: the gateway takes the key's budget from Redis in batches and decides in its
    /// own memory, never admitting more than Redis granted; see [Local
    /// quota](#local-quota) and `[local_quota]`. Not with `policy`, `concurrency`, `count =
    /// [statuses]` or `mode = "shadow"`.
    #[serde(default)]
    pub(super) local_quota: bool,
}

/// A lease's length when the rule does not say: long enough for a slow response, short
/// enough that a gateway that died gives its slots back within a minute.
pub(super) const DEFAULT_LEASE_TTL: &str = "60s";

fn default_key() -> String {
    "ip".into()
}
fn default_cost() -> u64 {
    1
}
fn default_rule_mode() -> String {
    "enforce".into()
}
fn default_on_failure() -> String {
    "local".into()
}
fn default_on_module_error() -> String {
    "closed".into()
}

/// `count = "all"` or `count = [401, 403]`.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum CountSection {
    Word(String),
    Statuses(Vec<u16>),
}

/// The rules alone, as stored in Redis under `[redis] rules_key`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RulesDocument {
    #[serde(default)]
    pub(super) headers: HeadersSection,
    #[serde(default, rename = "rule")]
    pub(super) rules: Vec<RuleSection>,
    pub(super) default: Option<RuleSection>,
}
