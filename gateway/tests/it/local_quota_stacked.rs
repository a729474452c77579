//! Local quota on requests that two rules with it apply to (a global cap and a per-user
//! budget, both hot), on Redis 7.0 and Valkey 8.1: each rule takes its own batches, so
//! most requests are decided from held units without a call; a request one rule denies
//! spends nothing of the other; and once the held units go back, Redis counts exactly the
//! requests admitted, for both keys. The same through the Functions library.
//!
//! Every count here is read from Redis (`INFO commandstats`, `RL.PEEK`), never from time.

use crate::local_quota::{quota, rule, spec, OVERSTATED};
use std::time::Duration;
use testkit::functions::fcall_reply;
use testkit::gateway::*;

/// How long units may take to come back (a debug build on a busy machine).
const GIVE_BACK: Duration = Duration::from_secs(20);

/// A global cap of `global` a day, then a user's budget of `user` a day, both with local
/// quota and both applying to `/api/**`.
fn global_and_user(max_batch_percent: u64, global: &str, user: &str) -> String {
    format!(
        "{}{}stack = true\n{}",
        quota(1000, 1000, max_batch_percent),
        rule("global", "/api/**", "global", global, "fixed"),
        rule("user", "/api/**", "header:X-User", user, "fixed"),
    )
}

/// Waits until Redis counts `admitted` units for both keys of [`global_and_user`] (each
/// of one tier `limit`): the units the gateway held went back.
fn both_count(redis: &Server, limits: [&str; 2], admitted: i64, what: &str) {
    let keys = ["rl:{global}:global", "rl:{h:u1}:user"];
    for (key, limit) in keys.into_iter().zip(limits) {
        let words = spec(limit, "fixed");
        wait_until(GIVE_BACK, "the held units given back", || {
            units_counted(redis, key, &words) == admitted
        });
        assert_eq!(units_counted(redis, key, &words), admitted, "{what}: {key}");
    }
}

#[test]
fn two_hot_rules_on_one_request_are_decided_from_batches_of_both() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let rules = global_and_user(1, "100000/1d", "100000/1d");
        let (redis, upstream, gateway) = stack(flavor, &rules);
        for i in 1..=200 {
            let resp = gateway.send("GET", "/api/x", &[("X-User", "u1")]);
            assert_eq!(resp.status, 200, "{what}: {resp:?}");
            // Each tier shows what is left, less what the gateway holds (a request
            // charged while a refill is on its way), never more.
            let left = 100000 - i;
            for tier in resp.limits() {
                assert!(
                    (left - 2000..=left + OVERSTATED).contains(&tier.r),
                    "{what}: request {i}: {tier:?} of {left}"
                );
            }
        }
        let calls = decision_calls(&redis);
        assert!(calls < 50, "{what}: {calls} calls for 200 requests");
        assert!(take_calls(&redis) >= 2, "{what}: batches of both taken");
        assert_eq!(upstream.requests(), 200, "{what}");
        both_count(&redis, ["100000/1d", "100000/1d"], 200, &what);
        gateway.metrics().assert_decisions(
            &what,
            &[("global", "allowed", 200.0), ("user", "allowed", 200.0)],
        );
    });
}

#[test]
fn a_request_the_user_rule_denies_spends_nothing_of_the_global_one() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        // Without a deny cache, so that every denied request is decided anew; batches of
        // at most 40 of the user's 400.
        let rules = format!(
            "[deny_cache]\ncapacity = 0\n{}",
            global_and_user(10, "100000/1d", "400/1d")
        );
        let (redis, upstream, gateway) = stack(flavor, &rules);
        let mut admitted = 0;
        for i in 1..=500 {
            let resp = gateway.send("GET", "/api/x", &[("X-User", "u1")]);
            match resp.status {
                200 => admitted += 1,
                429 => {
                    // The user's denial, as Redis gave it: nothing left, a day's wait.
                    let binding = &resp.limits()[0];
                    assert_eq!((binding.name.as_str(), binding.r), ("user", 0), "{what}");
                    assert!((1..=86400).contains(&resp.retry_after()), "{what}");
                }
                _ => panic!("{what}: request {i}: {resp:?}"),
            }
        }
        // A single client: every unit Redis granted this gateway is spent before it is
        // denied, so the user's budget is admitted exactly.
        assert_eq!(admitted, 400, "{what}");
        assert_eq!(upstream.requests(), 400, "{what}");
        both_count(&redis, ["100000/1d", "400/1d"], 400, &what);
    });
}

#[test]
fn the_functions_library_takes_batches_for_two_rules_on_one_request() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let redis = ServerConfig::managed(flavor).start();
        redis.load_functions();
        let rules = global_and_user(1, "100000/1d", "100000/1d");
        let (redis, upstream, gateway) = stack_on(redis, &rules);
        wait_until(GIVE_BACK, "/readyz 200", || {
            gateway.admin_get("/readyz").status == 200
        });
        let before = redis.command_calls("FCALL").unwrap_or(0);
        for _ in 0..200 {
            let resp = gateway.send("GET", "/api/x", &[("X-User", "u1")]);
            assert_eq!(resp.status, 200, "{what}: {resp:?}");
        }
        let calls = redis.command_calls("FCALL").unwrap_or(0) - before;
        assert!(calls < 50, "{what}: {calls} FCALL for 200 requests");
        assert_eq!(upstream.requests(), 200, "{what}");
        // The library's own look at each key: what was held comes back through it too.
        for key in ["rl:{global}:global", "rl:{h:u1}:user"] {
            let counted = || {
                let look = fcall_reply(&mut redis.conn(), "rl_peek", key, &["100000", "1d"]);
                look.limit - look.remaining - i64::from(look.allowed)
            };
            wait_until(GIVE_BACK, "the held units given back", || counted() == 200);
        }
    });
}
