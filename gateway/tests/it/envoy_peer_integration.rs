//! envoyproxy/ratelimit's own integration sequences (`test/integration/integration_test.go`),
//! replayed against rl-gateway through envoy-types' tonic client, on Redis 7.0 and on Valkey
//! 8.1, with the peer's YAML unchanged (`peer_cases/integration/`). Each function is one of
//! the peer's cases (named in its comment) and asserts what the peer's test asserts, except
//! where we differ on purpose (said where it matters):
//!
//! - a denied request charges none of its descriptors (the peer charges them unless
//!   `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, whose sequence ours therefore follows);
//! - our keys are not the peer's, so every counter starts fresh;
//! - fixed windows are aligned on the epoch, as the peer's are (`duration_until_reset` is the
//!   time to the window's end in both); a sequence that crosses a window's end is asked again
//!   with fresh values ([`in_one_window`]) rather than assuming how long calls take, and no
//!   case sleeps to see a duration tick down;
//! - the peer's stats (`ratelimit.service.rate_limit.<domain>.<key>.<stat>`) are
//!   `rl_gateway_envoy_hits_total{rule="<domain>.<key>", stat}` here.
//!
//! Skipped, with why: the transport matrix the peer runs the same sequence through (a
//! second "per second" Redis, the local cache of over-limit keys and its `localcache` gauges,
//! `CACHE_KEY_PREFIX`, memcache, Redis TLS, auth, Cluster and Sentinel, gRPC TLS and mTLS and
//! their certificate reload, the xDS configuration source): none of it changes what a
//! descriptor is answered, and ours is covered by its own tests (cluster, reload, fail-open);
//! `TestBasicConfig_ExtraTags` (statsd tags; our metrics are Prometheus labels).

use std::time::Duration;
use testkit::gateway::envoy::*;
use testkit::gateway::*;

const BASIC: &str = include_str!("peer_cases/integration/basic.yaml");
const ANOTHER: &str = include_str!("peer_cases/integration/another.yaml");
const SHARE_THRESHOLD: &str = include_str!("peer_cases/integration/share_threshold.yaml");
const RELOAD: &str = include_str!("peer_cases/integration/reload.yaml");

/// The files testBasicBaseConfig and testConfigReload ask about.
const BASIC_FILES: &[(&str, &str)] = &[("basic.yaml", BASIC), ("another.yaml", ANOTHER)];
/// The peer's whole `runtime/current/ratelimit/config/` directory, for TestShareThreshold.
/// (The other cases load the two files above only, so that what they replay does not
/// wait for `share_threshold` to load.)
const ALL_FILES: &[(&str, &str)] = &[
    ("basic.yaml", BASIC),
    ("another.yaml", ANOTHER),
    ("share_threshold.yaml", SHARE_THRESHOLD),
];

/// Runs `case` on a fresh server of each flavour, with a gateway loading `files`.
fn on_each_server(files: &[(&str, &str)], mut case: impl FnMut(&mut EnvoyGateway)) {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let mut envoy = EnvoyGateway::on(&redis, files);
        case(&mut envoy);
    });
}

/// One request of `domain` with one descriptor per `(key, value)`, each of one entry.
fn single(domain: &str, entries: &[(&str, &str)]) -> RateLimitRequest {
    request(domain, entries.iter().map(|&e| desc(&[e])).collect())
}

/// What a stat of rule `rule` grew by from `before` to now.
fn grew(envoy: &EnvoyGateway, before: &Metrics, rule: &str, stat: &str) -> f64 {
    envoy.gateway.metrics().envoy_hits(rule, stat) - before.envoy_hits(rule, stat)
}

// testBasicBaseConfig: a domain no file defines ("foo", hello=world) is OK, its status
// without a limit.
#[test]
fn basic_unknown_domain_is_ok_without_a_limit() {
    on_each_server(BASIC_FILES, |envoy| {
        let answer = envoy.ask(single("foo", &[("hello", "world")]));
        assert_eq!(overall(&answer), Code::Ok);
        assert_status(&answer, 0, (Code::Ok, None, 0), "foo");
        assert!(answer.statuses[0].duration_until_reset.is_none());
    });
}

// testBasicBaseConfig: basic key1=foo, 50 a second: OK, 49 left; its total_hits stat is 1
// (also TestBasicConfig_ExtraTags' count).
#[test]
fn basic_key1_first_hit() {
    on_each_server(BASIC_FILES, |envoy| {
        let answer = envoy.ask(single("basic", &[("key1", "foo")]));
        assert_eq!(overall(&answer), Code::Ok);
        assert_status(&answer, 0, (Code::Ok, Some((50, UNIT_SECOND)), 49), "key1");
        assert!(
            reset_ms(&answer, 0).is_some_and(|ms| ms <= 1000),
            "{answer:?}"
        );
        let metrics = envoy.gateway.metrics();
        assert_eq!(
            metrics.envoy_hits("basic.key1", "total_hits"),
            1.0,
            "{}",
            metrics.text
        );
    });
}

// testBasicBaseConfig: another key2=<random>, 20 a minute, 25 times: OK with 19..0 left,
// then OVER_LIMIT with 0; total_hits counts all 25, over_limit the last 5 (near_limit and
// within_limit as the peer's code counts them).
#[test]
fn another_key2_over_its_minute_limit() {
    on_each_server(BASIC_FILES, |envoy| {
        let mut before = envoy.gateway.metrics();
        let answers = in_one_window(|attempt| {
            before = envoy.gateway.metrics();
            let value = format!("random-{attempt}");
            (0..25)
                .map(|_| envoy.ask(single("another", &[("key2", &value)])))
                .collect()
        });
        for (i, answer) in answers.iter().enumerate() {
            let (code, left) = match i < 20 {
                true => (Code::Ok, 19 - i as u32),
                false => (Code::OverLimit, 0),
            };
            assert_eq!(overall(answer), code, "call {i}");
            assert_status(answer, 0, (code, Some((20, UNIT_MINUTE)), left), "key2");
        }
        assert_eq!(grew(envoy, &before, "another.key2", "total_hits"), 25.0);
        assert_eq!(grew(envoy, &before, "another.key2", "over_limit"), 5.0);
        // Not asserted by the peer's test, but what its code counts with the default
        // NEAR_LIMIT_RATIO 0.8: the hits above floor(20 * 0.8) = 16 and within the limit.
        assert_eq!(grew(envoy, &before, "another.key2", "near_limit"), 4.0);
        assert_eq!(grew(envoy, &before, "another.key2", "within_limit"), 20.0);
    });
}

// testBasicBaseConfig: key2 (20 a minute) and key3 (10 an hour) of one random value in one
// request, 15 times: from the 11th, key3 is OVER_LIMIT and so is the answer, key2 stays OK.
// The peer charges key2 in the denied requests (19..5 left). Ours charges nothing of a
// denied request: the 11th shows key2 with 10 left (the peer's sequence under
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT); from the 12th the deny cache answers key3
// without Redis, so key2 is not decided at all and shows no limit.
#[test]
fn another_key2_and_key3_in_one_request() {
    on_each_server(BASIC_FILES, |envoy| {
        let mut before = envoy.gateway.metrics();
        let answers = in_one_window(|attempt| {
            before = envoy.gateway.metrics();
            let value = format!("random-{attempt}");
            let pair = [("key2", value.as_str()), ("key3", value.as_str())];
            (0..15)
                .map(|_| envoy.ask(single("another", &pair)))
                .collect()
        });
        for (i, answer) in answers.iter().enumerate() {
            let i = i as u32;
            let key2_limit = Some((20, UNIT_MINUTE));
            let (code, key2, key3_left) = match i {
                0..=9 => (Code::Ok, (key2_limit, 19 - i), 9 - i),
                10 => (Code::OverLimit, (key2_limit, 10), 0),
                _ => (Code::OverLimit, (None, 0), 0),
            };
            assert_eq!(overall(answer), code, "call {i}");
            let what = format!("call {i}");
            assert_status(answer, 1, (code, Some((10, UNIT_HOUR)), key3_left), &what);
            assert_status(answer, 0, (Code::Ok, key2.0, key2.1), &what);
        }
        // total_hits counts the hits asked, charged or not (the peer's, in both modes).
        assert_eq!(grew(envoy, &before, "another.key2", "total_hits"), 15.0);
        assert_eq!(grew(envoy, &before, "another.key2", "over_limit"), 0.0);
        assert_eq!(grew(envoy, &before, "another.key3", "total_hits"), 15.0);
        assert_eq!(grew(envoy, &before, "another.key3", "over_limit"), 5.0);
    });
}

// testBasicBaseConfig, "Test DurationUntilReset by hitting same key twice": key4=durTest (20
// a day) twice. The peer sleeps 2 s between the calls and asserts the second duration is
// shorter; we assert no timing: both within a day, the second not longer (in one window).
#[test]
fn another_key4_duration_until_reset() {
    on_each_server(BASIC_FILES, |envoy| {
        let answers = in_one_window(|attempt| {
            let value = format!("durTest-{attempt}");
            (0..2)
                .map(|_| envoy.ask(single("another", &[("key4", &value)])))
                .collect()
        });
        assert_status(
            &answers[0],
            0,
            (Code::Ok, Some((20, UNIT_DAY)), 19),
            "first",
        );
        assert_status(
            &answers[1],
            0,
            (Code::Ok, Some((20, UNIT_DAY)), 18),
            "second",
        );
        for answer in &answers {
            let ms = reset_ms(answer, 0).expect("a duration until reset");
            assert!(ms > 0 && ms <= 86_400_000, "{answer:?}");
        }
    });
}

// TestShareThreshold, case 1: files/a.pdf ten times, then files/b.csv: over the one 10 an
// hour budget that every files/* value shares.
#[test]
fn share_threshold_values_share_one_budget() {
    on_each_server(ALL_FILES, |envoy| {
        let domain = "share-threshold-test";
        let look = request(
            domain,
            vec![desc_hits(&[("files", "files/a.pdf")], 0, false)],
        );
        // The budget cannot be made fresh by a new value: start away from the hour's end.
        envoy.fresh_window(look, Duration::from_secs(60));
        let mut answers: Vec<_> = (0..10)
            .map(|_| envoy.ask(single(domain, &[("files", "files/a.pdf")])))
            .collect();
        for (i, answer) in answers.iter().enumerate() {
            let left = 9 - i as u32;
            assert_status(answer, 0, (Code::Ok, Some((10, UNIT_HOUR)), left), "a.pdf");
        }
        answers.push(envoy.ask(single(domain, &[("files", "files/b.csv")])));
        assert!(
            one_window(&answers, 0),
            "the sequence crossed an hour's end"
        );
        let shared = &answers[10];
        assert_eq!(overall(shared), Code::OverLimit, "{shared:?}");
        assert_status(
            shared,
            0,
            (Code::OverLimit, Some((10, UNIT_HOUR)), 0),
            "b.csv",
        );
    });
}

// TestShareThreshold, case 2: without share_threshold every files_no_share/* value has a
// budget of its own: ten values, each OK with 9 left.
#[test]
fn share_threshold_off_keeps_values_apart() {
    on_each_server(ALL_FILES, |envoy| {
        for i in 0..10 {
            let value = format!("files_no_share/{i}-unique");
            let answer = envoy.ask(single(
                "share-threshold-test",
                &[("files_no_share", &value)],
            ));
            assert_eq!(overall(&answer), Code::Ok);
            assert_status(&answer, 0, (Code::Ok, Some((10, UNIT_HOUR)), 9), &value);
        }
    });
}

// testConfigReload (TestBasicReloadConfig, ReloadWithoutWatchRoot): a file added to the
// directory is loaded (config_load_success: rl_gateway_rule_reloads_total{result="ok"}),
// and so is its removal.
#[test]
fn reload_adds_and_removes_a_domain() {
    on_each_server(BASIC_FILES, |envoy| {
        let block = || single("reload", &[("block", "foo")]);
        let before = envoy.ask(block());
        assert_eq!(overall(&before), Code::Ok, "no domain reload yet");
        assert_status(&before, 0, (Code::Ok, None, 0), "before");
        let loads = envoy.gateway.metrics().reloads("ok");
        envoy.write_descriptors("reload.yaml", RELOAD);
        wait_until(Duration::from_secs(30), "reload.yaml loaded", || {
            overall(&envoy.ask(block())) == Code::OverLimit
        });
        assert!(envoy.gateway.metrics().reloads("ok") > loads);
        let key1 = envoy.ask(single("reload", &[("key1", "foo")]));
        assert_eq!(overall(&key1), Code::Ok);
        assert_status(&key1, 0, (Code::Ok, Some((50, UNIT_SECOND)), 49), "key1");
        let loads = envoy.gateway.metrics().reloads("ok");
        envoy.remove_descriptors("reload.yaml");
        wait_until(Duration::from_secs(30), "reload.yaml dropped", || {
            overall(&envoy.ask(block())) == Code::Ok
        });
        assert!(envoy.gateway.metrics().reloads("ok") > loads);
    });
}
