//! `[envoy]`, checked: the listener, the descriptors' path, the listener's bounds and how
//! the answer is written ([`AnswerSettings`]). Each refusal names the field.

use super::schema::EnvoySection;
use super::EnvoySettings;
use crate::front::envoy::grpc_listener::GrpcLimitFields;
use crate::front::envoy::settings::{AnswerSettings, LimitHeaders, DEFAULT_NEAR_LIMIT_RATIO};

/// The names our own RateLimit fields use (`response_headers`), which envoyproxy/ratelimit's
/// headers must not repeat: Envoy would add both values under one name.
const OUR_HEADERS: [&str; 3] = ["ratelimit", "ratelimit-policy", "retry-after"];

/// `[envoy]` checked.
pub(super) fn envoy_settings(section: EnvoySection) -> Result<EnvoySettings, String> {
    let listen = crate::net::listen::ListenAddress::parse(&section.listen).ok_or_else(|| {
        format!(
            "[envoy] listen '{}' is not an address like 127.0.0.1:8081 or a host:port like \
             localhost:8081",
            section.listen
        )
    })?;
    if section.local_quota && (section.shadow_mode || section.quota_mode) {
        return Err(
            "[envoy] local_quota = true with shadow_mode or quota_mode: their descriptors are \
             charged apart and never denied, so there is nothing to decide locally; turn one \
             off"
            .into(),
        );
    }
    let limits = GrpcLimitFields {
        max_connections: section.max_connections,
        handshake_timeout_ms: section.handshake_timeout_ms,
        request_timeout_ms: section.request_timeout_ms,
    }
    .limits()?;
    let answer = AnswerSettings {
        response_headers: section.response_headers,
        limit_headers: limit_headers(&section)?,
        shadow_mode: section.shadow_mode,
        quota_mode: section.quota_mode,
        local_quota: section.local_quota,
        response_dynamic_metadata: section.response_dynamic_metadata,
        near_limit_ratio: near_limit_ratio(section.near_limit_ratio)?,
    };
    Ok(EnvoySettings {
        listen,
        descriptors: section.descriptors.into(),
        answer,
        limits,
        merge_domains: section.merge_domains,
    })
}

/// `limit_headers` and the three names: each a valid HTTP header name, no two alike, none
/// of our own fields' when those are on too; a name given without `limit_headers` is a
/// mistake (it would do nothing).
fn limit_headers(section: &EnvoySection) -> Result<Option<LimitHeaders>, String> {
    let fields = [
        ("limit_header", &section.limit_header),
        ("remaining_header", &section.remaining_header),
        ("reset_header", &section.reset_header),
    ];
    if !section.limit_headers {
        if let Some((field, _)) = fields.iter().find(|(_, name)| name.is_some()) {
            return Err(format!(
                "[envoy] {field} is set but limit_headers is false: set limit_headers = true \
                 for the header to be sent"
            ));
        }
        return Ok(None);
    }
    let defaults = LimitHeaders::default();
    let chosen = [
        section.limit_header.clone().unwrap_or(defaults.limit),
        section
            .remaining_header
            .clone()
            .unwrap_or(defaults.remaining),
        section.reset_header.clone().unwrap_or(defaults.reset),
    ];
    let mut seen: Vec<String> = Vec::new();
    for ((field, _), name) in fields.iter().zip(&chosen) {
        let parsed = hyper::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("[envoy] {field} '{name}' is not an HTTP header name"))?;
        let lower = parsed.as_str().to_owned();
        if seen.contains(&lower) {
            return Err(format!(
                "[envoy] {field} '{name}' is the name of another of the limit headers"
            ));
        }
        if section.response_headers && OUR_HEADERS.contains(&lower.as_str()) {
            return Err(format!(
                "[envoy] {field} '{name}' is a header response_headers already sends: \
                 choose another name or set response_headers = false"
            ));
        }
        seen.push(lower);
    }
    let [limit, remaining, reset] = chosen;
    Ok(Some(LimitHeaders {
        limit,
        remaining,
        reset,
    }))
}

/// `near_limit_ratio`, in (0, 1].
fn near_limit_ratio(ratio: Option<f64>) -> Result<f64, String> {
    match ratio {
        None => Ok(DEFAULT_NEAR_LIMIT_RATIO),
        Some(r) if r > 0.0 && r <= 1.0 => Ok(r),
        Some(r) => Err(format!(
            "[envoy] near_limit_ratio {r} is not in (0, 1]: the share of a limit above which \
             hits are near it, e.g. 0.8"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{assert_refused, parse_after_server};

    const ENVOY: &str = "[envoy]\nlisten = \"127.0.0.1:8081\"\ndescriptors = \"d\"\n";

    #[test]
    fn the_answer_settings_default_to_the_peer_s() {
        let config = parse_after_server(ENVOY).unwrap();
        let answer = config.envoy.unwrap().answer;
        assert_eq!(answer, Default::default());
        assert!(answer.response_headers);
        assert_eq!(answer.near_limit_ratio, 0.8);
        let on = format!(
            "{ENVOY}shadow_mode = true\nquota_mode = true\nresponse_dynamic_metadata = true\n\
             limit_headers = true\nremaining_header = \"X-Left\"\nnear_limit_ratio = 1.0\n"
        );
        let answer = parse_after_server(&on).unwrap().envoy.unwrap().answer;
        assert!(answer.shadow_mode && answer.quota_mode && answer.response_dynamic_metadata);
        let headers = answer.limit_headers.unwrap();
        assert_eq!(headers.remaining, "X-Left");
        assert_eq!(headers.limit, "RateLimit-Limit");
        assert_eq!(answer.near_limit_ratio, 1.0);
    }

    #[test]
    fn inconsistent_answer_settings_are_refused_naming_the_field() {
        let case = |lines: &str| format!("{ENVOY}{lines}");
        let cases = [
            (
                case("near_limit_ratio = 0.0\n"),
                "near_limit_ratio 0 is not in (0, 1]",
            ),
            (case("near_limit_ratio = 1.5\n"), "near_limit_ratio 1.5"),
            (case("near_limit_ratio = nan\n"), "near_limit_ratio NaN"),
            (
                case("limit_header = \"X-Limit\"\n"),
                "limit_header is set but limit_headers is false",
            ),
            (
                case("limit_headers = true\nreset_header = \"bad name\"\n"),
                "reset_header 'bad name' is not an HTTP header name",
            ),
            (
                case("limit_headers = true\nlimit_header = \"\"\n"),
                "limit_header '' is not an HTTP header name",
            ),
            (
                case("limit_headers = true\nreset_header = \"ratelimit-remaining\"\n"),
                "reset_header 'ratelimit-remaining' is the name of another",
            ),
            (
                case("limit_headers = true\nlimit_header = \"RateLimit\"\n"),
                "limit_header 'RateLimit' is a header response_headers already sends",
            ),
        ];
        let cases: Vec<(&str, &str)> = cases.iter().map(|(t, e)| (t.as_str(), *e)).collect();
        assert_refused(&cases);
        // Our own field names are free once our fields are off.
        let own =
            case("response_headers = false\nlimit_headers = true\nlimit_header = \"RateLimit\"\n");
        assert!(parse_after_server(&own).is_ok());
    }
}
