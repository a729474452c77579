//! The configuration file: TOML read into checked settings. Every mistake is found here,
//! at start or reload, so that a running gateway never meets a rule it cannot apply.
//!
//! - `schema`: the file as written, with its defaults;
//! - `settings`: `[server]` and `[redis]`, checked;
//! - `rule_set` and `limit`: the rules, compiled;
//! - `reference`: the configuration reference's tables, generated from `schema`.

mod concurrency;
mod envoy;
mod error;
mod limit;
mod local_quota;
mod pem;
mod redis_connection;
#[doc(hidden)]
pub mod reference;
mod rule_set;
mod schema;
mod settings;
mod upstream_target;

pub use error::ConfigError;

pub(crate) use redis_connection::{host_port, redacted};
pub use redis_connection::{SecretError, SecretPlace, SecretSource, TlsMaterial, TlsSettings};
pub use settings::{
    BackendChoice, CheckHeaders, FunctionsLoad, Mode, RedisConnection, RedisSettings, RedisTarget,
    ServerSettings,
};
pub(crate) use upstream_target::{Roots, UpstreamTarget, UpstreamTls};

use crate::rules::pattern::PathPolicy;
use crate::rules::RuleSet;
use rule_set::rule_set;
use schema::{FileConfig, RulesDocument};
use settings::{redis_settings, server_settings};
use std::path::Path;

/// Everything the file sets. `rules` may change on reload; the rest needs a restart.
#[derive(Debug, Clone)]
pub struct Config {
    /// `[server]`: listeners, mode, upstream, trusted proxies.
    pub server: ServerSettings,
    /// `[redis]`: where the module runs and how long to wait for it.
    pub redis: RedisSettings,
    /// `[deny_cache] capacity`: keys remembered as denied, at most (entries, not bytes).
    pub deny_cache_capacity: usize,
    /// The `[[rule]]`s and `[default]`, checked.
    pub rules: RuleSet,
    /// `[envoy]`, when the gRPC service is on.
    pub envoy: Option<EnvoySettings>,
    /// `[local_quota]`: how rules with `local_quota = true` take their batches.
    pub local_quota: crate::decider::quota::QuotaSettings,
}

/// `[envoy]`, checked; the descriptors are loaded from `descriptors` at start.
#[derive(Debug, Clone)]
pub struct EnvoySettings {
    /// Where the gRPC listener binds (an address, or a name resolved at start).
    pub listen: crate::net::listen::ListenAddress,
    /// As written; [`load`] makes a relative path relative to the TOML file's directory.
    pub descriptors: std::path::PathBuf,
    /// How the answer is written: headers, global modes, dynamic metadata.
    pub answer: crate::front::envoy::settings::AnswerSettings,
    /// The gRPC listener's caps on connections and streams.
    pub limits: crate::front::envoy::grpc_listener::GrpcLimits,
    /// Descriptor files of one domain are merged (envoyproxy/ratelimit's
    /// `MERGE_DOMAIN_CONFIG`), instead of refused.
    pub merge_domains: bool,
}

/// Reads and checks the file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let mut config = parse(&text)?;
    config
        .server
        .read_files(path.parent())
        .map_err(ConfigError::Invalid)?;
    config
        .redis
        .read_files(path.parent())
        .map_err(ConfigError::Invalid)?;
    if let Some(envoy) = &mut config.envoy {
        if envoy.descriptors.is_relative() {
            if let Some(dir) = path.parent() {
                envoy.descriptors = dir.join(&envoy.descriptors);
            }
        }
    }
    Ok(config)
}

/// Checks a configuration given as TOML text.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let file: FileConfig = toml::from_str(text).map_err(ConfigError::Toml)?;
    checked(file).map_err(ConfigError::Invalid)
}

/// The configuration `file` says, every section checked; the error names the section,
/// the rule and the field.
fn checked(file: FileConfig) -> Result<Config, String> {
    let mut server = server_settings(file.server)?;
    server.connections = file.connections.limits()?;
    server.client_prefixes = file.client_ip.prefixes()?;
    server.requests = crate::rules::request_policy::request_policy(file.requests)?;
    // In check mode the proxy forwards the request, headers and all: the gateway can leave
    // a header out of its decision but not out of what the upstream gets.
    if server.mode == Mode::Check
        && server.requests.underscore_headers == crate::rules::header_names::UnderscoreHeaders::Drop
    {
        return Err(
            "[requests] headers_with_underscores_action = \"drop_header\" needs mode = \
                    \"proxy\": in check mode the proxy forwards the headers; use \
                    \"reject_request\" or \"allow\" (and have the proxy drop them: nginx's \
                    default underscores_in_headers off does)"
                .into(),
        );
    }
    let has_redis = file.redis.is_some();
    let redis = redis_settings(file.redis.unwrap_or_default())?;
    let rules = rule_set(
        file.headers,
        file.rules,
        file.default,
        server.mode,
        &server.requests.paths,
    )?;
    // Neither a server to count in nor a rule to count by: the file limits nothing, which
    // is a mistake to say at `--check-config`, not a gateway to run.
    if !has_redis && rules.count() == 0 && file.envoy.is_none() {
        return Err(
            "the file has neither [redis] nor any rule ([[rule]], [default] or [envoy]): it \
             would limit nothing"
                .into(),
        );
    }
    let envoy = file.envoy.map(envoy::envoy_settings).transpose()?;
    Ok(Config {
        server,
        redis,
        deny_cache_capacity: file.deny_cache.capacity,
        rules,
        envoy,
        local_quota: local_quota::local_quota(file.local_quota)?,
    })
}

/// The rules alone, as stored in Redis under `[redis] rules_key`: `[headers]`,
/// `[[rule]]` and `[default]` in the file's format, checked for a gateway in `mode` whose
/// requests' paths are canonicalised under the default `[requests]`.
pub fn parse_rules(text: &str, mode: Mode) -> Result<RuleSet, ConfigError> {
    parse_rules_with(text, mode, &PathPolicy::default())
}

/// [`parse_rules`] for a gateway whose requests' paths are canonicalised under `paths`.
pub(crate) fn parse_rules_with(
    text: &str,
    mode: Mode,
    paths: &PathPolicy,
) -> Result<RuleSet, ConfigError> {
    let document: RulesDocument = toml::from_str(text).map_err(ConfigError::Toml)?;
    rule_set(
        document.headers,
        document.rules,
        document.default,
        mode,
        paths,
    )
    .map_err(ConfigError::Invalid)
}

/// `rest` after the `[server]` lines every file needs, parsed: for the tests of each part.
#[cfg(test)]
pub(crate) fn parse_after_server(rest: &str) -> Result<Config, String> {
    const MINIMAL: &str =
        "[server]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:9000\"\n";
    parse(&format!("{MINIMAL}{rest}")).map_err(|e| e.to_string())
}

/// Asserts that each text (after the `[server]` lines) is refused with an error naming
/// what its case says.
#[cfg(test)]
fn assert_refused(cases: &[(&str, &str)]) {
    for (text, expected) in cases {
        let error = parse_after_server(text)
            .err()
            .unwrap_or_else(|| panic!("accepted: {text}"));
        assert!(
            error.contains(expected),
            "{text}: '{error}' lacks '{expected}'"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_example_file_parses() {
        let text = include_str!("../../rules.example.toml");
        let config = parse(text).unwrap();
        assert_eq!(config.rules.rules.len(), 3);
        assert!(config.rules.default.is_some());
        assert_eq!(config.redis.deadline, Duration::from_millis(5));
        // The example spells out the [requests] defaults.
        assert_eq!(config.server.requests, Default::default());
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
                .to_string()
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
        .unwrap_err()
        .to_string();
        assert!(error.contains("canonical"), "{error}");
    }
}
