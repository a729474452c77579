//! The file as written: the TOML tables, each field with its default, before anything is
//! checked. [`super::settings`] and [`super::rule_set`] turn these into what the gateway
//! runs on; nothing here judges a value.

use serde::Deserialize;

/// The whole file.
#[derive(Deserialize)]
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

/// `[envoy]`: Envoy's rate limit service over gRPC, beside the HTTP listener.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EnvoySection {
    pub(super) listen: String,
    /// envoyproxy/ratelimit's YAML: a file or a directory of them, relative to this file.
    pub(super) descriptors: String,
    #[serde(default = "default_true")]
    pub(super) response_headers: bool,
    pub(super) max_connections: Option<usize>,
    pub(super) handshake_timeout_ms: Option<u64>,
    pub(super) request_timeout_ms: Option<u64>,
    /// envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`: files of one domain are merged.
    #[serde(default)]
    pub(super) merge_domains: bool,
    /// envoyproxy/ratelimit's `SHADOW_MODE`: every status keeps its code, the overall code
    /// is always OK (counted in `rl_gateway_envoy_total{result="shadow_mode"}`).
    #[serde(default)]
    pub(super) shadow_mode: bool,
    /// envoyproxy/ratelimit's `QUOTA_MODE`: every descriptor is a quota descriptor.
    #[serde(default)]
    pub(super) quota_mode: bool,
    /// envoyproxy/ratelimit's `RESPONSE_DYNAMIC_METADATA`: the request and the passing
    /// descriptors' `metadata` in the response's `dynamic_metadata`.
    #[serde(default)]
    pub(super) response_dynamic_metadata: bool,
    /// envoyproxy/ratelimit's `LIMIT_RESPONSE_HEADERS_ENABLED`: its three headers of the
    /// status with the least remaining.
    #[serde(default)]
    pub(super) limit_headers: bool,
    /// `LIMIT_LIMIT_HEADER` (default `RateLimit-Limit`); only with `limit_headers`.
    pub(super) limit_header: Option<String>,
    /// `LIMIT_REMAINING_HEADER` (default `RateLimit-Remaining`); only with `limit_headers`.
    pub(super) remaining_header: Option<String>,
    /// `LIMIT_RESET_HEADER` (default `RateLimit-Reset`); only with `limit_headers`.
    pub(super) reset_header: Option<String>,
    /// `NEAR_LIMIT_RATIO`: above this share of a limit, hits count as `near_limit` in
    /// `rl_gateway_envoy_hits_total`; in (0, 1], default 0.8.
    pub(super) near_limit_ratio: Option<f64>,
}

fn default_true() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ServerSection {
    pub(super) listen: String,
    #[serde(default = "default_admin_listen")]
    pub(super) admin_listen: String,
    #[serde(default = "default_mode")]
    pub(super) mode: String,
    pub(super) upstream: Option<String>,
    /// A PEM bundle of the CAs that sign an `https://` upstream's certificate, instead of
    /// the system's roots.
    pub(super) upstream_ca_file: Option<String>,
    /// The client certificate (PEM) for an upstream that asks for one.
    pub(super) upstream_cert_file: Option<String>,
    /// The client certificate's private key (PEM).
    pub(super) upstream_key_file: Option<String>,
    /// The name the upstream's certificate is checked against (and SNI sends) when not the
    /// URL's host.
    pub(super) upstream_server_name: Option<String>,
    #[serde(default)]
    pub(super) trusted_proxies: Vec<String>,
    #[serde(default = "default_reload_interval_ms")]
    pub(super) reload_interval_ms: u64,
    #[serde(default = "default_check_deny_status")]
    pub(super) check_deny_status: u16,
    #[serde(default = "default_check_headers")]
    pub(super) check_headers: String,
    #[serde(default = "default_upstream_timeout_ms")]
    pub(super) upstream_timeout_ms: u64,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RedisSection {
    pub(super) url: Option<String>,
    pub(super) cluster: Option<Vec<String>>,
    /// Redis Sentinel: the sentinels' `host:port`, asked for the primary of `master_name`.
    pub(super) sentinels: Option<Vec<String>>,
    /// The name the sentinels monitor the primary under (`sentinel monitor NAME ...`).
    pub(super) master_name: Option<String>,
    /// With `sentinels`: TLS to the sentinels and to the primary (a URL says it by
    /// `rediss://`).
    pub(super) tls: Option<bool>,
    /// A PEM bundle of the CAs that sign the servers' certificates, instead of the
    /// system's roots.
    pub(super) tls_ca_file: Option<String>,
    /// The client certificate (PEM), for servers that require one (`tls-auth-clients`).
    pub(super) tls_cert_file: Option<String>,
    /// The client certificate's private key (PEM).
    pub(super) tls_key_file: Option<String>,
    /// The name the server's certificate is checked against when not the URL's host.
    pub(super) tls_server_name: Option<String>,
    /// The ACL user, when not in the URL.
    pub(super) username: Option<String>,
    /// The environment variable holding the password (read at start, never logged).
    pub(super) password_env: Option<String>,
    /// The file holding the password, a trailing newline trimmed (a mounted secret).
    pub(super) password_file: Option<String>,
    /// The ACL user the sentinels themselves ask for.
    pub(super) sentinel_username: Option<String>,
    /// The environment variable holding the sentinels' password.
    pub(super) sentinel_password_env: Option<String>,
    /// The file holding the sentinels' password.
    pub(super) sentinel_password_file: Option<String>,
    pub(super) deadline_ms: u64,
    pub(super) key_prefix: String,
    pub(super) breaker_failures: u32,
    pub(super) breaker_open_ms: u64,
    pub(super) breaker_silence_ms: u64,
    /// A fixed number of gateways that `on_redis_failure = "local"` divides limits by;
    /// without it, the count of live gateways read from Redis by the heartbeat.
    pub(super) gateways: Option<u64>,
    pub(super) heartbeat_ms: u64,
    pub(super) rules_key: Option<String>,
    pub(super) rules_refresh_ms: u64,
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
            breaker_open_ms: 1000,
            breaker_silence_ms: 100,
            gateways: None,
            heartbeat_ms: 1000,
            rules_key: None,
            rules_refresh_ms: 5000,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct HeadersSection {
    pub(super) legacy: bool,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct DenyCacheSection {
    pub(super) capacity: usize,
}

impl Default for DenyCacheSection {
    fn default() -> Self {
        DenyCacheSection { capacity: 10_000 }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleSection {
    pub(super) name: Option<String>,
    pub(super) methods: Option<Vec<String>>,
    pub(super) path: Option<String>,
    #[serde(default = "default_key")]
    pub(super) key: String,
    #[serde(default)]
    pub(super) per_endpoint: bool,
    /// Matching goes on after this rule: later rules apply to the request too.
    #[serde(default)]
    pub(super) stack: bool,
    pub(super) limits: Option<Vec<String>>,
    pub(super) algorithm: Option<String>,
    pub(super) burst: Option<u64>,
    /// The IANA zone of the calendar windows (`"1000/month"`), UTC without it.
    pub(super) tz: Option<String>,
    /// The day a `month` window resets on (1 to 31).
    pub(super) anchor: Option<u64>,
    pub(super) policy: Option<String>,
    /// At most this many requests of one key in flight (proxy mode), each holding a lease.
    pub(super) concurrency: Option<u64>,
    /// How long a lease lasts unless released, e.g. `"30s"` (with `concurrency`).
    pub(super) lease_ttl: Option<String>,
    #[serde(default = "default_cost")]
    pub(super) cost: u64,
    pub(super) count: Option<CountSection>,
    #[serde(default = "default_rule_mode")]
    pub(super) mode: String,
    #[serde(default = "default_on_failure")]
    pub(super) on_redis_failure: String,
    /// An error reply means a misconfiguration: closed unless the rule says otherwise.
    #[serde(default = "default_on_module_error")]
    pub(super) on_module_error: String,
}

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
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum CountSection {
    Word(String),
    Statuses(Vec<u16>),
}

/// The rules alone, as stored in Redis under `[redis] rules_key`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RulesDocument {
    #[serde(default)]
    pub(super) headers: HeadersSection,
    #[serde(default, rename = "rule")]
    pub(super) rules: Vec<RuleSection>,
    pub(super) default: Option<RuleSection>,
}
