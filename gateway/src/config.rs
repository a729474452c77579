//! The configuration file: TOML read into checked settings. Every mistake is found here,
//! at start or reload, so that a running gateway never meets a rule it cannot apply.

use crate::pattern::{PathPattern, PathPolicy};
use crate::rules::{call_args, Counting, KeySource, Limit, OnFailure, Rule, RuleSet, Tier};
use ipnet::IpNet;
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Everything the file sets. `rules` may change on reload; the rest needs a restart.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerSettings,
    pub redis: RedisSettings,
    pub deny_cache_capacity: usize,
    pub rules: RuleSet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward allowed requests to the upstream.
    Proxy,
    /// Answer whether a request may pass, for a proxy that asks first.
    Check,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub mode: Mode,
    /// `scheme://authority` of the upstream, without a trailing slash (proxy mode).
    pub upstream: Option<hyper::Uri>,
    pub trusted_proxies: Vec<IpNet>,
    pub reload_interval: Duration,
    pub check_deny_status: u16,
    /// Which headers carry the request asked about in check mode.
    pub check_headers: CheckHeaders,
    /// How long the upstream may take to start its answer before the gateway says 504.
    pub upstream_timeout: Duration,
    /// `[connections]`.
    pub connections: crate::connection_limits::ConnectionLimits,
    /// `[client_ip]`: the network a `key = "ip"` rule counts a client by.
    pub client_prefixes: crate::client_ip::Prefixes,
    /// `[requests]`: path canonicalisation and the head size cap.
    pub requests: crate::request_policy::RequestPolicy,
}

impl ServerSettings {
    pub fn is_trusted_proxy(&self, ip: IpAddr) -> bool {
        crate::client_ip::is_trusted(ip, &self.trusted_proxies)
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
    pub fn names(self) -> [&'static str; 2] {
        match self {
            CheckHeaders::Original => ["x-original-method", "x-original-uri"],
            CheckHeaders::Forwarded => ["x-forwarded-method", "x-forwarded-uri"],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    Single(String),
    Cluster(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct RedisSettings {
    pub target: RedisTarget,
    pub deadline: Duration,
    pub key_prefix: String,
    pub breaker_failures: u32,
    pub breaker_open: Duration,
    /// A Redis key holding rules (`[[rule]]`, `[default]`, `[headers]`) that, while it
    /// exists, replace the file's; read every `rules_refresh`.
    pub rules_key: Option<String>,
    pub rules_refresh: Duration,
}

/// The largest integer a structured header field can carry.
const MAX_FIELD_INTEGER: u64 = 999_999_999_999_999;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    server: ServerSection,
    #[serde(default)]
    redis: RedisSection,
    #[serde(default)]
    headers: HeadersSection,
    #[serde(default)]
    deny_cache: DenyCacheSection,
    #[serde(default, rename = "rule")]
    rules: Vec<RuleSection>,
    default: Option<RuleSection>,
    #[serde(default)]
    connections: crate::connection_limits::ConnectionSection,
    #[serde(default)]
    client_ip: crate::client_ip::PrefixSection,
    #[serde(default)]
    requests: crate::request_policy::RequestsSection,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerSection {
    listen: String,
    #[serde(default = "default_admin_listen")]
    admin_listen: String,
    #[serde(default = "default_mode")]
    mode: String,
    upstream: Option<String>,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    #[serde(default = "default_reload_interval_ms")]
    reload_interval_ms: u64,
    #[serde(default = "default_check_deny_status")]
    check_deny_status: u16,
    #[serde(default = "default_check_headers")]
    check_headers: String,
    #[serde(default = "default_upstream_timeout_ms")]
    upstream_timeout_ms: u64,
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
struct RedisSection {
    url: Option<String>,
    cluster: Option<Vec<String>>,
    deadline_ms: u64,
    key_prefix: String,
    breaker_failures: u32,
    breaker_open_ms: u64,
    rules_key: Option<String>,
    rules_refresh_ms: u64,
}

impl Default for RedisSection {
    fn default() -> Self {
        RedisSection {
            url: None,
            cluster: None,
            deadline_ms: 5,
            key_prefix: "rl:".into(),
            breaker_failures: 5,
            breaker_open_ms: 1000,
            rules_key: None,
            rules_refresh_ms: 5000,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct HeadersSection {
    legacy: bool,
    fail_open: String,
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
struct DenyCacheSection {
    capacity: usize,
}

impl Default for DenyCacheSection {
    fn default() -> Self {
        DenyCacheSection { capacity: 10_000 }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSection {
    name: Option<String>,
    methods: Option<Vec<String>>,
    path: Option<String>,
    #[serde(default = "default_key")]
    key: String,
    #[serde(default)]
    per_endpoint: bool,
    limits: Option<Vec<String>>,
    algorithm: Option<String>,
    burst: Option<u64>,
    policy: Option<String>,
    #[serde(default = "default_cost")]
    cost: u64,
    count: Option<CountSection>,
    #[serde(default = "default_rule_mode")]
    mode: String,
    #[serde(default = "default_on_failure")]
    on_redis_failure: String,
    /// An error reply means a misconfiguration: closed unless the rule says otherwise.
    #[serde(default = "default_on_module_error")]
    on_module_error: String,
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
    "open".into()
}
fn default_on_module_error() -> String {
    "closed".into()
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CountSection {
    Word(String),
    Statuses(Vec<u16>),
}

/// Reads and checks the file at `path`.
pub fn load(path: &Path) -> Result<Config, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&text)
}

/// Checks a configuration given as TOML text.
pub fn parse(text: &str) -> Result<Config, String> {
    let file: FileConfig = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut server = server_settings(file.server)?;
    server.connections = file.connections.limits()?;
    server.client_prefixes = file.client_ip.prefixes()?;
    server.requests = crate::request_policy::request_policy(file.requests)?;
    let redis = redis_settings(file.redis)?;
    let rules = rule_set(
        file.headers,
        file.rules,
        file.default,
        server.mode,
        &server.requests.paths,
    )?;
    Ok(Config {
        server,
        redis,
        deny_cache_capacity: file.deny_cache.capacity,
        rules,
    })
}

/// The rules alone, as stored in Redis under `[redis] rules_key`: `[headers]`,
/// `[[rule]]` and `[default]` in the file's format, checked for a gateway in `mode` whose
/// requests' paths are canonicalised under the default `[requests]`.
pub fn parse_rules(text: &str, mode: Mode) -> Result<RuleSet, String> {
    parse_rules_with(text, mode, &PathPolicy::default())
}

/// [`parse_rules`] for a gateway whose requests' paths are canonicalised under `paths`.
pub fn parse_rules_with(text: &str, mode: Mode, paths: &PathPolicy) -> Result<RuleSet, String> {
    let document: RulesDocument = toml::from_str(text).map_err(|e| e.to_string())?;
    rule_set(
        document.headers,
        document.rules,
        document.default,
        mode,
        paths,
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesDocument {
    #[serde(default)]
    headers: HeadersSection,
    #[serde(default, rename = "rule")]
    rules: Vec<RuleSection>,
    default: Option<RuleSection>,
}

fn rule_set(
    headers: HeadersSection,
    sections: Vec<RuleSection>,
    default: Option<RuleSection>,
    mode: Mode,
    paths: &PathPolicy,
) -> Result<RuleSet, String> {
    let mut rules = Vec::with_capacity(sections.len());
    for (index, section) in sections.into_iter().enumerate() {
        let rule = rule(section, RulePlace::List, paths)
            .map_err(|e| format!("[[rule]] number {}: {e}", index + 1))?;
        if rules.iter().any(|r: &Arc<Rule>| r.name == rule.name) {
            return Err(format!("two rules are named '{}'", rule.name));
        }
        rules.push(Arc::new(rule));
    }
    let default = default
        .map(|section| rule(section, RulePlace::Default, paths).map(Arc::new))
        .transpose()
        .map_err(|e| format!("[default]: {e}"))?;
    if mode == Mode::Check && rules.iter().chain(&default).any(|r| r.counts_by_status()) {
        return Err(
            "count = [statuses] needs mode = \"proxy\": in check mode the gateway never sees \
             the response"
                .into(),
        );
    }
    let fail_open_header = hyper::header::HeaderName::from_bytes(headers.fail_open.as_bytes())
        .map_err(|_| {
            format!(
                "[headers] fail_open '{}' is not a header name",
                headers.fail_open
            )
        })?;
    Ok(RuleSet {
        rules,
        default,
        legacy_headers: headers.legacy,
        fail_open_header,
    })
}

fn server_settings(section: ServerSection) -> Result<ServerSettings, String> {
    let address = |name: &str, value: &str| {
        value
            .parse::<SocketAddr>()
            .map_err(|_| format!("[server] {name} '{value}' is not an address like 127.0.0.1:8080"))
    };
    let mode = match section.mode.as_str() {
        "proxy" => Mode::Proxy,
        "check" => Mode::Check,
        other => {
            return Err(format!(
                "[server] mode '{other}' must be \"proxy\" or \"check\""
            ))
        }
    };
    let upstream = match (&section.upstream, mode) {
        (Some(url), _) => Some(upstream_uri(url)?),
        (None, Mode::Proxy) => return Err("[server] upstream is needed in mode = \"proxy\"".into()),
        (None, Mode::Check) => None,
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
    Ok(ServerSettings {
        check_headers,
        upstream_timeout: Duration::from_millis(section.upstream_timeout_ms),
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

fn upstream_uri(url: &str) -> Result<hyper::Uri, String> {
    let bad = || format!("[server] upstream '{url}' must be like http://127.0.0.1:9000");
    let uri: hyper::Uri = url.parse().map_err(|_| bad())?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err(bad());
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!(
            "[server] upstream '{url}' must have no path or query"
        ));
    }
    Ok(uri)
}

fn redis_settings(section: RedisSection) -> Result<RedisSettings, String> {
    let target = match (section.url, section.cluster) {
        (Some(_), Some(_)) => return Err("[redis] has both url and cluster: choose one".into()),
        (Some(url), None) => RedisTarget::Single(url),
        (None, Some(urls)) if urls.is_empty() => {
            return Err("[redis] cluster needs at least one node URL".into())
        }
        (None, Some(urls)) => RedisTarget::Cluster(urls),
        (None, None) => RedisTarget::Single("redis://127.0.0.1:6379".into()),
    };
    let urls = match &target {
        RedisTarget::Single(url) => std::slice::from_ref(url),
        RedisTarget::Cluster(urls) => urls.as_slice(),
    };
    for url in urls {
        redis::Client::open(url.as_str()).map_err(|e| format!("[redis] '{url}': {e}"))?;
    }
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
    if section.deadline_ms == 0 {
        return Err("[redis] deadline_ms must be at least 1".into());
    }
    if section.breaker_failures == 0 {
        return Err("[redis] breaker_failures must be at least 1".into());
    }
    Ok(RedisSettings {
        target,
        deadline: Duration::from_millis(section.deadline_ms),
        key_prefix: section.key_prefix,
        breaker_failures: section.breaker_failures,
        breaker_open: Duration::from_millis(section.breaker_open_ms),
        rules_key: section.rules_key.filter(|k| !k.is_empty()),
        rules_refresh: Duration::from_millis(section.rules_refresh_ms.max(100)),
    })
}

enum RulePlace {
    List,
    Default,
}

fn rule(section: RuleSection, place: RulePlace, paths: &PathPolicy) -> Result<Rule, String> {
    let name = match place {
        RulePlace::Default => {
            if section.name.is_some() || section.methods.is_some() || section.path.is_some() {
                return Err(
                    "takes no name, methods or path (it applies to everything else)".into(),
                );
            }
            "default".to_owned()
        }
        RulePlace::List => {
            let name = section.name.clone().ok_or("needs a name")?;
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return Err(format!(
                    "name '{name}' must be letters, digits, '-', '_' or '.'"
                ));
            }
            if name.len() > crate::rules::MAX_RULE_NAME_BYTES {
                return Err(format!(
                    "name '{name}' is longer than {} bytes",
                    crate::rules::MAX_RULE_NAME_BYTES
                ));
            }
            if name == "default" {
                return Err("the name 'default' belongs to the [default] rule".into());
            }
            if section.path.is_none() && section.methods.is_none() {
                return Err(format!("rule '{name}' needs a path or methods to match"));
            }
            name
        }
    };
    let methods = section
        .methods
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let upper = m.to_ascii_uppercase();
            hyper::Method::from_bytes(upper.as_bytes())
                .ok()
                .filter(|_| upper.len() <= crate::methods::MAX_METHOD_BYTES)
                .map(|_| upper)
                .ok_or_else(|| format!("method '{m}' is not an HTTP method of at most 32 bytes"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let path = section
        .path
        .as_deref()
        .map(PathPattern::parse)
        .transpose()?;
    // A pattern that no canonical path can match would leave its endpoint unlimited.
    if let Some(pattern) = &path {
        pattern.check_canonical(paths)?;
    }
    let key = key_source(&section.key)?;
    let limit = limit(&section)?;
    let count = match section.count {
        None => Counting::All,
        Some(CountSection::Word(word)) if word == "all" => Counting::All,
        Some(CountSection::Word(word)) => {
            return Err(format!(
                "count '{word}' must be \"all\" or a list of statuses"
            ))
        }
        Some(CountSection::Statuses(statuses)) => {
            if statuses.is_empty() || statuses.iter().any(|s| !(100..=599).contains(s)) {
                return Err("count must list HTTP statuses (100-599)".into());
            }
            Counting::Statuses(statuses)
        }
    };
    let shadow = match section.mode.as_str() {
        "enforce" => false,
        "shadow" => true,
        other => return Err(format!("mode '{other}' must be \"enforce\" or \"shadow\"")),
    };
    let on_failure = OnFailure {
        redis_closed: open_or_closed("on_redis_failure", &section.on_redis_failure)?,
        error_closed: open_or_closed("on_module_error", &section.on_module_error)?,
    };
    Ok(Rule::new(
        name,
        methods,
        path,
        key,
        section.per_endpoint,
        limit,
        count,
        shadow,
        on_failure,
    ))
}

/// `"open"` (false) or `"closed"` (true), the value of the setting `name`.
fn open_or_closed(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "open" => Ok(false),
        "closed" => Ok(true),
        other => Err(format!("{name} '{other}' must be \"open\" or \"closed\"")),
    }
}

fn key_source(key: &str) -> Result<KeySource, String> {
    if key == "ip" {
        return Ok(KeySource::ClientIp);
    }
    if let Some(header) = key.strip_prefix("header:") {
        return hyper::header::HeaderName::from_bytes(header.as_bytes())
            .map(KeySource::Header)
            .map_err(|_| format!("key '{key}': '{header}' is not a header name"));
    }
    if let Some(index) = key.strip_prefix("segment:") {
        return match index.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(KeySource::Segment(n)),
            _ => Err(format!("key '{key}': the segment number must be 1 or more")),
        };
    }
    Err(format!(
        "key '{key}' must be \"ip\", \"header:<name>\" or \"segment:<n>\""
    ))
}

fn limit(section: &RuleSection) -> Result<Limit, String> {
    if section.cost == 0 {
        return Err("cost must be at least 1".into());
    }
    match (&section.limits, &section.policy) {
        (Some(_), Some(_)) => Err("has both limits and policy: choose one".into()),
        (None, None) => Err("needs limits (e.g. [\"5/1m\"]) or a policy name".into()),
        (None, Some(policy)) => {
            if section.algorithm.is_some() || section.burst.is_some() {
                return Err(
                    "algorithm and burst belong to the policy, not to a rule naming one".into(),
                );
            }
            if policy.is_empty()
                || policy
                    .bytes()
                    .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
            {
                return Err(format!("policy name '{policy}' is empty or has spaces"));
            }
            let limit = Limit::Policy {
                name: policy.clone(),
                cost: section.cost,
            };
            crate::module_grammar::check_call(&call_args(&limit))?;
            Ok(limit)
        }
        (Some(limits), None) if limits.is_empty() => Ok(Limit::Unlimited),
        (Some(limits), None) => {
            // The tier count, the algorithm's name, the sliding log's cap and where BURST
            // applies are the module's grammar: `check_call` applies it to the call.
            let tiers = limits
                .iter()
                .map(|l| tier(l))
                .collect::<Result<Vec<_>, _>>()?;
            let algorithm = section.algorithm.clone();
            let limit = Limit::Tiers {
                tiers: tiers.clone(),
                algorithm,
                burst: section.burst,
                cost: section.cost,
            };
            crate::module_grammar::check_call(&call_args(&limit))?;
            // A request costing more than a tier can ever hold would be denied forever.
            let capacity = |tier: &Tier| section.burst.unwrap_or(tier.limit);
            if let Some(tier) = tiers.iter().find(|t| section.cost > capacity(t)) {
                return Err(format!(
                    "cost {} is more than the {} a request can ever get under {}/{}ms",
                    section.cost,
                    capacity(tier),
                    tier.limit,
                    tier.window_ms
                ));
            }
            Ok(limit)
        }
    }
}

/// `count/window`, e.g. `5/1m`.
fn tier(text: &str) -> Result<Tier, String> {
    let bad = || format!("limit '{text}' must be <count>/<window>, e.g. \"5/1m\"");
    let (count, window) = text.split_once('/').ok_or_else(bad)?;
    let limit: u64 = count.trim().parse().map_err(|_| bad())?;
    if limit == 0 {
        return Err(format!("limit '{text}': the count must be at least 1"));
    }
    // Header integers (RFC 8941) have at most 15 digits.
    if limit > MAX_FIELD_INTEGER {
        return Err(format!(
            "limit '{text}': the count must be at most {MAX_FIELD_INTEGER}"
        ));
    }
    // The module's duration grammar; its cap on windows is checked with the whole call.
    let window_ms =
        ratelimit_core::duration::parse_duration_ms(window.trim().as_bytes()).map_err(|error| {
            let reason =
                crate::module_grammar::reason(&ratelimit_core::args::ArgError::Window(error));
            format!("limit '{text}': {reason}")
        })?;
    let window_ms = u64::try_from(window_ms).map_err(|_| bad())?;
    Ok(Tier { limit, window_ms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Failure;

    const MINIMAL: &str =
        "[server]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:9000\"\n";

    fn with(rest: &str) -> Result<Config, String> {
        parse(&format!("{MINIMAL}{rest}"))
    }

    #[test]
    fn the_example_file_parses() {
        let text = include_str!("../rules.example.toml");
        let config = parse(text).unwrap();
        assert_eq!(config.rules.rules.len(), 3);
        assert!(config.rules.default.is_some());
        assert_eq!(config.redis.deadline, Duration::from_millis(5));
        // The example spells out the [requests] defaults.
        assert_eq!(config.server.requests, Default::default());
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5\"]\n", "limit '5'"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"0/1m\"]\n", "at least 1"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\n", "needs limits"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\npolicy = \"p\"\n", "both limits and policy"),
            ("[[rule]]\npath = \"/a\"\nlimits = [\"5/1m\"]\n", "needs a name"),
            ("[[rule]]\nname = \"a\"\npath = \"a\"\nlimits = [\"5/1m\"]\n", "must start with '/'"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\nkey = \"cookie\"\n", "key 'cookie'"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\ncount = [42]\n", "statuses"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\nspeed = 3\n", "speed"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\n[[rule]]\nname = \"a\"\npath = \"/b\"\nlimits = [\"5/1m\"]\n", "two rules"),
            ("[default]\nname = \"x\"\nlimits = [\"5/1m\"]\n", "[default]"),
            ("[redis]\ndeadline_ms = 0\n", "deadline_ms"),
            ("[redis]\nkey_prefix = \"rl:{x}:\"\n", "key_prefix"),
            ("[[rule]]\nname = \"default\"\npath = \"/a\"\nlimits = [\"5/1m\"]\n", "belongs"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\ncost = 6\n", "cost 6"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"1000000000000000/1m\"]\n", "at most"),
            ("[[rule]]\nname = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\npath = \"/a\"\nlimits = [\"5/1m\"]\n", "longer than 48"),
            ("[redis]\nkey_prefix = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n", "longer than 32"),
            ("[[rule]]\nname = \"a\"\nmethods = [\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"]\nlimits = [\"5/1m\"]\n", "at most 32"),
            ("[requests]\nmax_path_segments = 0\n", "max_path_segments"),
        ];
        for (text, expected) in cases {
            let error = with(text)
                .err()
                .unwrap_or_else(|| panic!("accepted: {text}"));
            assert!(
                error.contains(expected),
                "{text}: '{error}' lacks '{expected}'"
            );
        }
    }

    /// What the module refuses is refused when the rules load, with the module's own
    /// reason: the expected texts come from the core's parser, not from a copy here.
    #[test]
    fn the_module_grammar_is_the_cores() {
        use ratelimit_core::args::{ArgError, Settings};
        use ratelimit_core::duration::DurationError;
        use ratelimit_core::limiter::AlgorithmKind;
        let rule = |rest: &str| format!("[[rule]]\nname = \"a\"\npath = \"/a\"\n{rest}\n");
        let settings = Settings::default();
        let nine = ["\"1/1s\""; 9].join(", ");
        let cases = [
            (
                "limits = [\"5/400d\"]".to_owned(),
                ArgError::WindowAboveMax(settings.max_window_ms),
            ),
            (
                "limits = [\"5/367d\"]".to_owned(),
                ArgError::WindowAboveMax(settings.max_window_ms),
            ),
            (
                "limits = [\"5/1w\"]".to_owned(),
                ArgError::Window(DurationError::UnknownUnit),
            ),
            (
                "limits = [\"5/0s\"]".to_owned(),
                ArgError::Window(DurationError::TooShort),
            ),
            (format!("limits = [{nine}]"), ArgError::TooManyTiers),
            (
                "limits = [\"5/1m\"]\nalgorithm = \"leaky\"".to_owned(),
                ArgError::Algo,
            ),
            (
                "limits = [\"5/1m\"]\nburst = 3".to_owned(),
                ArgError::BurstNotApplicable,
            ),
            (
                "limits = [\"5/1m\", \"9/1h\"]\nalgorithm = \"gcra\"\nburst = 3".to_owned(),
                ArgError::BurstNotApplicable,
            ),
            (
                "limits = [\"5/1m\"]\nalgorithm = \"token\"\nburst = 0".to_owned(),
                ArgError::Burst,
            ),
            (
                "limits = [\"10001/1m\"]\nalgorithm = \"log\"".to_owned(),
                ArgError::LimitTooLarge(AlgorithmKind::Log, settings.max_log_limit),
            ),
        ];
        for (rest, expected) in cases {
            let text = rule(&rest);
            let error = with(&text)
                .err()
                .unwrap_or_else(|| panic!("accepted: {text}"));
            let reason = crate::module_grammar::reason(&expected);
            assert!(
                error.contains(&reason),
                "{text}: '{error}' lacks '{reason}'"
            );
        }
        assert!(with(&rule("limits = [\"5/366d\"]\nalgorithm = \"log\"")).is_ok());
        assert!(with(&rule("limits = [\"10000/1m\"]\nalgorithm = \"log\"")).is_ok());
        let error = with(&rule("limits = [\"5/1m\"]\non_module_error = \"maybe\"")).unwrap_err();
        assert!(error.contains("on_module_error 'maybe'"), "{error}");
    }

    #[test]
    fn module_errors_close_a_rule_unless_it_says_open() {
        let rule = |rest: &str| {
            let text = format!("[default]\nlimits = [\"5/1m\"]\n{rest}\n");
            with(&text).unwrap().rules.default.unwrap().on_failure
        };
        let default = rule("");
        assert!(default.closes(Failure::Error) && !default.closes(Failure::Timeout));
        let open = rule("on_module_error = \"open\"\non_redis_failure = \"closed\"");
        assert!(!open.closes(Failure::Error) && open.closes(Failure::Connection));
    }

    #[test]
    fn check_mode_refuses_status_counting() {
        let text = "[server]\nlisten = \"127.0.0.1:8080\"\nmode = \"check\"\n[default]\nlimits = [\"5/1m\"]\ncount = [401]\n";
        assert!(parse(text).unwrap_err().contains("check mode"));
    }

    #[test]
    fn rules_alone_as_stored_in_redis() {
        let set = parse_rules(
            "[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\n",
            Mode::Proxy,
        )
        .unwrap();
        assert_eq!(set.rules.len(), 1);
        assert!(
            parse_rules("[server]\nlisten = \"127.0.0.1:1\"\n", Mode::Proxy)
                .unwrap_err()
                .contains("server")
        );
        assert!(parse_rules(
            "[default]\nlimits = [\"5/1m\"]\ncount = [401]\n",
            Mode::Check
        )
        .is_err());
        let error = parse_rules_with(
            "[[rule]]\nname = \"a\"\npath = \"/a/./b\"\nlimits = [\"5/1m\"]\n",
            Mode::Proxy,
            &PathPolicy::default(),
        )
        .unwrap_err();
        assert!(error.contains("canonical"), "{error}");
    }

    #[test]
    fn proxy_mode_needs_an_upstream() {
        assert!(parse("[server]\nlisten = \"127.0.0.1:8080\"\n")
            .unwrap_err()
            .contains("upstream"));
    }
}
