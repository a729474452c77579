//! Shadow mode and the policy counters against real Redis and Valkey servers: a shadow
//! policy never denies but says (RESP2: a `retry_after_ms` other than 0 on an allowed
//! reply; RESP3: `shadow_denied`) and counts what it would have denied, and `RL.STATS`,
//! `RL.STATS RESET` and `INFO ratelimit` count every decision per policy and in total.
//!
//! On Redis 7.0 the module is loaded with `policies-in-rdb yes` (see
//! `tests/policy_persistence.rs` for why).

use testkit::policy::*;
use testkit::*;

use redis::{Connection, Value};

/// `command key POLICY name [extra ...]` on a RESP3 connection: the map's fields, in order.
fn through3(
    con: &mut Connection,
    command: &str,
    key: &str,
    name: &[u8],
    extra: &[&str],
) -> Vec<(String, i64)> {
    let value: Value = through_cmd(command, key, name, extra)
        .query(con)
        .unwrap_or_else(|e| panic!("{command} {key} POLICY {name:?} {extra:?}: {e}"));
    assert!(
        matches!(value, Value::Map(_)),
        "RESP3 answers a map: {value:?}"
    );
    named_integers(value)
}

/// The RESP3 fields of a decision, with `shadow_denied` when given.
fn decision3(values: [i64; 5], shadow_denied: Option<i64>) -> Vec<(String, i64)> {
    let names = [
        "allowed",
        "limit",
        "remaining",
        "reset_after_ms",
        "retry_after_ms",
    ];
    let mut fields: Vec<(String, i64)> = names
        .iter()
        .zip(values)
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    if let Some(denied) = shadow_denied {
        fields.push(("shadow_denied".into(), denied));
    }
    fields
}

#[test]
fn shadow_mode_never_denies_and_counts_what_it_would_have_denied() {
    each_flavor(|flavor| {
        let server = policy_config(flavor).start();
        let w = window_clear_of_edges(&mut server.conn());
        let window = minutes(w);
        let mut con = server.conn();
        let mut con3 = server.conn_resp3();
        policy_set(&mut con, b"shadow", &format!("2 {window} MODE shadow"));
        policy_set(&mut con, b"enforce", &format!("2 {window}"));

        // RESP2: five integers; allowed 1 with a retry_after_ms other than 0 means
        // "would have denied".
        let first = hit_policy(&mut con, "rl:s", b"shadow");
        assert_eq!(
            (first.allowed, first.remaining, first.retry_after_ms),
            (true, 1, 0)
        );
        let second = hit_policy(&mut con, "rl:s", b"shadow");
        assert_eq!(
            (second.allowed, second.remaining, second.retry_after_ms),
            (true, 0, 0)
        );
        let state = (get_bytes(&mut con, "rl:s"), pexpiretime(&mut con, "rl:s"));
        let third = hit_policy(&mut con, "rl:s", b"shadow");
        assert!(third.allowed, "{flavor:?}: shadow mode never denies");
        assert_eq!((third.limit, third.remaining), (2, 0), "{flavor:?}");
        assert!(
            third.retry_after_ms > 0 && third.retry_after_ms <= w,
            "{flavor:?}: the retry says it would have denied: {third:?}"
        );
        let state_now = (get_bytes(&mut con, "rl:s"), pexpiretime(&mut con, "rl:s"));
        assert_eq!(state_now, state, "{flavor:?}: a would-deny writes nothing");

        // RESP3: the map adds shadow_denied for calls through a shadow policy.
        let would = through3(&mut con3, "RL.HIT", "rl:s", b"shadow", &[]);
        let retry = field(&would, "retry_after_ms");
        let reset = field(&would, "reset_after_ms");
        assert!(retry > 0, "{flavor:?}: {would:?}");
        assert_eq!(
            would,
            decision3([1, 2, 0, reset, retry], Some(1)),
            "{flavor:?}"
        );
        let fine = through3(&mut con3, "RL.HIT", "rl:s2", b"shadow", &[]);
        let reset = field(&fine, "reset_after_ms");
        assert_eq!(fine, decision3([1, 2, 1, reset, 0], Some(0)), "{flavor:?}");
        let costly = through3(&mut con3, "RL.HIT", "rl:s2", b"shadow", &["COST", "5"]);
        assert_eq!(
            (field(&costly, "allowed"), field(&costly, "shadow_denied")),
            (1, 1),
            "{flavor:?}: more than the limit at once"
        );
        let peek = through3(&mut con3, "RL.PEEK", "rl:s", b"shadow", &[]);
        assert_eq!(
            (field(&peek, "allowed"), field(&peek, "shadow_denied")),
            (1, 1),
            "{flavor:?}: a peek says it too"
        );
        // A refund decides nothing: no shadow_denied.
        let refund = through3(&mut con3, "RL.REFUND", "rl:s2", b"shadow", &[]);
        let reset = field(&refund, "reset_after_ms");
        assert_eq!(refund, decision3([1, 2, 2, reset, 0], None), "{flavor:?}");
        assert_eq!(get_bytes(&mut con, "rl:s"), state.0, "{flavor:?}");

        // An enforce policy denies, and its RESP3 reply has no shadow_denied.
        for _ in 0..2 {
            assert!(hit_policy(&mut con, "rl:e", b"enforce").allowed);
        }
        let denied = through3(&mut con3, "RL.HIT", "rl:e", b"enforce", &[]);
        let (reset, retry) = (
            field(&denied, "reset_after_ms"),
            field(&denied, "retry_after_ms"),
        );
        assert!(retry > 0, "{flavor:?}");
        assert_eq!(
            denied,
            decision3([0, 2, 0, reset, retry], None),
            "{flavor:?}"
        );
        let error = redis::cmd("RL.HIT")
            .arg("rl:e")
            .arg("POLICY")
            .arg("none")
            .clone();
        assert_eq!(error_text(&mut con, &error), "ERR no such policy 'none'");

        // Counted: 6 hits through `shadow` (3 would-deny), 3 through `enforce` (1 denied).
        let shadow_stats = pairs(&[
            ("hits", 6),
            ("allowed", 6),
            ("denied", 0),
            ("shadow_denied", 3),
        ]);
        let enforce_stats = pairs(&[
            ("hits", 3),
            ("allowed", 2),
            ("denied", 1),
            ("shadow_denied", 0),
        ]);
        assert_eq!(
            rl_stats(&mut con, Some(b"shadow")),
            shadow_stats,
            "{flavor:?}"
        );
        assert_eq!(
            rl_stats(&mut con, Some(b"enforce")),
            enforce_stats,
            "{flavor:?}"
        );
        let totals = pairs(&[
            ("hits", 9),
            ("allowed", 8),
            ("denied", 1),
            ("shadow_denied", 3),
            ("errors", 1),
            ("policies", 2),
        ]);
        assert_eq!(rl_stats(&mut con, None), totals, "{flavor:?}");
        assert_eq!(rl_stats(&mut con3, None), totals, "{flavor:?} RESP3");
        let info: Vec<(String, i64)> = [
            "hits",
            "allowed",
            "denied",
            "shadow_denied",
            "errors",
            "policies",
        ]
        .iter()
        .map(|name| (name.to_string(), server.info_stat(name)))
        .collect();
        assert_eq!(info, totals, "{flavor:?} INFO ratelimit");
        assert_eq!(server.info_stat("fixed_allowed"), 8, "{flavor:?}");
        assert_eq!(server.info_stat("fixed_denied"), 1, "{flavor:?}");

        // A redefinition keeps the counts; hits made without a policy count only in the
        // totals.
        policy_set(&mut con, b"shadow", &format!("3 {window} MODE shadow"));
        assert_eq!(
            rl_stats(&mut con, Some(b"shadow")),
            shadow_stats,
            "{flavor:?}"
        );
        assert!(hit(&mut con, "rl:plain", &["2", "1h"]).allowed);
        assert_eq!(
            rl_stats(&mut con, Some(b"enforce")),
            enforce_stats,
            "{flavor:?}"
        );
        assert_eq!(field(&rl_stats(&mut con, None), "hits"), 10, "{flavor:?}");

        // RESET name zeroes that policy only; RESET zeroes everything but the policies.
        rl_stats_reset(&mut con, Some(b"shadow"));
        let zero = pairs(&[
            ("hits", 0),
            ("allowed", 0),
            ("denied", 0),
            ("shadow_denied", 0),
        ]);
        assert_eq!(rl_stats(&mut con, Some(b"shadow")), zero, "{flavor:?}");
        assert_eq!(
            rl_stats(&mut con, Some(b"enforce")),
            enforce_stats,
            "{flavor:?}"
        );
        assert_eq!(
            field(&rl_stats(&mut con, None), "shadow_denied"),
            3,
            "{flavor:?}"
        );
        rl_stats_reset(&mut con, None);
        assert_eq!(rl_stats(&mut con, Some(b"enforce")), zero, "{flavor:?}");
        let zero_totals = pairs(&[
            ("hits", 0),
            ("allowed", 0),
            ("denied", 0),
            ("shadow_denied", 0),
            ("errors", 0),
            ("policies", 2),
        ]);
        assert_eq!(rl_stats(&mut con, None), zero_totals, "{flavor:?}");
        assert_eq!(server.info_stat("shadow_denied"), 0, "{flavor:?}");
        assert_eq!(server.info_stat("policies"), 2, "{flavor:?}");
        let lower: String = redis::cmd("RL.STATS")
            .arg("reset")
            .query(&mut con)
            .expect("lowercase RESET");
        assert_eq!(lower, "OK");

        // Counting goes on after a reset.
        let again = hit_policy(&mut con, "rl:s", b"shadow");
        assert!(
            again.allowed && again.retry_after_ms == 0,
            "{flavor:?}: 3 now allowed"
        );
        let again = hit_policy(&mut con, "rl:s", b"shadow");
        assert!(
            again.allowed && again.retry_after_ms > 0,
            "{flavor:?}: {again:?}"
        );
        assert_eq!(
            rl_stats(&mut con, Some(b"shadow")),
            pairs(&[
                ("hits", 2),
                ("allowed", 2),
                ("denied", 0),
                ("shadow_denied", 1)
            ]),
            "{flavor:?}"
        );
        assert_eq!(server.info_stat("shadow_denied"), 1, "{flavor:?}");
    });
}
