//! envoyproxy/ratelimit's response headers (pure), `LIMIT_RESPONSE_HEADERS_ENABLED`:
//! the limit, the remaining and the seconds to reset of one status: the one with the least
//! remaining among those that show a limit, or the last enforced one over its limit.

use super::descriptors::Unit;
use super::settings::LimitHeaders;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};

/// The three headers of the status they show, named as `names` say; none when no status
/// shows a limit. `enforced[i]`: whether status `i` can make the answer OVER_LIMIT on its
/// own (neither shadow nor quota), whose denial then wins over any remaining count.
pub(super) fn limit_headers(
    statuses: &[DescriptorStatus],
    enforced: &[bool],
    names: &LimitHeaders,
) -> Vec<HeaderValue> {
    let mut shown: Option<&DescriptorStatus> = None;
    let mut least = u32::MAX;
    for (status, &enforced) in statuses.iter().zip(enforced) {
        if status.current_limit.is_none() {
            continue;
        }
        if enforced && status.code == Code::OverLimit as i32 {
            // As theirs: a denial sets the least to 0, so a later denial wins again.
            shown = Some(status);
            least = 0;
        } else if status.limit_remaining < least {
            shown = Some(status);
            least = status.limit_remaining;
        }
    }
    let Some(status) = shown else {
        return Vec::new();
    };
    let Some(limit) = &status.current_limit else {
        return Vec::new();
    };
    let reset = reset_seconds(status, limit.unit);
    [
        (&names.limit, limit.requests_per_unit.to_string()),
        (&names.remaining, status.limit_remaining.to_string()),
        (&names.reset, reset.to_string()),
    ]
    .into_iter()
    .map(|(key, value)| HeaderValue {
        key: key.clone(),
        value,
        ..Default::default()
    })
    .collect()
}

/// Whole seconds until the status's limit resets, rounded up: its `duration_until_reset`,
/// else its unit's window (a status that says nothing of its count).
fn reset_seconds(status: &DescriptorStatus, unit: i32) -> i64 {
    match &status.duration_until_reset {
        Some(d) => d.seconds.saturating_add(i64::from(d.nanos > 0)),
        None => Unit::from_proto(unit).map_or(0, |u| {
            i64::try_from(u.window_ms() / 1000).unwrap_or(i64::MAX)
        }),
    }
}
