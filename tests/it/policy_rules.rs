//! Calls that name a policy (`RL.HIT|PEEK|REFUND key POLICY name`) against real Redis and
//! Valkey servers: `RL.POLICY SET|GET|DEL|LIST` define, show, list and delete policies,
//! calls through a policy use its rule, a redefinition applies to the next call for every
//! key, and a deleted policy fails the calls that name it.
//!
//! On Redis 7.0 the module is loaded with `policies-in-rdb yes` (see
//! `tests/policy_persistence.rs` for why).

use testkit::policy::*;
use testkit::*;

#[test]
fn policies_are_defined_shown_listed_and_deleted() {
    each_flavor(|flavor| {
        let server = policy_config(flavor).start();
        let mut con = server.conn();
        assert_eq!(policy_list(&mut con), Vec::<Vec<u8>>::new(), "{flavor:?}");
        assert_eq!(policy_get(&mut con, b"api"), None, "{flavor:?}");

        // GET shows the canonical arguments: windows in their largest unit, the algorithm
        // and the mode always, BURST only when it differs from the limit.
        #[rustfmt::skip]
        let cases: [(&[u8], &str, &str); 8] = [
            (b"api", "5 1m", "5 1m ALGO fixed MODE enforce"),
            (b"login", "3 900", "3 15m ALGO fixed MODE enforce"),
            (b"tiers", "10 1000ms 1000 3600s", "10 1s 1000 1h ALGO fixed MODE enforce"),
            (b"gcra", "10 1h algo GCRA burst 3", "10 1h ALGO gcra BURST 3 MODE enforce"),
            (b"token", "10 1h ALGO token BURST 10", "10 1h ALGO token MODE enforce"),
            (b"shadow", "7 90s ALGO log mode SHADOW", "7 90s ALGO log MODE shadow"),
            (b"Api", "1 250ms MODE enforce", "1 250ms ALGO fixed MODE enforce"),
            (b"\0bin\xff name\r\n", "2 1d ALGO sliding", "2 1d ALGO sliding MODE enforce"),
        ];
        for (name, rule, shown) in cases {
            policy_set(&mut con, name, rule);
            assert_eq!(
                policy_get(&mut con, name),
                Some(words(shown)),
                "{flavor:?} {rule}"
            );
        }
        // What GET shows defines the same policy again.
        for (name, _, shown) in cases {
            policy_set(&mut con, name, shown);
            assert_eq!(policy_get(&mut con, name), Some(words(shown)), "{flavor:?}");
        }

        // Names are case-sensitive byte strings, listed in byte order.
        let mut names: Vec<Vec<u8>> = cases.iter().map(|(n, _, _)| n.to_vec()).collect();
        names.sort();
        assert_eq!(policy_list(&mut con), names, "{flavor:?}");
        assert_eq!(
            names.first().map(Vec::as_slice),
            Some(&b"\0bin\xff name\r\n"[..])
        );
        assert_eq!(policy_get(&mut con, b"API"), None, "{flavor:?}");
        assert_eq!(policy_get(&mut con, b"api "), None, "{flavor:?}");
        assert_eq!(server.info_stat("policies"), 8, "{flavor:?}");
        assert_eq!(
            field(&rl_stats(&mut con, None), "policies"),
            8,
            "{flavor:?}"
        );

        // A redefinition replaces the definition; the subcommands take any case.
        let reply: String = redis::cmd("rl.policy")
            .arg("set")
            .arg("api")
            .arg(&["50", "1h", "ALGO", "token"])
            .query(&mut con)
            .expect("lowercase set");
        assert_eq!(reply, "OK");
        let shown: Option<Vec<String>> = redis::cmd("RL.POLICY")
            .arg("get")
            .arg("api")
            .query(&mut con)
            .expect("lowercase get");
        assert_eq!(shown, Some(words("50 1h ALGO token MODE enforce")));
        assert_eq!(policy_list(&mut con).len(), 8, "{flavor:?} still 8");

        // DEL answers whether it deleted; deleting one name leaves its case-twin.
        assert_eq!(policy_del(&mut con, b"api"), 1, "{flavor:?}");
        assert_eq!(policy_del(&mut con, b"api"), 0, "{flavor:?}");
        assert_eq!(policy_del(&mut con, b"never"), 0, "{flavor:?}");
        assert_eq!(policy_get(&mut con, b"api"), None, "{flavor:?}");
        assert!(policy_get(&mut con, b"Api").is_some(), "{flavor:?}");
        let deleted: i64 = redis::cmd("RL.POLICY")
            .arg("Del")
            .arg(b"\0bin\xff name\r\n".as_slice())
            .query(&mut con)
            .expect("DEL");
        assert_eq!(deleted, 1);
        let left: Vec<Vec<u8>> = [
            &b"Api"[..],
            b"gcra",
            b"login",
            b"shadow",
            b"tiers",
            b"token",
        ]
        .iter()
        .map(|n| n.to_vec())
        .collect();
        assert_eq!(policy_list(&mut con), left, "{flavor:?}");
        assert_eq!(server.info_stat("policies"), 6, "{flavor:?}");
        for name in &left {
            assert_eq!(policy_del(&mut con, name), 1, "{flavor:?}");
        }
        assert_eq!(policy_list(&mut con), Vec::<Vec<u8>>::new(), "{flavor:?}");
        assert_eq!(server.info_stat("policies"), 0, "{flavor:?}");
    });
}

/// The seeds' rules: 5 per minute per endpoint, and a stricter one for login.
#[test]
fn the_seeds_rules_limit_each_endpoint() {
    each_flavor(|flavor| {
        let server = policy_config(flavor).start();
        let mut con = server.conn();
        policy_set(&mut con, b"api", "5 1m");
        policy_set(&mut con, b"login", "3 15m");
        // The minute-long windows of the seeds' rules must not end mid-test.
        stay_clear_of_window_edges(&server, MINUTE_MS, 3_000);

        let endpoints = [
            "rl:{203.0.113.7}:GET:/home",
            "rl:{203.0.113.7}:GET:/about",
            "rl:{198.51.100.2}:GET:/home",
        ];
        for key in endpoints {
            for remaining in (0..5).rev() {
                let reply = hit_policy(&mut con, key, b"api");
                assert_eq!(
                    (
                        reply.allowed,
                        reply.limit,
                        reply.remaining,
                        reply.retry_after_ms
                    ),
                    (true, 5, remaining, 0),
                    "{flavor:?} {key}"
                );
                assert!(reply.reset_after_ms > 0 && reply.reset_after_ms <= MINUTE_MS);
            }
            let denied = hit_policy(&mut con, key, b"api");
            assert!(!denied.allowed, "{flavor:?} {key}: the sixth is denied");
            assert_eq!((denied.limit, denied.remaining), (5, 0));
            assert!(denied.retry_after_ms > 0 && denied.retry_after_ms <= MINUTE_MS);
        }

        let login = "rl:{203.0.113.7}:POST:/login";
        for remaining in (0..3).rev() {
            let reply = hit_policy(&mut con, login, b"login");
            assert_eq!(
                (reply.allowed, reply.limit, reply.remaining),
                (true, 3, remaining),
                "{flavor:?}"
            );
        }
        let denied = hit_policy(&mut con, login, b"login");
        assert!(!denied.allowed, "{flavor:?}: the fourth login is denied");
        assert!(denied.retry_after_ms > 0 && denied.retry_after_ms <= 15 * MINUTE_MS);

        // COST, RL.PEEK and RL.REFUND name the policy the same way; the keyword takes any
        // case; a call through the policy and one that spells out its rule share the state.
        let key = "rl:{192.0.2.1}:GET:/search";
        let costly = through(&mut con, "RL.HIT", key, b"api", &["COST", "2"]);
        assert_eq!((costly.allowed, costly.remaining), (true, 3), "{flavor:?}");
        let values: Vec<i64> = redis::cmd("RL.HIT")
            .arg(key)
            .arg("policy")
            .arg("api")
            .arg("cost")
            .arg("1")
            .query(&mut con)
            .expect("lowercase POLICY");
        assert_eq!(decode_reply(&values).remaining, 2, "{flavor:?}");
        let stored = get_bytes(&mut con, key);
        let peek = through(&mut con, "RL.PEEK", key, b"api", &[]);
        assert_eq!((peek.allowed, peek.remaining), (true, 1), "{flavor:?}");
        let peek = through(&mut con, "RL.PEEK", key, b"api", &["COST", "3"]);
        assert!(!peek.allowed, "{flavor:?}: a peek at 3 more is denied");
        assert_eq!(
            get_bytes(&mut con, key),
            stored,
            "{flavor:?}: peeks write nothing"
        );
        let spelled = hit(&mut con, key, &["5", "1m"]);
        assert_eq!(
            (spelled.allowed, spelled.remaining),
            (true, 1),
            "{flavor:?}"
        );
        let refund = through(&mut con, "RL.REFUND", key, b"api", &["COST", "2"]);
        assert_eq!(refund.remaining, 3, "{flavor:?}: two given back");
        let absent = through(&mut con, "RL.PEEK", "rl:never", b"login", &[]);
        assert_eq!((absent.allowed, absent.remaining), (true, 2), "{flavor:?}");
        let exists: i64 = redis::cmd("EXISTS")
            .arg("rl:never")
            .query(&mut con)
            .expect("EXISTS");
        assert_eq!(exists, 0, "{flavor:?}: a peek creates no key");
    });
}

/// A redefinition applies to the next call for every key, by the module's renewal rules:
/// never more than the new limit on top of what was used, never a wait longer than one
/// new window.
#[test]
fn a_redefined_policy_applies_to_the_next_call_for_every_key() {
    each_flavor(|flavor| {
        let server = policy_config(flavor).start();
        let w = window_clear_of_edges(&mut server.conn());
        let mut con = server.conn();
        let (a, b, c) = ("rl:a", "rl:b", "rl:c");
        let allowed = |reply: Reply| (reply.allowed, reply.limit, reply.remaining);

        policy_set(&mut con, b"rule", &format!("3 {}", minutes(2 * w)));
        for remaining in [2, 1, 0] {
            assert_eq!(
                allowed(hit_policy(&mut con, a, b"rule")),
                (true, 3, remaining)
            );
        }
        assert!(!hit_policy(&mut con, a, b"rule").allowed, "{flavor:?}");
        assert_eq!(allowed(hit_policy(&mut con, b, b"rule")), (true, 3, 2));

        // A shorter window: what was used counts again, now; the wait is one new window
        // at most.
        policy_set(&mut con, b"rule", &format!("3 {}", minutes(w)));
        let denied = hit_policy(&mut con, a, b"rule");
        assert!(!denied.allowed, "{flavor:?}: 3 used of 3");
        assert!(
            denied.retry_after_ms > 0 && denied.retry_after_ms <= w,
            "{denied:?}"
        );
        assert_eq!(allowed(hit_policy(&mut con, b, b"rule")), (true, 3, 1));

        // A higher limit: the count meets it.
        policy_set(&mut con, b"rule", &format!("10 {}", minutes(w)));
        assert_eq!(allowed(hit_policy(&mut con, a, b"rule")), (true, 10, 6));
        assert_eq!(allowed(hit_policy(&mut con, b, b"rule")), (true, 10, 7));

        // A lower limit than what was used: denied, for one window at most.
        policy_set(&mut con, b"rule", &format!("2 {}", minutes(w)));
        for key in [a, b] {
            let denied = hit_policy(&mut con, key, b"rule");
            assert_eq!(
                (denied.allowed, denied.limit),
                (false, 2),
                "{flavor:?} {key}"
            );
            assert!(denied.retry_after_ms > 0 && denied.retry_after_ms <= w);
        }

        // Another algorithm: a (4 used) and b (3 used) start afresh from their usage.
        policy_set(&mut con, b"rule", &format!("20 {} ALGO gcra", minutes(w)));
        assert_eq!(allowed(hit_policy(&mut con, a, b"rule")), (true, 20, 15));
        assert_eq!(allowed(hit_policy(&mut con, b, b"rule")), (true, 20, 16));

        // Used beyond the new limit: counted as the new limit, and the wait is one new
        // window at most.
        policy_set(&mut con, b"rule", &format!("4 {} ALGO gcra", minutes(w)));
        for key in [a, b] {
            let denied = hit_policy(&mut con, key, b"rule");
            assert_eq!(
                (denied.allowed, denied.limit),
                (false, 4),
                "{flavor:?} {key}"
            );
            assert!(denied.retry_after_ms > 0 && denied.retry_after_ms <= w);
        }
        policy_set(&mut con, b"rule", &format!("50 {} ALGO token", minutes(w)));
        assert_eq!(allowed(hit_policy(&mut con, a, b"rule")), (true, 50, 45));
        assert_eq!(allowed(hit_policy(&mut con, b, b"rule")), (true, 50, 45));
        assert_eq!(allowed(hit_policy(&mut con, c, b"rule")), (true, 50, 49));

        // An enforce policy turned to shadow stops denying, and back.
        policy_set(&mut con, b"rule", &format!("2 {}", minutes(w)));
        assert!(!hit_policy(&mut con, a, b"rule").allowed, "{flavor:?}");
        policy_set(&mut con, b"rule", &format!("2 {} MODE shadow", minutes(w)));
        let shadow = hit_policy(&mut con, a, b"rule");
        assert!(
            shadow.allowed && shadow.retry_after_ms > 0,
            "{flavor:?}: {shadow:?}"
        );
        policy_set(&mut con, b"rule", &format!("2 {}", minutes(w)));
        assert!(!hit_policy(&mut con, a, b"rule").allowed, "{flavor:?}");
    });
}

/// Deleting a policy makes every call naming it fail with a clear ERR, and touches no key.
#[test]
fn a_deleted_policy_fails_the_calls_that_name_it() {
    each_flavor(|flavor| {
        let server = policy_config(flavor).start();
        let rule = format!("5 {}", minutes(window_clear_of_edges(&mut server.conn())));
        let mut con = server.conn();
        policy_set(&mut con, b"api", &rule);
        assert!(hit_policy(&mut con, "rl:k", b"api").allowed);
        let state = (get_bytes(&mut con, "rl:k"), pexpiretime(&mut con, "rl:k"));
        assert_eq!(policy_del(&mut con, b"api"), 1);

        for command in ["RL.HIT", "RL.PEEK", "RL.REFUND"] {
            for extra in [&[][..], &["COST", "2"]] {
                let cmd = through_cmd(command, "rl:k", b"api", extra);
                assert_eq!(
                    error_text(&mut con, &cmd),
                    "ERR no such policy 'api'",
                    "{flavor:?} {command} {extra:?}"
                );
            }
        }
        let stats = redis::cmd("RL.STATS").arg("api").clone();
        assert_eq!(error_text(&mut con, &stats), "ERR no such policy 'api'");
        let reset = redis::cmd("RL.STATS").arg("RESET").arg("api").clone();
        assert_eq!(error_text(&mut con, &reset), "ERR no such policy 'api'");
        // The name is quoted printably whatever its bytes.
        let odd = through_cmd("RL.HIT", "rl:k", b"a b\r\n\0\xff-ERR", &[]);
        assert_eq!(
            error_text(&mut con, &odd),
            "ERR no such policy 'a?b????-ERR'"
        );
        let state_now = (get_bytes(&mut con, "rl:k"), pexpiretime(&mut con, "rl:k"));
        assert_eq!(state_now, state, "{flavor:?}: failed calls write nothing");

        // Defined again, the calls work again, on the state the key holds.
        policy_set(&mut con, b"api", &rule);
        let reply = hit_policy(&mut con, "rl:k", b"api");
        assert_eq!((reply.allowed, reply.remaining), (true, 3), "{flavor:?}");
        assert_eq!(
            rl_stats(&mut con, Some(b"api")),
            pairs(&[
                ("hits", 1),
                ("allowed", 1),
                ("denied", 0),
                ("shadow_denied", 0)
            ]),
            "{flavor:?}: a policy defined again counts from zero"
        );
    });
}
