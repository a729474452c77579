//! envoyproxy/ratelimit's README, "Configuration", Examples 1 to 7: each example's YAML
//! unchanged (`peer_cases/readme/`), asked over gRPC with envoy-types' tonic client the
//! requests its text describes, on Redis 7.0 and on Valkey 8.1, and answered as its text
//! says (Examples 8 to 11 are in `envoy_peer_readme_more.rs`). Where we differ on purpose
//! the case says so: a denied request charges none of its descriptors (the peer charges
//! them), and a descriptor left undecided because another was over first shows no limit.
//! Second windows are met by starting each burst at a window's start and asking again
//! when a burst still crossed one ([`burst`]), never by asserting how long calls take.

use std::time::Duration;
use testkit::gateway::envoy::*;
use testkit::gateway::*;

const EXAMPLE_1: &str = include_str!("peer_cases/readme/example1.yaml");
pub(crate) const EXAMPLE_2: &str = include_str!("peer_cases/readme/example2.yaml");
pub(crate) const EXAMPLE_3: &str = include_str!("peer_cases/readme/example3.yaml");
const EXAMPLE_4_NO_MATCH: &str = include_str!("peer_cases/readme/example4_no_match.yaml");
const EXAMPLE_4_MATCH: &str = include_str!("peer_cases/readme/example4_match.yaml");
pub(crate) const EXAMPLE_5: &str = include_str!("peer_cases/readme/example5.yaml");
pub(crate) const EXAMPLE_6: &str = include_str!("peer_cases/readme/example6.yaml");
pub(crate) const EXAMPLE_7: &str = include_str!("peer_cases/readme/example7.yaml");

/// Runs `case` on a fresh server of each flavour, with a gateway loading `files`.
pub(crate) fn on_each_server(
    files: &[(&str, &str)],
    mut case: impl FnMut(&Server, &mut EnvoyGateway),
) {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let mut envoy = EnvoyGateway::on(&redis, files);
        case(&redis, &mut envoy);
    });
}

/// `n` calls of `ask` within one second window: each attempt starts at a window's start
/// (waiting for it after a look, `probe`), and one whose answers still crossed a window's
/// end is asked again, from the next window's start.
pub(crate) fn burst(
    envoy: &mut EnvoyGateway,
    probe: impl Fn() -> RateLimitRequest,
    n: usize,
    ask: impl Fn() -> RateLimitRequest,
) -> Vec<RateLimitResponse> {
    for _ in 0..20 {
        envoy.fresh_window(probe(), Duration::from_secs(1));
        let answers: Vec<_> = (0..n).map(|_| envoy.ask(ask())).collect();
        if one_window(&answers, 0) {
            return answers;
        }
    }
    panic!("twenty bursts of {n} calls each crossed a second's end");
}

/// Example 1: ("database", "users") and ("database", "default") get 500 a second each;
/// another value of "database" matches nothing.
#[test]
fn example1_two_values_of_one_key() {
    on_each_server(&[("example1.yaml", EXAMPLE_1)], |_, envoy| {
        let ask = |envoy: &mut EnvoyGateway, value: &str| {
            envoy.ask(request("mongo_cps", vec![desc(&[("database", value)])]))
        };
        for value in ["users", "default"] {
            let answer = ask(envoy, value);
            assert_eq!(overall(&answer), Code::Ok);
            assert_status(&answer, 0, (Code::Ok, Some((500, UNIT_SECOND)), 499), value);
        }
        let other = ask(envoy, "other");
        assert_status(&other, 0, (Code::Ok, None, 0), "no rule for 'other'");
    });
}

/// Example 2: ("message_type", "marketing"),("to_number", n) is 5 a day per number, and
/// ("to_number", n) 100 a day; the request with both is the logical OR of the two.
#[test]
fn example2_nested_descriptors_one_counter_per_number() {
    on_each_server(&[("example2.yaml", EXAMPLE_2)], |_, envoy| {
        let marketing = |n: &str| {
            request(
                "messaging",
                vec![
                    desc(&[("message_type", "marketing"), ("to_number", n)]),
                    desc(&[("to_number", n)]),
                ],
            )
        };
        for i in 0..5 {
            let answer = envoy.ask(marketing("2061111111"));
            assert_eq!(overall(&answer), Code::Ok, "message {i}: {answer:?}");
            assert_status(
                &answer,
                0,
                (Code::Ok, Some((5, UNIT_DAY)), 4 - i),
                "5 a day",
            );
            assert_status(&answer, 1, (Code::Ok, Some((100, UNIT_DAY)), 99 - i), "100");
        }
        let sixth = envoy.ask(marketing("2061111111"));
        assert_eq!(overall(&sixth), Code::OverLimit, "{sixth:?}");
        assert_status(
            &sixth,
            0,
            (Code::OverLimit, Some((5, UNIT_DAY)), 0),
            "sixth",
        );
        // The peer charges the 100 a day of the denied request too (94 left); ours
        // charges nothing of a denied request.
        assert_status(&sixth, 1, (Code::Ok, Some((100, UNIT_DAY)), 95), "sixth");
        let other = envoy.ask(marketing("2062222222"));
        assert_eq!(overall(&other), Code::Ok, "another number, another counter");
        assert_eq!(remaining(&other, 0), 4);
        assert_eq!(remaining(&other, 1), 99);
    });
}

/// Example 3: ("remote_address", "50.0.0.1") gets 10 a second as any address; the most
/// specific match wins, so 50.0.0.5 (requests_per_unit 0) is always over.
#[test]
fn example3_most_specific_match_and_a_blocked_address() {
    on_each_server(&[("example3.yaml", EXAMPLE_3)], |_, envoy| {
        let ip = |address: &str| {
            request(
                "edge_proxy_per_ip",
                vec![desc(&[("remote_address", address)])],
            )
        };
        let blocked = envoy.ask(ip("50.0.0.5"));
        assert_eq!(overall(&blocked), Code::OverLimit, "{blocked:?}");
        assert_status(
            &blocked,
            0,
            (Code::OverLimit, Some((0, UNIT_SECOND)), 0),
            "blocked",
        );
        let fine = envoy.ask(ip("50.0.0.1"));
        assert_eq!(overall(&fine), Code::Ok);
        assert_status(&fine, 0, (Code::Ok, Some((10, UNIT_SECOND)), 9), "50.0.0.1");
    });
}

/// Example 3, ours: a blocked address beside another in one request denies the request and
/// charges the other nothing (the peer charges 50.0.0.9 and shows its 10 a second with 9
/// left); the other, left undecided, shows no limit.
#[test]
fn example3_a_blocked_descriptor_charges_none_beside_it() {
    on_each_server(&[("example3.yaml", EXAMPLE_3)], |_, envoy| {
        let pair = envoy.ask(request(
            "edge_proxy_per_ip",
            vec![
                desc(&[("remote_address", "50.0.0.9")]),
                desc(&[("remote_address", "50.0.0.5")]),
            ],
        ));
        assert_eq!(overall(&pair), Code::OverLimit, "{pair:?}");
        assert_eq!(code(&pair, 1), Code::OverLimit);
        let alone = envoy.ask(request(
            "edge_proxy_per_ip",
            vec![desc(&[("remote_address", "50.0.0.9")])],
        ));
        assert_eq!(
            remaining(&alone, 0),
            9,
            "the pair counted nothing: {alone:?}"
        );
        assert_status(&pair, 0, (Code::Ok, None, 0), "undecided: no limit shown");
    });
}

/// Example 4: a request descriptor of two entries matches only a node two levels deep.
#[test]
fn example4_a_descriptor_matches_its_own_depth_only() {
    let two_entries = || {
        request(
            "example4",
            vec![desc(&[("key", "value"), ("subkey", "subvalue")])],
        )
    };
    on_each_server(&[("example4.yaml", EXAMPLE_4_NO_MATCH)], |_, envoy| {
        let answer = envoy.ask(two_entries());
        assert_eq!(overall(&answer), Code::Ok);
        assert_status(&answer, 0, (Code::Ok, None, 0), "one level: no match");
    });
    on_each_server(&[("example4.yaml", EXAMPLE_4_MATCH)], |_, envoy| {
        let answer = envoy.ask(two_entries());
        assert_eq!(overall(&answer), Code::Ok);
        assert_status(
            &answer,
            0,
            (Code::Ok, Some((300, UNIT_SECOND)), 299),
            "two levels",
        );
    });
}

/// Example 5: an unlimited descriptor is OK with LimitRemaining MaxUint32, answered
/// without the cache (no RL.HIT); azure keeps its 100 a minute.
#[test]
fn example5_unlimited_is_answered_without_redis() {
    on_each_server(&[("example5.yml", EXAMPLE_5)], |redis, envoy| {
        let hits_before = redis.command_calls("RL.HIT").unwrap_or(0);
        let ldap = envoy.ask(request("internal", vec![desc(&[("ldap", "x")])]));
        assert_eq!(overall(&ldap), Code::Ok);
        assert_status(&ldap, 0, (Code::Ok, None, u32::MAX), "ldap");
        assert_eq!(redis.command_calls("RL.HIT").unwrap_or(0), hits_before);
        let azure = envoy.ask(request("internal", vec![desc(&[("azure", "x")])]));
        assert_status(&azure, 0, (Code::Ok, Some((100, UNIT_MINUTE)), 99), "azure");
    });
}

fn example6_user(user: &str, hits: Option<u64>) -> RateLimitRequest {
    let entries = [("service", "auth-service"), ("user", user)];
    let descriptor = match hits {
        Some(hits) => desc_hits(&entries, hits, false),
        None => desc(&entries),
    };
    request("example6", vec![descriptor])
}

/// Example 6: user-a (10 a second, shadow_mode) is never limited, whatever the rate, but
/// the breaches are counted (the peer's shadow_mode stat); its status over the limit is
/// the peer's: OK, the limit shown, 0 left.
#[test]
fn example6_shadow_mode_never_denies_and_counts_the_breaches() {
    on_each_server(&[("example6.yaml", EXAMPLE_6)], |_, envoy| {
        let rule = "example6.service.user_user-a";
        let before = envoy.gateway.metrics();
        let look = || example6_user("user-a", Some(0));
        let answers = burst(envoy, look, 15, || example6_user("user-a", None));
        for (i, answer) in answers.iter().enumerate() {
            assert_eq!(overall(answer), Code::Ok, "shadow, call {i}: {answer:?}");
            let left = 9u32.saturating_sub(i as u32);
            assert_status(
                answer,
                0,
                (Code::Ok, Some((10, UNIT_SECOND)), left),
                "user-a",
            );
        }
        let metrics = envoy.gateway.metrics();
        let denied =
            metrics.decisions(rule, "shadow_denied") - before.decisions(rule, "shadow_denied");
        assert!(denied >= 5.0, "{}", metrics.text);
        let shadow =
            metrics.envoy_hits(rule, "shadow_mode") - before.envoy_hits(rule, "shadow_mode");
        assert!(
            shadow >= 5.0,
            "the peer's shadow_mode stat:\n{}",
            metrics.text
        );
    });
}

/// Example 6: user-b is limited to 20 a second.
#[test]
fn example6_user_b_is_limited() {
    on_each_server(&[("example6.yaml", EXAMPLE_6)], |_, envoy| {
        let look = || example6_user("user-b", Some(0));
        let answers = burst(envoy, look, 21, || example6_user("user-b", None));
        for (i, answer) in answers[..20].iter().enumerate() {
            let left = 19 - i as u32;
            assert_status(
                answer,
                0,
                (Code::Ok, Some((20, UNIT_SECOND)), left),
                "user-b",
            );
        }
        let over = &answers[20];
        assert_eq!(overall(over), Code::OverLimit, "{over:?}");
        assert_status(
            over,
            0,
            (Code::OverLimit, Some((20, UNIT_SECOND)), 0),
            "21st",
        );
    });
}

/// Example 7: (key_1, value_1),(user, bkthomps) is 5 a second, (key_2, value_2),(user,
/// bkthomps) 10; asked together, the 10 replaces the 5, which is neither applied nor
/// changed (its status OK without a limit, as the peer's).
#[test]
fn example7_replaces_drops_the_named_limit() {
    on_each_server(&[("example7.yaml", EXAMPLE_7)], |_, envoy| {
        let first = || desc(&[("key_1", "value_1"), ("user", "bkthomps")]);
        let second = || desc(&[("key_2", "value_2"), ("user", "bkthomps")]);
        let alone = envoy.ask(request("example7", vec![second()]));
        assert_status(
            &alone,
            0,
            (Code::Ok, Some((10, UNIT_SECOND)), 9),
            "key_2 alone",
        );
        let both = envoy.ask(request("example7", vec![first(), second()]));
        assert_eq!(overall(&both), Code::Ok);
        assert_status(&both, 0, (Code::Ok, None, 0), "replaced");
        assert_eq!(shown_limit(&both, 1), Some((10, UNIT_SECOND)), "{both:?}");
        let alone = envoy.ask(request("example7", vec![first()]));
        assert_status(
            &alone,
            0,
            (Code::Ok, Some((5, UNIT_SECOND)), 4),
            "not touched before",
        );
    });
}
