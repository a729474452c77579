//! The response fields of a limited route: `RateLimit-Policy` and `RateLimit` from the IETF
//! draft (draft-ietf-httpapi-ratelimit-headers), `Retry-After` on a denial, and the legacy
//! `X-RateLimit-*` trio when configured. Both IETF fields are structured-field Lists (RFC
//! 8941) with one item per tier: `"name";q=<quota>;w=<window s>` and
//! `"name";r=<remaining>;t=<seconds to reset>`. When several rules apply (`stack = true`),
//! both fields list every limit of every rule decided.

use crate::rules::{Limit, Rule};
use crate::verdict::{Verdict, NEVER};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
static LEGACY_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static LEGACY_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static LEGACY_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Milliseconds as whole seconds, rounded up.
fn seconds_up(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// `Retry-After` in whole seconds, rounded up, at least 1 (0 would invite a retry storm).
pub(crate) fn retry_after_seconds(ms: u64) -> u64 {
    seconds_up(ms).max(1)
}

/// The name of tier `index` of `count`: the rule's name, suffixed when there are several.
fn tier_name(out: &mut String, rule: &Rule, index: usize, count: usize) {
    out.push('"');
    out.push_str(&rule.name);
    if count > 1 {
        out.push('-');
        push_decimal(out, index as u64 + 1);
    }
    out.push('"');
}

/// Appends `n` in decimal, as `Display` writes it. These fields are written for every
/// request of a limited route, and the formatting machinery costs several times as much
/// for the same digits.
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Digits only, so always valid UTF-8; appended as one slice, not char by char.
    if let Ok(digits) = std::str::from_utf8(&digits[start..]) {
        out.push_str(digits);
    }
}

/// Adds the rate-limit fields for every limit of `shown` (each rule with its verdict, in
/// rule order), `binding` the index of the one that decides: on a denial its items come
/// first in both fields, so that the 429 names it, and `Retry-After` is its wait; the
/// legacy trio describes its binding tier.
pub(crate) fn add_all(
    headers: &mut HeaderMap,
    shown: &[(&Rule, &Verdict)],
    binding: usize,
    legacy: bool,
    denied: bool,
) {
    let Some(&(_, binding_verdict)) = shown.get(binding) else {
        return;
    };
    let count: usize = shown.iter().map(|(_, v)| v.tiers().len()).sum();
    let mut policy = String::with_capacity(32 * count);
    let mut state = String::with_capacity(32 * count);
    let first = denied.then_some(binding);
    let order = first
        .into_iter()
        .chain((0..shown.len()).filter(|&i| Some(i) != first));
    for i in order {
        let (rule, verdict) = shown[i];
        push_items(&mut policy, &mut state, rule, verdict);
    }
    // Names are checked to be token characters, so these values are always valid. The
    // strings' buffers become the values as they are, not copied.
    if let (Ok(policy), Ok(state)) = (
        HeaderValue::from_maybe_shared(bytes::Bytes::from(policy)),
        HeaderValue::from_maybe_shared(bytes::Bytes::from(state)),
    ) {
        headers.insert(RATELIMIT_POLICY.clone(), policy);
        headers.insert(RATELIMIT.clone(), state);
    }
    let binding = binding_verdict.binding();
    // A request that can never pass (the module's "never") gets no Retry-After: there is
    // no time at which retrying helps.
    if denied && binding.retry_after_ms != NEVER {
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from(retry_after_seconds(binding.retry_after_ms)),
        );
    }
    if legacy {
        // All three describe one tier, the binding one, with its own reset.
        let tier = binding_verdict.binding_tier();
        headers.insert(LEGACY_LIMIT.clone(), HeaderValue::from(tier.limit));
        headers.insert(LEGACY_REMAINING.clone(), HeaderValue::from(tier.remaining));
        headers.insert(
            LEGACY_RESET.clone(),
            HeaderValue::from(seconds_up(tier.reset_after_ms)),
        );
    }
}

/// Adds `Retry-After` alone for a denial `verdict` (a lease's: no RateLimit fields), none
/// when retrying never helps.
pub(crate) fn add_retry_after(headers: &mut HeaderMap, verdict: &Verdict) {
    let wait = verdict.binding().retry_after_ms;
    if wait != NEVER {
        headers.insert(RETRY_AFTER, HeaderValue::from(retry_after_seconds(wait)));
    }
}

/// Appends one rule's items (one per tier) to both lists.
fn push_items(policy: &mut String, state: &mut String, rule: &Rule, verdict: &Verdict) {
    let tiers = verdict.tiers();
    let windows: &[_] = match &rule.limit {
        Limit::Tiers { tiers, .. } => tiers,
        _ => &[],
    };
    for (index, tier) in tiers.iter().enumerate() {
        if !policy.is_empty() {
            policy.push_str(", ");
            state.push_str(", ");
        }
        tier_name(policy, rule, index, tiers.len());
        policy.push_str(";q=");
        push_decimal(policy, tier.limit);
        // A policy stored in Redis has windows the gateway does not know, and a calendar
        // window has no one length; `w` is optional.
        if let Some(window) = windows
            .get(index)
            .filter(|w| windows.len() == tiers.len() && w.period.is_none())
        {
            policy.push_str(";w=");
            push_decimal(policy, seconds_up(window.window_ms));
        }
        tier_name(state, rule, index, tiers.len());
        state.push_str(";r=");
        push_decimal(state, tier.remaining);
        state.push_str(";t=");
        push_decimal(state, seconds_up(tier.reset_after_ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use crate::verdict::TierState;

    /// The fields for `verdict` of `rule` alone; with `denied`, also `Retry-After`.
    fn add(headers: &mut HeaderMap, rule: &Rule, verdict: &Verdict, legacy: bool, denied: bool) {
        add_all(headers, &[(rule, verdict)], 0, legacy, denied);
    }

    fn rule(limits: &str) -> Rule {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:1\"\nupstream = \"http://127.0.0.1:2\"\n\
             [[rule]]\nname = \"api\"\npath = \"/a\"\nlimits = {limits}\n"
        );
        Rule::clone(&parse(&text).unwrap().rules.rules[0])
    }

    #[test]
    fn decimals_are_written_as_display_writes_them() {
        let values = [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            1 << 32,
            u64::MAX - 1,
            u64::MAX,
        ];
        for n in values {
            let mut out = String::from(";q=");
            push_decimal(&mut out, n);
            assert_eq!(out, format!(";q={n}"));
        }
    }

    #[test]
    fn retry_after_is_whole_seconds_at_least_one() {
        assert_eq!(retry_after_seconds(0), 1);
        assert_eq!(retry_after_seconds(1), 1);
        assert_eq!(retry_after_seconds(1000), 1);
        assert_eq!(retry_after_seconds(1001), 2);
    }

    #[test]
    fn one_tier_denied_with_legacy() {
        let rule = rule("[\"5/1m\"]");
        let verdict = Verdict::single(TierState {
            allowed: false,
            limit: 5,
            remaining: 0,
            reset_after_ms: 59_001,
            retry_after_ms: 1_500,
        });
        let mut headers = HeaderMap::new();
        add(&mut headers, &rule, &verdict, true, true);
        assert_eq!(headers["ratelimit-policy"], "\"api\";q=5;w=60");
        assert_eq!(headers["ratelimit"], "\"api\";r=0;t=60");
        assert_eq!(headers["retry-after"], "2");
        assert_eq!(headers["x-ratelimit-limit"], "5");
        assert_eq!(headers["x-ratelimit-remaining"], "0");
        assert_eq!(headers["x-ratelimit-reset"], "60");
    }

    #[test]
    fn several_rules_list_every_limit_and_a_denial_leads_with_the_binding_one() {
        let mut ip = rule("[\"10/1m\", \"100/1h\"]");
        ip.name = "per-ip".into();
        let mut cap = rule("[\"3/1s\"]");
        cap.name = "cap".into();
        let tier = |allowed, limit, remaining, retry_after_ms| TierState {
            allowed,
            limit,
            remaining,
            reset_after_ms: 2_000,
            retry_after_ms,
        };
        let mut two = Verdict::single(tier(true, 10, 7, 0));
        two = Verdict::from_reply(&two_tiers(&two, tier(true, 100, 97, 0))).unwrap();
        let denied = Verdict::single(tier(false, 3, 0, 2_500));
        let mut headers = HeaderMap::new();
        add_all(&mut headers, &[(&ip, &two), (&cap, &denied)], 1, true, true);
        assert_eq!(
            headers["ratelimit-policy"],
            "\"cap\";q=3;w=1, \"per-ip-1\";q=10;w=60, \"per-ip-2\";q=100;w=3600"
        );
        assert_eq!(
            headers["ratelimit"],
            "\"cap\";r=0;t=2, \"per-ip-1\";r=7;t=2, \"per-ip-2\";r=97;t=2"
        );
        assert_eq!(headers["retry-after"], "3");
        assert_eq!(headers["x-ratelimit-limit"], "3");
        let mut allowed = HeaderMap::new();
        add_all(
            &mut allowed,
            &[(&ip, &two), (&cap, &denied)],
            1,
            false,
            false,
        );
        assert!(
            allowed["ratelimit"]
                .to_str()
                .unwrap()
                .starts_with("\"per-ip-1\""),
            "rule order when allowed"
        );
    }

    /// A RESP3 reply of two tiers, the first from `first`.
    fn two_tiers(first: &Verdict, second: TierState) -> redis::Value {
        use redis::Value;
        let map = |t: &TierState| {
            Value::Map(
                [
                    ("allowed", i64::from(t.allowed)),
                    ("limit", t.limit as i64),
                    ("remaining", t.remaining as i64),
                    ("reset_after_ms", t.reset_after_ms as i64),
                    ("retry_after_ms", t.retry_after_ms as i64),
                ]
                .into_iter()
                .map(|(k, v)| (Value::SimpleString(k.into()), Value::Int(v)))
                .collect(),
            )
        };
        let b = first.binding();
        let Value::Map(mut fields) = map(b) else {
            unreachable!()
        };
        fields.push((
            Value::SimpleString("tiers".into()),
            Value::Array(vec![map(b), map(&second)]),
        ));
        Value::Map(fields)
    }

    #[test]
    fn allowed_without_legacy_has_no_retry_after() {
        let rule = rule("[\"5/1m\"]");
        let verdict = Verdict::single(TierState {
            allowed: true,
            limit: 5,
            remaining: 3,
            reset_after_ms: 10,
            retry_after_ms: 0,
        });
        let mut headers = HeaderMap::new();
        add(&mut headers, &rule, &verdict, false, false);
        assert_eq!(headers["ratelimit"], "\"api\";r=3;t=1");
        assert!(headers.get("retry-after").is_none());
        assert!(headers.get("x-ratelimit-limit").is_none());
    }
}
