//! Local quota (`local_quota = true`): the gateway takes a hot key's units from Redis in
//! batches (`RL.TAKE ... UPTO n`), decides requests from them in memory, tops a batch up in
//! the background when half of it is spent, and gives unused units back (`RL.REFUND`) when
//! they sit unspent for `hold_ms`, before their window ends, on a reload and on SIGTERM.
//! On Redis 7.0 and Valkey 8.1: a quiet key still costs one call per request, a denial is
//! Redis's (Retry-After, deny cache), fixed windows admit exactly their limit across
//! gateways, units held while Redis is frozen are spent, a killed gateway's units come back
//! with the next window or the refilled bucket, stacked rules batch only when every limited
//! one has local quota, and check mode, Envoy's gRPC front end and the Functions library
//! take the same batches. A rule local quota cannot keep is refused at load. Redis Cluster
//! is in `local_quota_cluster.rs`.
//!
//! Every count here is read from Redis (`INFO commandstats`, `RL.PEEK`), never from time:
//! the rules' `interval_ms` of a second makes any burst of a test batch, and `hold_ms`
//! says which give-back a test waits for.

use std::sync::Arc;
use std::time::Duration;
use testkit::functions::fcall_reply;
use testkit::gateway::envoy::*;
use testkit::gateway::*;

/// How long units may take to come back (a debug build on a busy machine).
const GIVE_BACK: Duration = Duration::from_secs(20);

/// The most an allowed answer may show above what is really left: none. (A request
/// charged by `RL.HIT` while its key's refill is out is left out of what the answers
/// decided from that refill show; `a_request_charged_while_its_refill_is_out_...` pins it.)
pub(crate) const OVERSTATED: i64 = 0;

/// `[local_quota]`.
pub(crate) fn quota(interval_ms: u64, hold_ms: u64, max_batch_percent: u64) -> String {
    format!(
        "[local_quota]\ninterval_ms = {interval_ms}\nhold_ms = {hold_ms}\n\
         max_batch_percent = {max_batch_percent}\n"
    )
}

/// A rule with local quota: one tier `limit` (`"50/1d"`) of `algorithm`, keyed by `key`.
pub(crate) fn rule(name: &str, path: &str, key: &str, limit: &str, algorithm: &str) -> String {
    format!(
        "[[rule]]\nname = \"{name}\"\npath = \"{path}\"\nkey = \"{key}\"\n\
         limits = [\"{limit}\"]\nalgorithm = \"{algorithm}\"\nlocal_quota = true\n"
    )
}

/// The words `RL.PEEK` reads the rule's tier with: `"50 1d ALGO fixed"`.
pub(crate) fn spec(limit: &str, algorithm: &str) -> String {
    format!("{} ALGO {algorithm}", limit.replace('/', " "))
}

/// The key of rule `name` with `key = "global"`.
pub(crate) fn global(name: &str) -> String {
    format!("rl:{{global}}:{name}")
}

/// Asserts an answer under a budget of `limit`: a 200 that shows what is left, or a 429
/// with a Retry-After within `window_s` and nothing left; never let through by a failure.
fn assert_decided(resp: &Resp, limit: i64, window_s: u64, what: &str) {
    match resp.status {
        200 => {
            let left = resp.remaining();
            assert!((0..limit).contains(&left), "{what}: {resp:?}");
            assert_eq!(resp.fail_open_reason(), None, "{what}: {resp:?}");
        }
        429 => {
            assert!(resp.retry_after() <= window_s, "{what}: {resp:?}");
            assert_eq!(resp.remaining(), 0, "{what}: {resp:?}");
        }
        _ => panic!("{what}: neither allowed nor denied: {resp:?}"),
    }
}

/// `n` requests `GET path` in a row, each of which must be allowed, showing what is left
/// of a budget that had `left_before`. Decided from held units or by a take, that is
/// exactly `left_before - i` (the units the gateway holds are still its clients'). A
/// request that finds its key's units short while their refill is on its way is charged
/// by `RL.HIT`, whose answer cannot count the units this gateway holds or is taking: it
/// shows less, by at most `slack`. Never more (see [`OVERSTATED`]).
pub(crate) fn allowed_in_a_row(
    gateway: &Gateway,
    path: &str,
    n: i64,
    left_before: i64,
    slack: i64,
    what: &str,
) {
    for i in 1..=n {
        let resp = gateway.get(path);
        assert_eq!(resp.status, 200, "{what}: request {i}: {resp:?}");
        let exact = left_before - i;
        let shown = resp.remaining();
        assert!(
            (exact - slack..=exact + OVERSTATED).contains(&shown),
            "{what}: request {i} shows {shown} left of {exact}"
        );
    }
}

/// `n` requests `GET path` in a row, each of which must be allowed (a bucket refills
/// while they are asked, so what is left is not counted down).
fn all_allowed(gateway: &Gateway, path: &str, n: usize, what: &str) {
    for i in 1..=n {
        let resp = gateway.get(path);
        assert_eq!(resp.status, 200, "{what}: request {i}: {resp:?}");
    }
}

/// A hot rule and a cold one, each of 100000 a day, in batches of at most 1000.
fn hot_and_cold() -> String {
    format!(
        "{}{}{}",
        quota(1000, 5000, 1),
        rule("hot", "/hot/**", "global", "100000/1d", "fixed"),
        rule("cold", "/cold/**", "header:X-User", "100000/1d", "fixed"),
    )
}

/// Eight clients sending `n` requests each at once, all of which must be allowed: what
/// each answer showed left, sorted.
fn eight_clients(gateway: &Arc<Gateway>, path: &'static str, n: usize) -> Vec<i64> {
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let gateway = gateway.clone();
            std::thread::spawn(move || {
                (0..n)
                    .map(|_| {
                        let resp = gateway.get(path);
                        assert_eq!(resp.status, 200, "{resp:?}");
                        resp.remaining()
                    })
                    .collect::<Vec<i64>>()
            })
        })
        .collect();
    let mut shown: Vec<i64> = clients
        .into_iter()
        .flat_map(|c| c.join().expect("a client thread"))
        .collect();
    shown.sort_unstable();
    shown
}

#[test]
fn a_hot_key_is_decided_from_batches_in_far_fewer_calls_than_requests() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let (redis, upstream, gateway) = stack(flavor, &hot_and_cold());
        let first = gateway.get("/hot/x");
        let policy = PolicyTier {
            name: "hot".into(),
            q: 100000,
            w: Some(86400),
        };
        assert_eq!(first.policy(), [policy], "{what}: {first:?}");
        assert_eq!(first.remaining(), 99999, "{what}: a cold key's is Redis's");
        allowed_in_a_row(&gateway, "/hot/x", 99, 99999, 2000, &what);
        let gateway = Arc::new(gateway);
        let shown = eight_clients(&gateway, "/hot/x", 50);
        let (least, most) = (shown[0], shown[shown.len() - 1]);
        assert!(
            least >= 100000 - 500 - 2000 && most < 100000 - 100,
            "{what}: {least}..{most}"
        );

        let calls = decision_calls(&redis);
        assert!(calls < 250, "{what}: {calls} calls for 500 requests");
        assert!(take_calls(&redis) > 0, "{what}: batches taken");
        assert_eq!(upstream.requests(), 500, "{what}");
        let counted = units_counted(&redis, &global("hot"), &spec("100000/1d", "fixed"));
        assert!(
            (500..=500 + 1500).contains(&counted),
            "{what}: Redis counts the 500 and at most a batch and a half held: {counted}"
        );
        // Decided in memory or by Redis, each is counted as allowed.
        gateway
            .metrics()
            .assert_decisions(&what, &[("hot", "allowed", 500.0)]);
    });
}

#[test]
fn a_key_seen_fewer_than_four_times_an_interval_is_charged_per_request() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let (redis, _upstream, gateway) = stack(flavor, &hot_and_cold());
        for user in ["u1", "u2", "u3", "u4", "u5"] {
            for left in [99999, 99998, 99997] {
                let resp = gateway.send("GET", "/cold/x", &[("X-User", user)]);
                assert_eq!(resp.status, 200, "{what} {user}: {resp:?}");
                assert_eq!(resp.remaining(), left, "{what} {user}");
            }
            let key = format!("rl:{{h:{user}}}:cold");
            let counted = units_counted(&redis, &key, &spec("100000/1d", "fixed"));
            assert_eq!(counted, 3, "{what} {user}: nothing held");
        }
        assert_eq!(decision_calls(&redis), 15, "{what}: one call each");
        gateway
            .metrics()
            .assert_decisions(&what, &[("cold", "allowed", 15.0)]);
    });
}

#[test]
fn a_denial_is_redis_s_with_its_retry_after_and_goes_to_the_deny_cache() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let rules = format!(
            "{}{}",
            quota(1000, 5000, 50),
            rule("api", "/**", "global", "30/1d", "fixed")
        );
        let (redis, upstream, gateway) = stack(flavor, &rules);
        allowed_in_a_row(&gateway, "/x", 30, 30, 30, &what);
        let denied = gateway.get("/x");
        assert_eq!(denied.status, 429, "{what}: {denied:?}");
        assert_eq!(denied.remaining(), 0, "{what}");
        // The wait Redis gives, in whole seconds (rounded up, or a second later).
        let wait_ms = peek(&redis, &global("api"), &spec("30/1d", "fixed")).retry_after_ms;
        let wait = u64::try_from(wait_ms).expect("a wait");
        let retry = denied.retry_after();
        assert!(
            (wait.div_ceil(1000)..=wait.div_ceil(1000) + 1).contains(&retry),
            "{what}: Retry-After {retry} for a wait of {wait_ms} ms"
        );
        let calls = decision_calls(&redis);
        for _ in 0..5 {
            assert_eq!(gateway.get("/x").status, 429, "{what}");
        }
        assert_eq!(decision_calls(&redis), calls, "{what}: from the deny cache");
        assert_eq!(upstream.requests(), 30, "{what}");
        gateway.metrics().assert_decisions(
            &what,
            &[
                ("api", "allowed", 30.0),
                ("api", "denied", 1.0),
                ("api", "denied_cached", 5.0),
            ],
        );
    });
}

/// Two gateways in front of one upstream and one Redis, without a deny cache (a gateway
/// denied while the other held the last units asks Redis again once they are back), a
/// rule of 50 a day on one key.
fn two_gateways(flavor: Flavor) -> (Server, Upstream, [Arc<Gateway>; 2]) {
    let redis = ServerConfig::new(flavor).start();
    let upstream = Upstream::start();
    let rules = format!(
        "[deny_cache]\ncapacity = 0\n{}{}",
        quota(1000, 5000, 50),
        rule("api", "/**", "global", "50/1d", "fixed"),
    );
    let start = || Arc::new(Gateway::in_front_of(&upstream, &redis, &rules));
    let gateways = [start(), start()];
    (redis, upstream, gateways)
}

/// What `key` counts once no take is on its way any more (two reads in a row agree).
pub(crate) fn settled_count(redis: &Server, key: &str, words: &str) -> i64 {
    let mut last = -1;
    wait_until(GIVE_BACK, "no take on its way", || {
        let counted = units_counted(redis, key, words);
        std::mem::replace(&mut last, counted) == counted
    });
    last
}

/// `GET /x` through `gateway` until it is denied: how many were allowed.
fn allowed_until_denied(gateway: &Gateway, what: &str) -> i64 {
    let mut allowed = 0;
    loop {
        let resp = gateway.get("/x");
        assert_decided(&resp, 50, 86400, what);
        if resp.status == 429 {
            return allowed;
        }
        allowed += 1;
        assert!(allowed <= 50, "{what}: allowed above the limit");
    }
}

#[test]
fn units_one_gateway_holds_while_another_is_denied_come_back_to_it() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let (redis, upstream, [holder, other]) = two_gateways(flavor);
        let (key, words) = (global("api"), spec("50/1d", "fixed"));
        allowed_in_a_row(&holder, "/x", 20, 50, 50, &what);
        let counted = settled_count(&redis, &key, &words);
        let held = counted - 20;
        assert!(held > 0, "{what}: the first gateway holds units");
        // The other gets what Redis has left, and is denied while those units are held...
        let first = allowed_until_denied(&other, &what);
        assert_eq!(first, 50 - counted, "{what}");
        // ...until they go back, unspent for hold_ms: then they are its.
        wait_until(GIVE_BACK, "the held units given back", || {
            units_counted(&redis, &key, &words) == 20 + first
        });
        let second = allowed_until_denied(&other, &what);
        assert_eq!(second, held, "{what}");
        assert_eq!(allowed_until_denied(&holder, &what), 0, "{what}");
        assert_eq!(upstream.requests(), 50, "{what}");
        assert_eq!(units_counted(&redis, &key, &words), 50, "{what}");
    });
}

#[test]
fn a_crowd_on_two_gateways_sharing_a_key_gets_exactly_the_limit() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let (redis, upstream, gateways) = two_gateways(flavor);
        // Two clients on each gateway ask 80 times for 50 units.
        let clients: Vec<_> = (0..4)
            .map(|c| {
                let gateway = gateways[c % 2].clone();
                std::thread::spawn(move || {
                    (0..20)
                        .filter(|_| {
                            let resp = gateway.get("/x");
                            assert_decided(&resp, 50, 86400, "a client");
                            resp.status == 200
                        })
                        .count()
                })
            })
            .collect();
        let mut admitted: usize = clients
            .into_iter()
            .map(|c| c.join().expect("a client thread"))
            .sum();
        assert!(admitted <= 50, "{what}: {admitted} admitted of 50");
        // Units a gateway took and did not spend go back within hold_ms...
        let (key, words) = (global("api"), spec("50/1d", "fixed"));
        wait_until(GIVE_BACK, "the held units given back", || {
            units_counted(&redis, &key, &words) == admitted as i64
        });
        // ...for whoever asks next, and nobody gets more.
        for gateway in &gateways {
            admitted += usize::try_from(allowed_until_denied(gateway, &what)).unwrap_or(0);
        }
        assert_eq!(admitted, 50, "{what}");
        assert_eq!(upstream.requests(), 50, "{what}");
        assert_eq!(units_counted(&redis, &key, &words), 50, "{what}");
    });
}

#[test]
fn a_batch_half_spent_is_topped_up_before_it_runs_out() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        // Batches of at most 200 (1 % of 20000), each lasting 100 requests after its
        // refill is asked: far longer than an RL.TAKE takes.
        let rules = format!(
            "{}{}",
            quota(1000, 10000, 1),
            rule("api", "/**", "global", "20000/1d", "fixed")
        );
        let (redis, _upstream, gateway) = stack(flavor, &rules);
        let (key, words) = (global("api"), spec("20000/1d", "fixed"));
        // The key's rate grows until its batches are full.
        allowed_in_a_row(&gateway, "/x", 300, 20000, 400, &what);
        let takes_before = decision_calls(&redis);
        let mut con = redis.conn();
        let mut ran_dry = Vec::new();
        for n in 301..=900 {
            let resp = gateway.get("/x");
            assert_eq!(resp.status, 200, "{what}: {resp:?}");
            // None waits for Redis, so every answer is exact (see [`OVERSTATED`]).
            let (shown, exact) = (resp.remaining(), 20000 - n);
            let what = format!("{what}: request {n} shows {shown} left of {exact}");
            assert!((exact..=exact + OVERSTATED).contains(&shown), "{what}");
            // What Redis counts beyond the admitted requests is what the gateway holds.
            if units_counted_on(&mut con, &key, &words) <= n {
                ran_dry.push(n);
            }
        }
        assert_eq!(
            ran_dry,
            Vec::<i64>::new(),
            "{what}: after these requests the gateway held nothing, so the next waited"
        );
        let takes = decision_calls(&redis) - takes_before;
        assert!(
            (3..300).contains(&takes),
            "{what}: 600 requests of batches of at most 200 took {takes} times"
        );
    });
}

#[test]
fn units_unspent_for_hold_ms_go_back() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let rules = format!(
            "{}{}",
            quota(1000, 1000, 50),
            rule("api", "/**", "global", "1000/1d", "fixed")
        );
        let (redis, _upstream, gateway) = stack(flavor, &rules);
        let (key, words) = (global("api"), spec("1000/1d", "fixed"));
        allowed_in_a_row(&gateway, "/x", 50, 1000, 1000, &what);
        let counted = settled_count(&redis, &key, &words);
        assert!(counted > 50, "{what}: the gateway holds units: {counted}");
        wait_until(GIVE_BACK, "the idle key's units given back", || {
            units_counted(&redis, &key, &words) == 50
        });
        assert!(refund_calls(&redis) > 0, "{what}: by RL.REFUND");
        allowed_in_a_row(&gateway, "/x", 1, 950, 0, &what);
    });
}

/// The number of the window of `window_ms` Redis's clock is in, and the ms left in it
/// (fixed windows start at multiples of their length since the epoch).
fn window_now(redis: &Server, window_ms: i64) -> (i64, i64) {
    let now = redis.time_ms();
    (
        now.div_euclid(window_ms),
        window_ms - now.rem_euclid(window_ms),
    )
}

/// Waits for a window of `window_ms` later than window `after` with at least
/// `at_least_ms` left: its number.
fn fresh_window(redis: &Server, window_ms: i64, after: i64, at_least_ms: i64) -> i64 {
    loop {
        let (window, left) = window_now(redis, window_ms);
        if window > after && left >= at_least_ms {
            return window;
        }
        std::thread::sleep(Duration::from_millis(left.unsigned_abs() + 10));
    }
}

/// Runs `attempt` in a fresh window of `window_ms` after window `after` (at least
/// `at_least_ms` left), until its requests all fell in the window it was given (it says
/// so), at most five times: a run that crossed a window's end is run again in a later one
/// instead of asserting how long requests take.
fn in_one_window(
    redis: &Server,
    (window_ms, at_least_ms): (i64, i64),
    mut after: i64,
    mut attempt: impl FnMut(i64) -> bool,
) {
    for _ in 0..5 {
        let window = fresh_window(redis, window_ms, after, at_least_ms);
        if attempt(window) {
            return;
        }
        after = window_now(redis, window_ms).0;
        println!("a run crossed its window's end: run again");
    }
    panic!("five runs each crossed a window's end");
}

#[test]
fn units_go_back_before_their_window_ends_and_never_serve_the_next() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        // hold_ms far longer than the window: only its end gives the units back.
        let rules = format!(
            "{}{}",
            quota(1000, 30000, 50),
            rule("api", "/**", "global", "1000/2s", "fixed")
        );
        let (redis, _upstream, gateway) = stack(flavor, &rules);
        let (key, words) = (global("api"), spec("1000/2s", "fixed"));
        in_one_window(&redis, (2000, 1500), i64::MIN, |window| {
            all_allowed(&gateway, "/x", 40, &what);
            if window_now(&redis, 2000).0 != window {
                return false;
            }
            let counted = settled_count(&redis, &key, &words);
            assert!(counted > 40, "{what}: the gateway holds units: {counted}");
            assert_eq!(
                counts_to_the_end(&redis, &key, &words, 40),
                40,
                "{what}: the count at the window's end is the requests admitted"
            );
            true
        });
        wait_until(Duration::from_secs(5), "the next window", || {
            units_counted(&redis, &key, &words) == 0
        });
        // The next request is counted in its own window, not paid with the old units.
        let calls = decision_calls(&redis);
        let resp = gateway.get("/x");
        assert_eq!(resp.status, 200, "{what}: {resp:?}");
        assert!(decision_calls(&redis) > calls, "{what}: it asked Redis");
        assert!(
            units_counted(&redis, &key, &words) >= 1,
            "{what}: counted in the new window"
        );
    });
}

/// Reads `key`'s count as fast as Redis answers until it is `admitted` or 0 (its window
/// ended, the key with it): the last count seen in the window.
fn counts_to_the_end(redis: &Server, key: &str, words: &str, admitted: i64) -> i64 {
    let mut con = redis.conn();
    let mut last = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        match units_counted_on(&mut con, key, words) {
            0 => break,
            counted if counted == admitted => return counted,
            counted => last = Some(counted),
        }
    }
    last.unwrap_or(0)
}

const KILLED_RULES: [(&str, &str, &str); 2] =
    [("fixed", "30/4s", "fixed"), ("bucket", "20/4s", "gcra")];

#[test]
fn a_killed_gateways_units_come_back_with_the_next_window_or_the_refilled_bucket() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let mut rules = quota(1000, 30000, 50);
        for (name, limit, algorithm) in KILLED_RULES {
            rules.push_str(&rule(name, &format!("/{name}"), "global", limit, algorithm));
        }
        let mut doomed = Gateway::in_front_of(&upstream, &redis, &rules);
        let survivor = Gateway::in_front_of(&upstream, &redis, &rules);
        let window = fresh_window(&redis, 4000, i64::MIN, 3000);
        allowed_in_a_row(&doomed, "/fixed", 10, 30, 30, &what);
        let counted = settled_count(&redis, &global("fixed"), &spec("30/4s", "fixed"));
        assert!(counted > 10, "{what}: units held: {counted}");
        all_allowed(&doomed, "/bucket", 10, &what);
        doomed.signal("KILL");
        wait_until(Duration::from_secs(10), "the gateway gone", || {
            !doomed.running()
        });
        // The bucket refills by itself, within its window.
        let bucket = (global("bucket"), spec("20/4s", "gcra"));
        wait_until(Duration::from_secs(10), "the bucket refilled", || {
            units_counted(&redis, &bucket.0, &bucket.1) == 0
        });
        all_allowed(&survivor, "/bucket", 20, &what);
        // The window the lost units were counted in ends and takes them with it.
        in_one_window(&redis, (4000, 3000), window, |next| {
            let statuses: Vec<u16> = (0..35).map(|_| survivor.get("/fixed").status).collect();
            if window_now(&redis, 4000).0 != next {
                return false;
            }
            let expected: Vec<u16> = [[200; 30].as_slice(), &[429; 5]].concat();
            assert_eq!(
                statuses, expected,
                "{what}: the whole limit in the next window"
            );
            true
        });
    });
}

#[test]
fn a_gateway_stopped_by_sigterm_gives_its_units_back_before_it_exits() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let rules = format!(
            "{}{}",
            quota(1000, 60000, 50),
            rule("api", "/**", "global", "1000/1d", "fixed")
        );
        let (redis, _upstream, mut gateway) = stack(flavor, &rules);
        let (key, words) = (global("api"), spec("1000/1d", "fixed"));
        allowed_in_a_row(&gateway, "/x", 30, 1000, 1000, &what);
        let counted = settled_count(&redis, &key, &words);
        assert!(counted > 30, "{what}: the gateway holds units: {counted}");
        let status = gateway.terminate();
        assert!(status.success(), "{what}: {status:?}");
        assert_eq!(units_counted(&redis, &key, &words), 30, "{what}: all back");
    });
}

#[test]
fn a_reload_gives_every_held_unit_back_and_the_new_rule_applies() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let rules = |limit: &str| {
            format!(
                "{}{}{}",
                redis_section(redis.port(), ""),
                quota(1000, 60000, 50),
                rule("api", "/**", "global", limit, "fixed")
            )
        };
        let gateway = Gateway::start(
            &format!("{}reload_interval_ms = 0\n", upstream.server_line()),
            &rules("1000/1d"),
        );
        let (key, words) = (global("api"), spec("500/1d", "fixed"));
        allowed_in_a_row(&gateway, "/x", 30, 1000, 1000, &what);
        assert!(
            settled_count(&redis, &key, &words) > 30,
            "{what}: the gateway holds units"
        );
        let refunds = refund_calls(&redis);
        gateway.rewrite(&rules("500/1d"));
        gateway.signal("HUP");
        wait_until(GIVE_BACK, "the reload", || {
            gateway.metrics().reloads("ok") >= 1.0
        });
        // hold_ms is a minute: only the reload gives them back.
        wait_until(GIVE_BACK, "the units given back on reload", || {
            units_counted(&redis, &key, &words) == 30
        });
        assert!(refund_calls(&redis) > refunds, "{what}: by RL.REFUND");
        let resp = gateway.get("/x");
        assert_eq!(resp.status, 200, "{what}: {resp:?}");
        assert_eq!(resp.policy()[0].q, 500, "{what}: the new limit");
        assert_eq!(resp.remaining(), 500 - 31, "{what}");
    });
}

#[test]
fn held_units_are_spent_while_redis_is_frozen_then_on_redis_failure_decides() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let rules = format!(
            "{}{}on_redis_failure = \"closed\"\n",
            quota(1000, 60000, 50),
            rule("api", "/**", "global", "1000/1d", "fixed")
        );
        let (redis, upstream, gateway) = stack(flavor, &rules);
        let (key, words) = (global("api"), spec("1000/1d", "fixed"));
        allowed_in_a_row(&gateway, "/x", 60, 1000, 1000, &what);
        // Once a refill asked for has landed, what Redis counts beyond the 60 is held.
        let counted = settled_count(&redis, &key, &words);
        let held = usize::try_from(counted - 60).expect("Redis counts the 60");
        assert!(held >= 2, "{what}: the gateway holds units: {held}");

        let frozen = Stopped::new(redis.pid());
        // Each held unit admits a request without Redis, the refills asked on the way
        // hanging; then the rule fails closed.
        let statuses: Vec<u16> = (0..=held).map(|_| gateway.get("/x").status).collect();
        frozen.resume();
        let mut expected = vec![200; held];
        expected.push(503);
        assert_eq!(statuses, expected, "{what}: {held} units held");
        assert_eq!(upstream.requests(), 60 + held as u64, "{what}");
    });
}

#[test]
fn a_request_charged_while_its_refill_is_out_is_counted_in_the_next_answers() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        // A deadline far beyond the stall below, so that both calls held up by it are
        // answered.
        let gateway = Gateway::start(
            &upstream.server_line(),
            &format!(
                "{}{}{}",
                redis_section_with(redis.port(), "deadline_ms = 10000"),
                quota(1000, 60000, 50),
                rule("api", "/**", "global", "1000/1d", "fixed")
            ),
        );
        let (key, words) = (global("api"), spec("1000/1d", "fixed"));
        allowed_in_a_row(&gateway, "/x", 60, 1000, 1000, &what);
        let held = settled_count(&redis, &key, &words) - 60;
        assert!(held >= 2, "{what}: the gateway holds units: {held}");

        // Redis stalls while the held units are spent: the refill asked half-way waits,
        // and the request that finds none left is charged by RL.HIT behind it.
        let (hits, takes) = (hit_calls(&redis), take_calls(&redis));
        let frozen = Stopped::new(redis.pid());
        allowed_in_a_row(&gateway, "/x", held, 1000 - 60, 0, &what);
        let stall = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            frozen.resume();
        });
        let charged = gateway.get("/x");
        stall.join().expect("the stall");
        assert_eq!(charged.status, 200, "{what}: {charged:?}");
        assert_eq!(charged.fail_open_reason(), None, "{what}: Redis decided");
        assert_eq!(
            (hit_calls(&redis) - hits, take_calls(&redis) - takes),
            (1, 1),
            "{what}: the refill, then the request's own hit"
        );
        // Once the refill's answer is in (a moment after the hit's, on the same
        // connection), the next requests are decided from its units, and what they show
        // counts that hit too: never more than is left.
        std::thread::sleep(Duration::from_millis(200));
        let calls = decision_calls(&redis);
        let admitted = 60 + held + 1;
        let shown: Vec<i64> = (0..3).map(|_| gateway.get("/x").remaining()).collect();
        let left: Vec<i64> = (1..=3).map(|i| 1000 - admitted - i).collect();
        assert_eq!(shown, left, "{what}: what the next answers show left");
        assert_eq!(decision_calls(&redis), calls, "{what}: decided in memory");
    });
}

/// Two rules on the API, stacked: a user's budget with local quota, then `second`.
fn stacked(second: &str) -> String {
    format!(
        "{}{}stack = true\n[[rule]]\nname = \"second\"\npath = \"/api/**\"\n{second}",
        quota(1000, 5000, 1),
        rule("user", "/api/**", "header:X-User", "100000/1d", "fixed"),
    )
}

#[test]
fn stacked_rules_use_local_units_only_when_every_limited_one_has_local_quota() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        // A limited rule without local quota: every request is decided by Redis, exactly.
        let cap = "key = \"global\"\nlimits = [\"100000/1d\"]\nalgorithm = \"fixed\"\n";
        let (redis, _upstream, gateway) = stack(flavor, &stacked(cap));
        for left in (100000 - 100..100000).rev() {
            let resp = gateway.send("GET", "/api/x", &[("X-User", "u1")]);
            assert_eq!(resp.status, 200, "{what}: {resp:?}");
            let shown: Vec<i64> = resp.limits().iter().map(|t| t.r).collect();
            assert_eq!(shown, [left, left], "{what}: {resp:?}");
        }
        assert_eq!(redis.command_calls("RL.MHIT"), Some(100), "{what}");
        assert_eq!(take_calls(&redis), 0, "{what}");
        drop((redis, gateway));

        // A rule that limits nothing: the user's rule is the only one to hold units for.
        let (redis, _upstream, gateway) = stack(flavor, &stacked("limits = []\n"));
        allowed_as_user(&gateway, 100, &what);
        let calls = decision_calls(&redis);
        assert!(calls < 50, "{what}: {calls} calls for 100 requests");
    });
}

/// `n` requests of user `u1` in a row on the API, each allowed with what is left of the
/// whole day's budget (less what the gateway holds, see [`allowed_in_a_row`]).
fn allowed_as_user(gateway: &Gateway, n: i64, what: &str) {
    for i in 1..=n {
        let resp = gateway.send("GET", "/api/x", &[("X-User", "u1")]);
        assert_eq!(resp.status, 200, "{what}: {resp:?}");
        assert_left(resp.remaining(), 100000 - i, what);
    }
}

/// Envoy's descriptors of the hot key test: one user's daily budget.
const DESCRIPTORS: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 100000
"#;

/// `[redis]` on `redis` and `[local_quota]` with batches of at most 1 % of a limit.
fn sections(redis: &Server) -> String {
    format!(
        "{}{}",
        redis_section(redis.port(), ""),
        quota(1000, 5000, 1)
    )
}

/// Asserts that an answer shows `shown` of the `left` a budget had after it: never more,
/// and less only by what the gateway holds (see [`allowed_in_a_row`]).
fn assert_left(shown: i64, left: i64, what: &str) {
    let held = 2000;
    assert!(
        (left - held..=left + OVERSTATED).contains(&shown),
        "{what}: {shown} of {left}"
    );
}

#[test]
fn check_mode_decides_from_batches() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let redis = ServerConfig::new(flavor).start();
        let rules = rule("api", "/**", "global", "100000/1d", "fixed");
        let check = Gateway::start("mode = \"check\"\n", &(sections(&redis) + &rules));
        for left in (100000 - 200..100000).rev() {
            let resp = check.get("/x");
            assert_eq!((resp.status, resp.body.as_str()), (200, ""), "{what}");
            assert_left(resp.remaining(), left, &what);
        }
        let calls = decision_calls(&redis);
        assert!(calls < 100, "{what}: {calls} calls for 200 requests");
    });
}

#[test]
fn envoy_descriptors_take_batches_with_local_quota_on() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let redis = ServerConfig::new(flavor).start();
        let files = [("api.yaml", DESCRIPTORS)];
        let mut envoy = EnvoyGateway::start_with(&sections(&redis), "local_quota = true\n", &files);
        for left in (100000 - 200..100000).rev() {
            let answer = envoy.ask(request("api", vec![desc(&[("user", "u1")])]));
            assert_eq!(overall(&answer), Code::Ok, "{what}");
            assert_left(i64::from(remaining(&answer, 0)), left, &what);
        }
        let calls = decision_calls(&redis);
        assert!(calls < 100, "{what}: {calls} calls for 200 requests");
    });
}

#[test]
fn the_functions_library_grants_and_takes_back_the_batches() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let redis = ServerConfig::managed(flavor).start();
        redis.load_functions();
        let rules = format!(
            "{}{}{}",
            quota(1000, 1000, 50),
            rule("hot", "/hot", "global", "1000/1d", "fixed"),
            rule("exact", "/exact", "global", "30/1d", "fixed"),
        );
        let (redis, upstream, gateway) = stack_on(redis, &rules);
        wait_until(Duration::from_secs(20), "/readyz 200", || {
            gateway.admin_get("/readyz").status == 200
        });
        let before = redis.command_calls("FCALL").unwrap_or(0);
        allowed_in_a_row(&gateway, "/hot", 200, 1000, 1000, &what);
        let calls = redis.command_calls("FCALL").unwrap_or(0) - before;
        assert!(calls < 100, "{what}: {calls} FCALL for 200 requests");
        // The library's own look at the key: what was held comes back through it too.
        let counted = || {
            let look = fcall_reply(
                &mut redis.conn(),
                "rl_peek",
                &global("hot"),
                &["1000", "1d"],
            );
            look.limit - look.remaining - i64::from(look.allowed)
        };
        // Units held (a refill on its way lands first).
        wait_until(GIVE_BACK, "units held", || counted() > 200);
        wait_until(GIVE_BACK, "the held units given back", || counted() == 200);

        let statuses: Vec<u16> = (0..40).map(|_| gateway.get("/exact").status).collect();
        let expected: Vec<u16> = [[200; 30].as_slice(), &[429; 10]].concat();
        assert_eq!(statuses, expected, "{what}");
        assert_eq!(upstream.requests(), 230, "{what}");
    });
}

/// A `[[rule]]` with local quota and `lines`, which local quota cannot keep.
const REFUSED: [(&str, &str); 5] = [
    ("concurrency", "limits = [\"5/1h\"]\nconcurrency = 2\n"),
    (
        "count statuses",
        "limits = [\"5/1h\"]\ncount = [401, 403]\n",
    ),
    ("shadow", "limits = [\"5/1h\"]\nmode = \"shadow\"\n"),
    ("policy", "policy = \"gw-api\"\n"),
    ("no limits", "limits = []\n"),
];

#[test]
fn a_rule_local_quota_cannot_keep_is_refused_at_load_naming_local_quota() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.toml");
    let write = |lines: &str| {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\n\
             upstream = \"http://127.0.0.1:{}\"\n{}[[rule]]\nname = \"api\"\npath = \"/**\"\n\
             local_quota = true\n{lines}",
            free_port(),
            free_port(),
            free_port(),
            redis_section(free_port(), ""),
        );
        std::fs::write(&path, text).expect("write the rules");
    };
    write("limits = [\"5/1h\"]\n");
    let output = check_config(&path);
    assert!(
        output.status.success(),
        "the rule alone is fine: {output:?}"
    );
    for (case, lines) in REFUSED {
        write(lines);
        for (how, output) in [
            ("--check-config", check_config(&path)),
            ("--config", refused_start(&path)),
        ] {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{case} {how}: accepted: {stderr}");
            assert!(stderr.contains("local_quota"), "{case} {how}: {stderr}");
        }
    }
    // Envoy's descriptors: not with the modes that charge them apart.
    let files = [("api.yaml", DESCRIPTORS)];
    let output = check_descriptors(&files, "local_quota = true\n");
    assert!(output.status.success(), "{output:?}");
    for mode in ["shadow_mode", "quota_mode"] {
        let output = check_descriptors(&files, &format!("local_quota = true\n{mode} = true\n"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{mode}: accepted: {stderr}");
        assert!(stderr.contains("local_quota"), "{mode}: {stderr}");
    }
}
