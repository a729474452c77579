//! The Envoy service's limit overrides and failure modes, each point tried on a real Redis:
//!
//! - a descriptor's `limit` override spends the configured budget of its key (no fresh
//!   budget per override value), and by default it can only tighten the limit;
//! - a module error (a policy that does not exist) fails closed unless the descriptor says
//!   `on_module_error: ok`, whatever `on_failure` says about Redis being unreachable;
//! - a shadow descriptor never denies, not even when Redis cannot decide and its
//!   `on_failure` is `over_limit` or `unavailable`; a quota descriptor then reports its own
//!   OVER_LIMIT, which makes the answer OVER_LIMIT only when every quota descriptor is;
//! - the units MONTH and YEAR are calendar windows (UTC, or the descriptor's `tz`), in the
//!   YAML and in an override.

use chrono::{DateTime, Datelike, NaiveDate, TimeZone};
use std::time::Duration;
use testkit::gateway::envoy::*;
use testkit::gateway::*;

const DESCRIPTORS: &str = r#"
domain: overrides
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: second
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: wide
    limit_override: replace
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: fixed
    limit_override: ignore
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: gone
    rate_limit: {policy: no-such-policy}
  - key: partner
    rate_limit: {policy: partners}
  - key: gone_open
    on_module_error: ok
    rate_limit: {policy: no-such-policy}
  - key: watch
    shadow_mode: true
    on_failure: over_limit
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: watch_strict
    shadow_mode: true
    on_failure: unavailable
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: plan
    quota_mode: true
    on_failure: over_limit
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 2}
  - key: yearly
    rate_limit: {unit: YEAR, requests_per_unit: 2, tz: Europe/Paris}
"#;

/// Envoy's `RateLimitResponse.RateLimit.Unit` numbers.
const SECOND: i32 = 1;
const MINUTE: i32 = 2;
const MONTH: i32 = 5;

fn one(envoy: &mut EnvoyGateway, d: RateLimitDescriptor) -> RateLimitResponse {
    envoy.ask(request("overrides", vec![d]))
}

#[test]
fn an_override_spends_the_configured_budget_and_by_default_only_tightens() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let mut envoy = EnvoyGateway::on(&redis, &[("overrides.yaml", DESCRIPTORS)]);
        for i in 0..3 {
            let answer = one(&mut envoy, desc(&[("plain", "a")]));
            assert_eq!(overall(&answer), Code::Ok, "{flavor:?} hit {i}");
        }
        assert_eq!(
            overall(&one(&mut envoy, desc(&[("plain", "a")]))),
            Code::OverLimit
        );
        // Every override value, lower or higher, meets the same spent budget: none is a
        // budget of its own.
        for n in [1, 2, 3, 4, 100, 1_000_000, u32::MAX] {
            let answer = one(&mut envoy, desc_limit(&[("plain", "a")], n, MINUTE));
            assert_eq!(overall(&answer), Code::OverLimit, "{flavor:?} override {n}");
        }
        // A lower override binds a fresh key: 1 a minute, then denied, and the status shows
        // the override as the limit that bound.
        let first = one(&mut envoy, desc_limit(&[("plain", "b")], 1, MINUTE));
        assert_eq!(overall(&first), Code::Ok, "{flavor:?}");
        let denied = one(&mut envoy, desc_limit(&[("plain", "b")], 1, MINUTE));
        assert_eq!(overall(&denied), Code::OverLimit, "{flavor:?} {denied:?}");
        let shown = denied.statuses[0].current_limit.as_ref().expect("a limit");
        assert_eq!((shown.requests_per_unit, shown.unit), (1, MINUTE));
        // A higher one cannot raise the configured 3: the fourth hit is denied, and the
        // configured limit is what bound.
        for i in 0..3 {
            let answer = one(&mut envoy, desc_limit(&[("plain", "c")], 1000, MINUTE));
            assert_eq!(overall(&answer), Code::Ok, "{flavor:?} hit {i}: {answer:?}");
        }
        let capped = one(&mut envoy, desc_limit(&[("plain", "c")], 1000, MINUTE));
        assert_eq!(overall(&capped), Code::OverLimit, "{flavor:?}");
        let shown = capped.statuses[0].current_limit.as_ref().expect("a limit");
        assert_eq!((shown.requests_per_unit, shown.unit), (3, MINUTE));

        // `limit_override: replace` (envoyproxy/ratelimit's behaviour): the override is the
        // limit, still counted in the one key: 3 spent, a limit of 5 leaves 2.
        for _ in 0..3 {
            one(&mut envoy, desc(&[("wide", "a")]));
        }
        for i in 0..2 {
            let answer = one(&mut envoy, desc_limit(&[("wide", "a")], 5, MINUTE));
            assert_eq!(
                overall(&answer),
                Code::Ok,
                "{flavor:?} replace {i}: {answer:?}"
            );
        }
        let spent = one(&mut envoy, desc_limit(&[("wide", "a")], 5, MINUTE));
        assert_eq!(overall(&spent), Code::OverLimit, "{flavor:?} {spent:?}");

        // `limit_override: ignore`: 1 a minute changes nothing.
        for i in 0..3 {
            let answer = one(&mut envoy, desc_limit(&[("fixed", "a")], 1, MINUTE));
            assert_eq!(overall(&answer), Code::Ok, "{flavor:?} ignore {i}");
        }
        assert_eq!(
            overall(&one(&mut envoy, desc_limit(&[("fixed", "a")], 1, MINUTE))),
            Code::OverLimit
        );
        // One key per descriptor, whatever the overrides were.
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*plain=a*")
            .query(&mut redis.conn())
            .expect("KEYS");
        assert_eq!(keys.len(), 1, "{flavor:?} {keys:?}");
        let ignored = envoy
            .gateway
            .metrics()
            .counter("rl_gateway_envoy_total", &[("result", "override_ignored")]);
        assert_eq!(ignored, 4.0, "{flavor:?}");
    });
}

#[test]
fn requests_with_and_without_an_override_do_not_change_each_others_rule() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = EnvoyGateway::on(&redis, &[("overrides.yaml", DESCRIPTORS)]);
    // Two routes send the same entries, one with a (looser) limit of its own: under
    // `tighten` it is a key of its own, so the node's key keeps its rule and its window
    // ends on time. (Were the override a tier of the node's key, every switch would change
    // the key's rule, and the module would renew it from its usage at each switch.)
    // The three calls must fall in one 1-second window: a sequence that a window's end
    // cut in two is tried again on a fresh value (at most 5 times; a rule that never
    // denies fails them all).
    let mut value = String::new();
    let in_one_window = (0..5).any(|attempt| {
        value = format!("mix{attempt}");
        let plain = desc(&[("second", &value)]);
        let loose = desc_limit(&[("second", &value)], 50, SECOND);
        assert_eq!(overall(&one(&mut envoy, plain.clone())), Code::Ok);
        assert_eq!(overall(&one(&mut envoy, loose)), Code::Ok);
        overall(&one(&mut envoy, plain)) == Code::OverLimit
    });
    assert!(
        in_one_window,
        "the plain request was never over its 2 a second"
    );
    let plain = || desc(&[("second", &value)]);
    let loose = || desc_limit(&[("second", &value)], 50, SECOND);
    let mut turn = 0u32;
    wait_until(
        Duration::from_secs(10),
        "a new window while alternating",
        || {
            turn += 1;
            std::thread::sleep(Duration::from_millis(100));
            let d = if turn.is_multiple_of(2) {
                plain()
            } else {
                loose()
            };
            overall(&one(&mut envoy, d)) == Code::Ok
        },
    );
    // 16 descriptors, each with its own limit: 32 keys, more than one RL.MHIT takes, are
    // decided in calls of at most 16.
    let many: Vec<_> = (0..16)
        .map(|i| desc_limit(&[("plain", &format!("many{i}"))], 2, MINUTE))
        .collect();
    let answer = envoy.ask(request("overrides", many));
    assert_eq!(overall(&answer), Code::Ok, "{answer:?}");
    assert!(
        answer.statuses.iter().all(|s| s.limit_remaining == 1),
        "{answer:?}"
    );
    // No call was refused: none had more than 16 keys.
    let stats = redis
        .info_field("commandstats", "cmdstat_RL.MHIT")
        .expect("RL.MHIT was called");
    assert!(stats.split(',').any(|f| f == "failed_calls=0"), "{stats}");
}

#[test]
fn a_policy_is_tightened_by_an_override_and_never_loosened() {
    each_flavor(|flavor| {
        let redis = server_with_policies(flavor);
        redis::cmd("RL.POLICY")
            .arg(&["SET", "partners", "3", "1m"])
            .query::<redis::Value>(&mut redis.conn())
            .expect("RL.POLICY SET");
        let mut envoy = EnvoyGateway::on(&redis, &[("overrides.yaml", DESCRIPTORS)]);
        // 1 a minute beside the policy's 3: the second is denied by the override.
        let tight = || desc_limit(&[("partner", "p1")], 1, MINUTE);
        assert_eq!(overall(&one(&mut envoy, tight())), Code::Ok, "{flavor:?}");
        let denied = one(&mut envoy, tight());
        assert_eq!(overall(&denied), Code::OverLimit, "{flavor:?} {denied:?}");
        let shown = denied.statuses[0].current_limit.as_ref().expect("a limit");
        assert_eq!((shown.requests_per_unit, shown.unit), (1, MINUTE));
        // 1000 a minute cannot loosen the policy's 3: two more, then denied by the policy.
        let loose = || desc_limit(&[("partner", "p1")], 1000, MINUTE);
        for i in 0..2 {
            let answer = one(&mut envoy, loose());
            assert_eq!(overall(&answer), Code::Ok, "{flavor:?} {i}: {answer:?}");
        }
        assert_eq!(
            overall(&one(&mut envoy, loose())),
            Code::OverLimit,
            "{flavor:?}"
        );
    });
}

#[test]
fn a_module_error_fails_closed_unless_the_descriptor_says_ok() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let mut envoy = EnvoyGateway::on(&redis, &[("overrides.yaml", DESCRIPTORS)]);
        // `on_failure` is `ok` (the default): Redis down fails open. A policy that does not
        // exist is a misconfiguration, which must not become "no limit".
        let gone = one(&mut envoy, desc(&[("gone", "x")]));
        assert_eq!(overall(&gone), Code::OverLimit, "{flavor:?} {gone:?}");
        assert_eq!(code(&gone, 0), Code::OverLimit);
        let open = one(&mut envoy, desc(&[("gone_open", "x")]));
        assert_eq!(overall(&open), Code::Ok, "{flavor:?} {open:?}");
        // With another descriptor beside it: still refused, and nothing charged there.
        let both = envoy.ask(request(
            "overrides",
            vec![desc(&[("plain", "z")]), desc(&[("gone", "x")])],
        ));
        assert_eq!(overall(&both), Code::OverLimit, "{flavor:?} {both:?}");
        let left = one(&mut envoy, desc_hits(&[("plain", "z")], 0, false));
        assert_eq!(remaining(&left, 0), 3, "{flavor:?}: given back {left:?}");
        let metrics = envoy.gateway.metrics();
        assert!(
            metrics.decisions("overrides.gone", "fail_closed") >= 2.0,
            "{}",
            metrics.text
        );
        assert!(
            metrics.decisions("overrides.gone_open", "fail_open") >= 1.0,
            "{}",
            metrics.text
        );
    });
}

#[test]
fn a_shadow_descriptor_never_denies_when_redis_cannot_decide() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let mut envoy = EnvoyGateway::start(
            &redis_section_with(redis.port(), "deadline_ms = 30\nbreaker_failures = 1000"),
            &[("overrides.yaml", DESCRIPTORS)],
        );
        wait_until(Duration::from_secs(20), "a decision by Redis", || {
            let answer = one(&mut envoy, desc(&[("plain", "warm")]));
            answer.statuses[0].current_limit.is_some() && remaining(&answer, 0) < 3
        });
        let stopped = Stopped::new(redis.pid());
        for key in ["watch", "watch_strict"] {
            let answer = envoy
                .call(request("overrides", vec![desc(&[(key, "x")])]))
                .unwrap_or_else(|status| panic!("{flavor:?} {key}: {status:?}"));
            assert_eq!(overall(&answer), Code::Ok, "{flavor:?} {key}: {answer:?}");
            assert_eq!(code(&answer, 0), Code::Ok, "{flavor:?} {key}");
        }
        // Beside an enforced descriptor that fails open: OK as a whole.
        let mixed = envoy
            .call(request(
                "overrides",
                vec![desc(&[("watch_strict", "y")]), desc(&[("plain", "y")])],
            ))
            .expect("answered");
        assert_eq!(overall(&mixed), Code::Ok, "{flavor:?} {mixed:?}");
        // Quota mode reports its own failure as OVER_LIMIT: alone, every quota descriptor
        // of the request is over, so the answer is too.
        let plan = one(&mut envoy, desc(&[("plan", "x")]));
        assert_eq!(overall(&plan), Code::OverLimit, "{flavor:?} {plan:?}");
        assert_eq!(code(&plan, 0), Code::OverLimit, "{flavor:?}");
        stopped.resume();
    });
}

/// The first instant of the next month (UTC) after `now_ms`.
fn next_month_utc(now_ms: i64) -> i64 {
    let today = DateTime::from_timestamp_millis(now_ms)
        .expect("a time")
        .date_naive();
    let (y, m) = if today.month() == 12 {
        (today.year() + 1, 1)
    } else {
        (today.year(), today.month() + 1)
    };
    NaiveDate::from_ymd_opt(y, m, 1)
        .expect("a date")
        .and_hms_opt(0, 0, 0)
        .expect("midnight")
        .and_utc()
        .timestamp_millis()
}

/// The first instant of the next year in Paris after `now_ms`.
fn next_year_paris(now_ms: i64) -> i64 {
    let tz: chrono_tz::Tz = "Europe/Paris".parse().expect("a zone");
    let year = DateTime::from_timestamp_millis(now_ms)
        .expect("a time")
        .with_timezone(&tz)
        .year();
    tz.with_ymd_and_hms(year + 1, 1, 1, 0, 0, 0)
        .single()
        .expect("one midnight")
        .timestamp_millis()
}

fn reset_ms(answer: &RateLimitResponse) -> i64 {
    let d = answer.statuses[0].duration_until_reset.expect("a reset");
    d.seconds * 1000 + i64::from(d.nanos / 1_000_000)
}

#[test]
fn month_and_year_are_calendar_windows() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let mut envoy = EnvoyGateway::on(&redis, &[("overrides.yaml", DESCRIPTORS)]);
        for (key, boundary, unit) in [
            ("monthly", next_month_utc as fn(i64) -> i64, MONTH),
            ("yearly", next_year_paris, 6),
        ] {
            let before = redis.time_ms();
            let first = one(&mut envoy, desc(&[(key, "u")]));
            let after = redis.time_ms();
            assert_eq!(overall(&first), Code::Ok, "{flavor:?} {key}");
            let shown = first.statuses[0].current_limit.as_ref().expect("a limit");
            assert_eq!((shown.requests_per_unit, shown.unit), (2, unit), "{key}");
            // The reset is the time to the boundary, as the module counted it.
            let reset = reset_ms(&first);
            let end = boundary(before);
            assert!(
                end - after - 1000 <= reset && reset <= end - before + 1000,
                "{flavor:?} {key}: reset {reset} ms, boundary in {} ms",
                end - before
            );
            one(&mut envoy, desc(&[(key, "u")]));
            let third = one(&mut envoy, desc(&[(key, "u")]));
            assert_eq!(overall(&third), Code::OverLimit, "{flavor:?} {key}");
        }
        // An override in months is a calendar month too (tightening a per-minute limit
        // with a monthly one).
        let monthly = one(&mut envoy, desc_limit(&[("plain", "m")], 1, MONTH));
        assert_eq!(overall(&monthly), Code::Ok, "{flavor:?} {monthly:?}");
        let denied = one(&mut envoy, desc_limit(&[("plain", "m")], 1, MONTH));
        assert_eq!(overall(&denied), Code::OverLimit, "{flavor:?} {denied:?}");
        let shown = denied.statuses[0].current_limit.as_ref().expect("a limit");
        assert_eq!((shown.requests_per_unit, shown.unit), (1, MONTH));
        let before = redis.time_ms();
        let reset = reset_ms(&denied);
        let end = next_month_utc(before);
        assert!(
            (end - before - 60_000..=end - before + 1000).contains(&reset),
            "{flavor:?}: reset {reset} ms, boundary in {} ms",
            end - before
        );
    });
}
