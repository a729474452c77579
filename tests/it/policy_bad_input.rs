//! Malformed policy commands against real Redis and Valkey servers: every malformed
//! `RL.POLICY`, call through a policy and `RL.STATS` is refused with its exact error, counted
//! as an error, and changes nothing; definitions are checked against the configs of the
//! server that takes them, and a replica with stricter configs takes its primary's all
//! the same.
//!
//! On Redis 7.0 the module is loaded with `policies-in-rdb yes` (see
//! `tests/policy_persistence.rs` for why).

use testkit::policy::*;
use testkit::*;

use redis::Connection;

const POLICY_ARITY: &str = "ERR wrong number of arguments for 'RL.POLICY' command";

#[test]
fn malformed_policy_commands_are_refused_and_change_nothing() {
    // RL.POLICY is a container command: the server answers unknown subcommands itself.
    let unknown_foo = "ERR unknown subcommand 'FOO'. Try RL.POLICY HELP.";
    let unknown_setx = "ERR unknown subcommand 'SETX'. Try RL.POLICY HELP.";
    let cost_in_definition = "ERR unknown option 'COST' (expected ALGO, BURST, MODE, TZ or ANCHOR)";
    let mode = "ERR MODE must be enforce or shadow";
    #[rustfmt::skip]
    let policy_cases: &[(&[&str], &str)] = &[
        (&[], POLICY_ARITY),
        (&["FOO"], unknown_foo),
        (&["FOO", "api"], unknown_foo),
        (&["SETX", "api", "5", "1m"], unknown_setx),
        (&["SET"], POLICY_ARITY),
        (&["GET"], POLICY_ARITY),
        (&["DEL"], POLICY_ARITY),
        (&["GET", "api", "extra"], POLICY_ARITY),
        (&["DEL", "api", "extra"], POLICY_ARITY),
        (&["LIST", "api"], POLICY_ARITY),
        (&["SET", "api"], POLICY_ARITY),
        (&["SET", "api", "7"], POLICY_ARITY),
        (&["SET", "", "5", "1m"], "ERR policy name must not be empty"),
        (&["SET", "api", "5", "1m", "COST", "2"], cost_in_definition),
        (&["SET", "new", "5", "1m", "cost", "2"], "ERR unknown option 'cost' (expected ALGO, BURST, MODE, TZ or ANCHOR)"),
        (&["SET", "api", "5", "1m", "MODE", "loud"], mode),
        (&["SET", "api", "5", "1m", "MODE"], mode),
        (&["SET", "api", "5", "1m", "MODE", "shadow", "MODE", "enforce"], "ERR MODE is given more than once"),
        (&["SET", "api", "5", "1m", "MODE", "shadow", "extra"], "ERR unknown option 'extra' (expected ALGO, BURST, MODE, TZ or ANCHOR)"),
        (&["SET", "api", "0", "1m"], "ERR limit must be a positive integer"),
        (&["SET", "api", "5", "1y"], "ERR window has an unknown unit: use ms, s, m, h or d (a week is 7d), or a calendar period: day, week, month or year"),
        (&["SET", "api", "5", "367d"], "ERR window must be at most 366d (ratelimit.max-window-ms)"),
        (&["SET", "api", "5", "1m", "10"], "ERR each limit needs a window: limit window [limit window ...]"),
        (&["SET", "api", "5", "1m", "ALGO", "leaky"], "ERR ALGO must be one of fixed, sliding, log, token, gcra"),
        (&["SET", "api", "5", "1m", "BURST", "9"], "ERR BURST applies to ALGO token or gcra with a single tier"),
        (&["SET", "api", "20000", "1m", "ALGO", "log"], "ERR ALGO log allows a limit of at most 10000"),
    ];
    let missing_name = "ERR POLICY needs a policy name";
    #[rustfmt::skip]
    let call_cases: &[(&[&str], &str)] = &[
        (&["rl:k", "POLICY"], missing_name),
        (&["rl:k", "policy"], missing_name),
        (&["rl:k", "POLICY", "nope"], "ERR no such policy 'nope'"),
        (&["rl:k", "POLICY", "API"], "ERR no such policy 'API'"),
        (&["rl:k", "POLICY", "api", "COST"], "ERR COST must be a positive integer"),
        (&["rl:k", "POLICY", "api", "COST", "0"], "ERR COST must be a positive integer"),
        (&["rl:k", "POLICY", "api", "COST", "1", "COST", "1"], "ERR COST is given more than once"),
        (&["rl:k", "POLICY", "api", "COST", "1", "extra"], "ERR unknown option 'extra' after POLICY name (expected COST)"),
    ];
    // Options of a definition after `POLICY name`: refused, naming the option (the text
    // in parentheses is the one for explicit rules, so only the start is checked).
    #[rustfmt::skip]
    let foreign_options: &[(&[&str], &str)] = &[
        (&["rl:k", "POLICY", "api", "ALGO", "gcra"], "ERR unknown option 'ALGO'"),
        (&["rl:k", "POLICY", "api", "BURST", "3"], "ERR unknown option 'BURST'"),
        (&["rl:k", "POLICY", "api", "MODE", "shadow"], "ERR unknown option 'MODE'"),
        (&["rl:k", "POLICY", "api", "5", "1m"], "ERR unknown option '5'"),
    ];
    each_flavor(|flavor| {
        let server = policy_config(flavor).start();
        let mut con = server.conn();
        policy_set(&mut con, b"api", "5 1h");
        policy_set(&mut con, b"login", "3 15m MODE shadow");
        let registry = all_policies(&server);
        rl_stats_reset(&mut con, None);
        let assert_unchanged = |con: &mut Connection, context: &str| {
            let pong: String = redis::cmd("PING").query(con).expect("PING");
            assert_eq!(pong, "PONG", "{context}");
            assert_eq!(
                all_policies(&server),
                registry,
                "{context}: the registry changed"
            );
            let exists: i64 = redis::cmd("EXISTS").arg("rl:k").query(con).expect("EXISTS");
            assert_eq!(exists, 0, "{context}: a key was written");
        };
        let mut errors = 0;
        for (args, expected) in policy_cases {
            let context = format!("{flavor:?} RL.POLICY {args:?}");
            let cmd = policy_cmd(args);
            assert_eq!(&error_text(&mut con, &cmd), expected, "{context}");
            assert_unchanged(&mut con, &context);
            // A call without a known subcommand is refused by the server before the
            // module sees it, so the module does not count it.
            let refused_by_server = args.is_empty() || expected.contains("unknown subcommand");
            errors += i64::from(!refused_by_server);
        }
        for command in ["RL.HIT", "RL.PEEK", "RL.REFUND"] {
            for (args, expected) in call_cases {
                let context = format!("{flavor:?} {command} {args:?}");
                let cmd = redis::cmd(command).arg(*args).clone();
                assert_eq!(&error_text(&mut con, &cmd), expected, "{context}");
                assert_unchanged(&mut con, &context);
                errors += 1;
            }
            for (args, start) in foreign_options {
                let context = format!("{flavor:?} {command} {args:?}");
                let cmd = redis::cmd(command).arg(*args).clone();
                let error = error_text(&mut con, &cmd);
                assert!(error.starts_with(start), "{context}: {error}");
                assert_unchanged(&mut con, &context);
                errors += 1;
            }
        }
        #[rustfmt::skip]
        let stats_cases: &[(&[&str], &str)] = &[
            (&["nope"], "ERR no such policy 'nope'"),
            (&["RESET", "nope"], "ERR no such policy 'nope'"),
            (&["a", "b"], "ERR wrong number of arguments for 'RL.STATS' command"),
            (&["RESET", "api", "login"], "ERR wrong number of arguments for 'RL.STATS' command"),
        ];
        for (args, expected) in stats_cases {
            let context = format!("{flavor:?} RL.STATS {args:?}");
            let cmd = redis::cmd("RL.STATS").arg(*args).clone();
            assert_eq!(&error_text(&mut con, &cmd), expected, "{context}");
            assert_unchanged(&mut con, &context);
            errors += 1;
        }
        // Every refusal is counted, and nothing else happened.
        assert_eq!(
            rl_stats(&mut con, None),
            pairs(&[
                ("hits", 0),
                ("allowed", 0),
                ("denied", 0),
                ("shadow_denied", 0),
                ("errors", errors),
                ("policies", 2),
            ]),
            "{flavor:?}"
        );
        assert_eq!(server.info_stat("errors"), errors, "{flavor:?}");
        // The policies still work.
        let reply = hit_policy(&mut con, "rl:k", b"api");
        assert_eq!((reply.allowed, reply.limit, reply.remaining), (true, 5, 4));
    });
}

/// Definitions are checked against the configs when they are made (and take the default
/// algorithm then); a policy already defined keeps working when the configs change, and a
/// replica with stricter configs takes the primary's policies as they are.
#[test]
fn definitions_are_checked_against_the_configs_of_the_server_that_takes_them() {
    each_flavor(|flavor| {
        let primary = policy_config(flavor)
            .module_arg("max-window-ms")
            .module_arg("7200000")
            .module_arg("max-log-limit")
            .module_arg("50")
            .module_arg("default-algorithm")
            .module_arg("sliding")
            .start();
        let mut con = primary.conn();
        let too_long = policy_cmd(&["SET", "p", "5", "3h"]);
        assert_eq!(
            error_text(&mut con, &too_long),
            "ERR window must be at most 7200000ms (ratelimit.max-window-ms)",
            "{flavor:?}"
        );
        let too_big = policy_cmd(&["SET", "p", "51", "1h", "ALGO", "log"]);
        assert_eq!(
            error_text(&mut con, &too_big),
            "ERR ALGO log allows a limit of at most 50",
            "{flavor:?}"
        );
        assert_eq!(policy_get(&mut con, b"p"), None, "{flavor:?}");
        policy_set(&mut con, b"p", "5 2h");
        let sliding = words("5 2h ALGO sliding MODE enforce");
        assert_eq!(
            policy_get(&mut con, b"p"),
            Some(sliding.clone()),
            "{flavor:?}"
        );

        // Stricter configs later: the policy stays as it is and keeps answering.
        redis::cmd("CONFIG")
            .arg(&["SET", "ratelimit.max-window-ms", "60000"])
            .exec(&mut con)
            .expect("CONFIG SET");
        redis::cmd("CONFIG")
            .arg(&["SET", "ratelimit.default-algorithm", "token"])
            .exec(&mut con)
            .expect("CONFIG SET");
        assert_eq!(
            policy_get(&mut con, b"p"),
            Some(sliding.clone()),
            "{flavor:?}"
        );
        let reply = hit_policy(&mut con, "rl:k", b"p");
        assert_eq!((reply.allowed, reply.limit, reply.remaining), (true, 5, 4));
        redis::cmd("CONFIG")
            .arg(&["SET", "ratelimit.max-window-ms", "31622400000"])
            .exec(&mut con)
            .expect("CONFIG SET");
        policy_set(&mut con, b"year", "50 366d ALGO log");
        policy_set(&mut con, b"log", "40 2h ALGO log");

        // A replica whose configs would refuse them takes them all the same: by full sync,
        // then as propagated commands.
        let strict = policy_config(flavor)
            .module_arg("max-window-ms")
            .module_arg("1000")
            .module_arg("max-log-limit")
            .module_arg("10");
        let replica = attach_replica(&primary, strict);
        policy_set(&mut con, b"late", "30 30d ALGO log MODE shadow");
        wait_for_replicas(&mut con, 1);
        let expected = all_policies(&primary);
        assert_eq!(expected.len(), 4, "{flavor:?}");
        assert_eq!(all_policies(&replica), expected, "{flavor:?}");
    });
}
