//! Every algorithm (fixed, sliding, log, token, gcra) against real Redis and Valkey servers:
//! filling up, denial and a retry that really works, costs above the capacity, effects
//! replication of hits, denials, refunds and resets, persistence, bursts, the sliding
//! log's exactness and cap, multi-tier all-or-nothing checks with their RESP2 and RESP3
//! shapes, and what happens when a key's parameters change.

use testkit::shapes::{seed_every_shape, Rule};
use testkit::*;

use redis::{Connection, Value};
use std::time::Duration;

fn rl_hit(con: &mut Connection, key: &[u8], spec: &str) -> Reply {
    rl(con, "RL.HIT", key, spec)
}

/// A RESP3 answer: the binding decision and, for several tiers, one per tier.
#[derive(Debug)]
struct Answer {
    binding: Reply,
    tiers: Vec<Reply>,
}

/// Decodes a RESP3 map of the five fields, in order, followed by `tiers` if `nested`
/// allows it; returns the decision and the `tiers` value if present.
fn decode_map(value: &Value, nested: bool) -> (Reply, Option<&Value>) {
    let Value::Map(pairs) = value else {
        panic!("RESP3 reply is not a map: {value:?}");
    };
    assert!(
        pairs.len() == 5 || (nested && pairs.len() == 6),
        "{value:?}"
    );
    let mut integers = Vec::new();
    for ((name, field), expected) in pairs.iter().zip(FIELDS) {
        assert_eq!(
            name,
            &Value::SimpleString(expected.to_string()),
            "{value:?}"
        );
        let Value::Int(n) = field else {
            panic!("{expected} is not an integer in {value:?}");
        };
        integers.push(*n);
    }
    let tiers = pairs.get(5).map(|(name, tiers)| {
        assert_eq!(name, &Value::SimpleString("tiers".into()), "{value:?}");
        tiers
    });
    (decode_reply(&integers), tiers)
}

/// Runs `command key <spec>` on a RESP3 connection and decodes the map.
fn rl3(con: &mut Connection, command: &str, key: &[u8], spec: &str) -> Answer {
    let args: Vec<&str> = spec.split_whitespace().collect();
    let value: Value = redis::cmd(command)
        .arg(key)
        .arg(&args)
        .query(con)
        .unwrap_or_else(|e| panic!("{command} {key:?} {spec}: {e}"));
    let (binding, tiers) = decode_map(&value, true);
    let tiers = match tiers {
        None => Vec::new(),
        Some(Value::Array(maps)) => maps.iter().map(|m| decode_map(m, false).0).collect(),
        Some(other) => panic!("tiers is not an array: {other:?}"),
    };
    Answer { binding, tiers }
}

/// Fills a key with hits of `cost` until one is denied, waits its `retry_after_ms`, and
/// checks that the same hit is then allowed: the wait announced is enough. Whatever
/// windows pass meanwhile, a few hundred back-to-back hits fill 3 units per 400 ms.
fn fill_wait_and_retry(server: &Server, flavor: Flavor, algo: &str) {
    const WINDOW_MS: i64 = 400;
    let mut con = server.conn();
    // The sliding counter may make a client wait into the next window, while the
    // current window's units still weigh; every other algorithm frees room within one.
    let longest_wait = if algo == "sliding" {
        2 * WINDOW_MS
    } else {
        WINDOW_MS
    };
    for cost in [1_i64, 2] {
        let name = key(algo, cost as usize);
        let spec = format!("3 {WINDOW_MS}ms ALGO {algo} COST {cost}");
        let context = format!("{flavor:?} {spec}");
        let denied = (0..300)
            .map(|_| rl_hit(&mut con, &name, &spec))
            .find(|r| !r.allowed)
            .unwrap_or_else(|| panic!("{context}: never denied"));
        assert_eq!(denied.limit, 3, "{context}: {denied:?}");
        assert!(denied.remaining < cost, "{context}: {denied:?}");
        assert!(
            denied.retry_after_ms > 0 && denied.retry_after_ms <= longest_wait,
            "{context}: {denied:?}"
        );
        std::thread::sleep(Duration::from_millis(denied.retry_after_ms as u64));
        let again = rl_hit(&mut con, &name, &spec);
        assert!(again.allowed, "{context}: {denied:?} then {again:?}");

        // More than the capacity can never fit, however long one waits.
        let too_much = format!("3 {WINDOW_MS}ms ALGO {algo} COST 4");
        let never = rl_hit(&mut con, &name, &too_much);
        assert_eq!(
            (never.allowed, never.limit, never.retry_after_ms),
            (false, 3, -1),
            "{context}: {never:?}"
        );
    }
    // On a key with no state, the same refusal counts nothing and creates nothing.
    let fresh = key(algo, 99);
    let never = rl_hit(&mut con, &fresh, &format!("3 1s ALGO {algo} COST 4"));
    let values = [
        i64::from(never.allowed),
        never.limit,
        never.remaining,
        never.reset_after_ms,
        never.retry_after_ms,
    ];
    assert_eq!(values, [0, 3, 3, 0, -1], "{flavor:?} {algo}");
    assert_eq!(pexpiretime(&mut con, &fresh), -2, "{flavor:?} {algo}");
}

#[test]
fn every_algorithm_denies_when_full_and_allows_again_after_retry_after_ms() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        // The algorithms are independent keys: run them side by side to share the waits.
        std::thread::scope(|scope| {
            for algo in ALGORITHMS {
                let server = &server;
                scope.spawn(move || fill_wait_and_retry(server, flavor, algo));
            }
        });
    });
}

/// What one call on a key did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Hit(i64),
    Refund(i64),
    Reset,
}

/// A deterministic mix of operations for key `n`: mostly hits (some above the limit),
/// refunds and a few resets, so that every kind of write and non-write happens.
fn operations(n: usize, limit: i64) -> Vec<Op> {
    let mut seed = 0x9e37_79b9_u64.wrapping_mul(n as u64 + 1);
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    (0..8 + n % 5)
        .map(|_| match next() % 20 {
            0..=9 => Op::Hit(1 + (next() % 2) as i64),
            10 => Op::Hit(limit + 1),
            11..=16 => Op::Refund(1 + (next() % 2) as i64),
            17 => Op::Hit(limit),
            _ => Op::Reset,
        })
        .collect()
}

/// The last call on a key, with the server clock read just before and after it.
#[derive(Debug)]
struct Last {
    op: Op,
    reply: Option<Reply>,
    before: i64,
    after: i64,
    /// A sliding-log refund left the newest entry as a marker with no units since the
    /// last write by a hit (see `expiry_follows_the_last_reply`).
    log_marker: bool,
}

/// The spec for key `n` of `algo`: single tiers, two tiers, and for the bucket
/// algorithms a burst apart from the limit.
fn mixed_spec(algo: &str, n: usize, window_ms: i64) -> (String, i64) {
    let limit = 2 + (n % 3) as i64;
    let spec = match n % 4 {
        1 => format!(
            "{limit} {window_ms}ms {} {}ms ALGO {algo}",
            limit * 4,
            24 * window_ms
        ),
        2 if algo == "token" || algo == "gcra" => {
            format!("{limit} {window_ms}ms ALGO {algo} BURST {}", limit + 2)
        }
        2 => format!("{limit} {}ms ALGO {algo}", 2 * window_ms),
        _ => format!("{limit} {window_ms}ms ALGO {algo}"),
    };
    (spec, limit)
}

/// Checks that the key expires when its state becomes the same as no state: at the
/// moment the last reply's `reset_after_ms` points to, or is gone when that is 0.
fn expiry_follows_the_last_reply(context: &str, last: &Last, expiry: i64, longest_ms: i64) {
    let reset = match (last.op, last.reply) {
        (Op::Reset, _) | (_, None) => 0,
        (_, Some(reply)) => reply.reset_after_ms,
    };
    if reset == 0 {
        assert_eq!(expiry, -2, "{context}: nothing counted, so no key");
        return;
    }
    let earliest = last.before + reset;
    // A sliding-log refund that empties the newest entry keeps it as a marker of the
    // latest time a hit was logged at (documented in sliding_log.rs), and the key lives
    // until a window after it, even though the units it counted left earlier; the reply
    // reports when the whole limit is free again. So the key may outlive the reply's
    // reset then, by less than a window, never expire before it.
    let latest = if last.log_marker {
        last.after + longest_ms
    } else {
        last.after + reset
    };
    assert!(
        (earliest..=latest).contains(&expiry),
        "{context}: expiry {expiry} not in [{earliest}, {latest}] ({last:?})"
    );
}

#[test]
fn replicas_hold_the_primarys_bytes_and_expiries_for_every_algorithm() {
    const KEYS: usize = 12;
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        let mut con = primary.conn();
        let window_ms = window_clear_of_edges(&mut con);
        let mut lasts = Vec::new();
        for algo in ALGORITHMS {
            let (mut denials, mut refunds, mut resets) = (0, 0, 0);
            for n in 0..KEYS {
                let name = key(algo, n);
                let (spec, limit) = mixed_spec(algo, n, window_ms);
                let mut last = None;
                let mut log_marker = false;
                for op in operations(n, limit) {
                    let before = server_ms(&mut con);
                    let reply = match op {
                        Op::Hit(cost) => {
                            let r = rl_hit(&mut con, &name, &format!("{spec} COST {cost}"));
                            denials += i64::from(!r.allowed);
                            log_marker &= !r.allowed;
                            Some(r)
                        }
                        Op::Refund(cost) => {
                            let spec = format!("{spec} COST {cost}");
                            let r = rl(&mut con, "RL.REFUND", &name, &spec);
                            refunds += i64::from(r.allowed);
                            log_marker |= algo == "log" && r.allowed && r.reset_after_ms > 0;
                            Some(r)
                        }
                        Op::Reset => {
                            let deleted: i64 = redis::cmd("RL.RESET")
                                .arg(&name)
                                .query(&mut con)
                                .expect("RL.RESET");
                            resets += deleted;
                            log_marker = false;
                            None
                        }
                    };
                    let after = server_ms(&mut con);
                    last = Some(Last {
                        op,
                        reply,
                        before,
                        after,
                        log_marker,
                    });
                }
                lasts.push((algo, name, last.expect("at least one call")));
            }
            // The mix did exercise every kind of call.
            assert!(
                denials > 0 && refunds > 0 && resets > 0,
                "{flavor:?} {algo}: {denials} denials, {refunds} refunds, {resets} resets"
            );
        }
        wait_for_replicas(&mut con, 1);
        let mut on_replica = replica.conn();
        for (algo, name, last) in &lasts {
            let context = format!("{flavor:?} {algo} key {name:?}");
            let value = get_bytes(&mut con, name);
            let expiry = pexpiretime(&mut con, name);
            assert_eq!(get_bytes(&mut on_replica, name), value, "{context}");
            assert_eq!(pexpiretime(&mut on_replica, name), expiry, "{context}");
            assert_eq!(value.is_none(), expiry == -2, "{context}");
            expiry_follows_the_last_reply(&context, last, expiry, 24 * window_ms);
        }
        // The replica only ever applied the SETs and DELs: no RL command ran there.
        for command in ["RL.HIT", "RL.REFUND", "RL.RESET"] {
            assert_eq!(replica.command_calls(command), None, "{flavor:?}");
            assert!(primary.command_calls(command).is_some(), "{flavor:?}");
        }
    });
}

/// Counts 3 units on every key, has `reload` bring the data back, and checks that the
/// bytes and absolute expiries are as they were and that one more unit counts on from
/// the stored state: one less remaining than after the 3.
fn assert_state_survives(
    flavor: Flavor,
    config: ServerConfig,
    reload: impl FnOnce(Server) -> Server,
) {
    let server = config.start();
    let mut con = server.conn();
    let window_ms = window_clear_of_edges(&mut con);
    // Per algorithm: one tier, two tiers and, for the bucket algorithms, a burst apart from
    // the limit.
    let rule = Rule {
        limit: 10,
        window_ms,
        outer_limit: 50,
        outer_window_ms: 24 * window_ms,
        burst: Some(15),
    };
    let keys = seed_every_shape(&mut con, "persisted", &rule, &[3]);
    for k in &keys {
        assert_eq!(
            (k.last.allowed, k.last.remaining),
            (true, k.capacity - 3),
            "{}",
            k.spec
        );
    }
    let snapshot = |con: &mut Connection| -> Vec<(Option<Vec<u8>>, i64)> {
        keys.iter()
            .map(|k| (get_bytes(con, &k.key), pexpiretime(con, &k.key)))
            .collect()
    };
    let before = snapshot(&mut con);
    assert!(before.iter().all(|(v, e)| v.is_some() && *e > 0));
    drop(con);
    let server = reload(server);
    let mut con = server.conn();
    assert_eq!(snapshot(&mut con), before, "{flavor:?}");
    for k in &keys {
        let r = rl_hit(&mut con, &k.key, &k.spec);
        let context = format!("{flavor:?} {}: {r:?}", k.spec);
        assert!(r.allowed, "{context}");
        assert_eq!(r.remaining, k.capacity - 4, "{context}");
    }
}

#[test]
fn debug_reload_keeps_every_algorithms_state() {
    each_flavor(|flavor| {
        assert_state_survives(flavor, ServerConfig::new(flavor), Server::debug_reload);
    });
}

#[test]
fn an_aof_restart_keeps_every_algorithms_state() {
    each_flavor(|flavor| {
        let config = ServerConfig::new(flavor).arg("appendonly", "yes");
        assert_state_survives(flavor, config, Server::restart_on_the_aof);
    });
}

#[test]
fn token_and_gcra_take_their_burst_at_once_and_report_it_as_the_limit() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        // 10 per 10 minutes: one unit every minute, far longer than the test.
        let interval_ms = 60_000;
        for algo in ["token", "gcra"] {
            for burst in [25, 3] {
                let name = key(algo, burst as usize);
                let spec = format!("10 10m ALGO {algo} BURST {burst}");
                let context = format!("{flavor:?} {spec}");
                for n in 1..=burst {
                    let r = rl_hit(&mut con, &name, &spec);
                    assert!(r.allowed, "{context}: hit {n} {r:?}");
                    assert_eq!((r.limit, r.remaining), (burst, burst - n), "{context}");
                }
                let denied = rl_hit(&mut con, &name, &spec);
                assert!(!denied.allowed, "{context}: {denied:?}");
                assert_eq!((denied.limit, denied.remaining), (burst, 0), "{context}");
                // The next unit is one emission interval away.
                assert!(
                    denied.retry_after_ms > 0 && denied.retry_after_ms <= interval_ms,
                    "{context}: {denied:?}"
                );
                // The burst is the capacity: up to it fits at once, beyond it never.
                let fresh = key(algo, 100 + burst as usize);
                let over = rl_hit(&mut con, &fresh, &format!("{spec} COST {}", burst + 1));
                assert_eq!(
                    (over.allowed, over.retry_after_ms),
                    (false, -1),
                    "{context}"
                );
                let all = rl_hit(&mut con, &fresh, &format!("{spec} COST {burst}"));
                assert_eq!((all.allowed, all.limit, all.remaining), (true, burst, 0));
            }
        }
    });
}

#[test]
fn the_sliding_log_caps_its_limit() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let error = error_text(
            &mut con,
            redis::cmd("RL.HIT")
                .arg("capped")
                .arg(&["10001", "1s", "ALGO", "log"]),
        );
        assert_eq!(
            error, "ERR ALGO log allows a limit of at most 10000",
            "{flavor:?}"
        );
        assert_eq!(pexpiretime(&mut con, "capped"), -2, "{flavor:?}");
        let at_cap = rl_hit(&mut con, b"capped", "10000 1s ALGO log");
        assert_eq!(
            (at_cap.allowed, at_cap.remaining),
            (true, 9_999),
            "{flavor:?}"
        );
    });
}

#[test]
fn the_sliding_log_frees_room_exactly_when_the_oldest_hit_leaves() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let name = b"log:exact";
        let spec = "5 1s ALGO log";
        // One hit, then after 300 ms four more: the limit is reached by two groups.
        let first_from = server_ms(&mut con);
        let first = rl_hit(&mut con, name, spec);
        let first_to = server_ms(&mut con);
        assert_eq!((first.allowed, first.remaining), (true, 4), "{flavor:?}");
        std::thread::sleep(Duration::from_millis(300));
        let rest_from = server_ms(&mut con);
        for remaining in (0..4).rev() {
            let r = rl_hit(&mut con, name, spec);
            assert_eq!((r.allowed, r.remaining), (true, remaining), "{flavor:?}");
        }
        let sixth_from = server_ms(&mut con);
        let sixth = rl_hit(&mut con, name, spec);
        let sixth_to = server_ms(&mut con);
        assert!(!sixth.allowed, "{flavor:?}: {sixth:?}");
        // The wait ends when the first hit, logged in [first_from, first_to], is a full
        // window old: the moment the reply points to lies in [sixth_from, sixth_to] +
        // retry_after_ms, and the two intervals must meet.
        let retry = sixth.retry_after_ms;
        assert!(
            sixth_from + retry <= first_to + 1_000 && sixth_to + retry >= first_from + 1_000,
            "{flavor:?}: first hit in [{first_from}, {first_to}], denial in [{sixth_from}, \
             {sixth_to}] with retry {retry}"
        );
        // And not when the four later ones leave: then only one unit is free.
        std::thread::sleep(Duration::from_millis(retry as u64));
        let again = rl_hit(&mut con, name, spec);
        let next = rl_hit(&mut con, name, spec);
        let next_to = server_ms(&mut con);
        assert!(again.allowed, "{flavor:?}: {again:?}");
        if next_to < rest_from + 1_000 {
            // The four later hits are all still in the window (unless this machine
            // stalled for the 300 ms between the groups): exactly one unit came back.
            assert_eq!(again.remaining, 0, "{flavor:?}: {again:?}");
            assert!(!next.allowed, "{flavor:?}: {next:?}");
        }
    });
}

/// Asserts that the binding decision combines the tiers as documented: `remaining` the
/// smallest, `reset_after_ms` the longest; allowed when all allow; the binding tier's
/// `limit` and `retry_after_ms` (the smallest remaining when allowed, the longest wait
/// among the denying tiers when denied).
fn assert_binding(context: &str, answer: &Answer) {
    let (b, tiers) = (answer.binding, &answer.tiers);
    let min_remaining = tiers.iter().map(|t| t.remaining).min().expect("tiers");
    let max_reset = tiers.iter().map(|t| t.reset_after_ms).max().expect("tiers");
    assert_eq!(b.remaining, min_remaining, "{context}: {answer:?}");
    assert_eq!(b.reset_after_ms, max_reset, "{context}: {answer:?}");
    assert_eq!(
        b.allowed,
        tiers.iter().all(|t| t.allowed),
        "{context}: {answer:?}"
    );
    if b.allowed {
        assert_eq!(b.retry_after_ms, 0, "{context}: {answer:?}");
        let binding = tiers.iter().find(|t| t.remaining == min_remaining);
        assert_eq!(Some(b.limit), binding.map(|t| t.limit), "{context}");
    } else {
        // -1 (never) is the longest wait of all.
        let wait = |ms: i64| if ms == -1 { i64::MAX } else { ms };
        let longest = tiers
            .iter()
            .filter(|t| !t.allowed)
            .map(|t| t.retry_after_ms)
            .max_by_key(|ms| wait(*ms))
            .expect("a denying tier");
        assert_eq!(b.retry_after_ms, longest, "{context}: {answer:?}");
        assert!(
            tiers
                .iter()
                .any(|t| !t.allowed && t.limit == b.limit && t.retry_after_ms == longest),
            "{context}: the limit is the binding tier's: {answer:?}"
        );
    }
}

/// One multi-tier scenario: the tiers, the costs hit in order, and for each hit whether
/// it is allowed and the binding tier's limit.
struct TierScenario {
    name: &'static str,
    /// (limit, window as a multiple of the clear window).
    tiers: [(i64, i64); 2],
    hits: &'static [(i64, bool, i64)],
}

const TIER_SCENARIOS: [TierScenario; 3] = [
    TierScenario {
        name: "the first tier denies",
        tiers: [(3, 1), (100, 24)],
        hits: &[
            (1, true, 3),
            (1, true, 3),
            (1, true, 3),
            (1, false, 3),
            (2, false, 3),
        ],
    },
    TierScenario {
        name: "the second tier denies",
        tiers: [(100, 1), (3, 24)],
        hits: &[(2, true, 3), (1, true, 3), (1, false, 3), (5, false, 3)],
    },
    TierScenario {
        name: "both deny, the longest wait binds",
        tiers: [(2, 1), (3, 24)],
        hits: &[(2, true, 2), (2, false, 3)],
    },
];

#[test]
fn tiers_count_all_or_nothing_and_reply_the_binding_tier() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con2 = server.conn();
        let mut con3 = server.conn_resp3();
        let w = window_clear_of_edges(&mut con2);
        for algo in ALGORITHMS {
            for (s, scenario) in TIER_SCENARIOS.iter().enumerate() {
                let [(l1, w1), (l2, w2)] = scenario.tiers;
                let tiers = format!("{l1} {}ms {l2} {}ms ALGO {algo}", w1 * w, w2 * w);
                let (key2, key3) = (key(algo, 2 * s), key(algo, 2 * s + 1));
                let mut used = [0, 0];
                // The twin keys' states were made a few ms apart: their times may differ
                // by up to the time since the scenario began.
                let start = server_ms(&mut con2);
                for &(cost, allowed, binding_limit) in scenario.hits {
                    let spec = format!("{tiers} COST {cost}");
                    let context = format!("{flavor:?} {} ({spec})", scenario.name);
                    let peek_before = rl3(&mut con3, "RL.PEEK", &key3, &spec);
                    let stored_before = get_bytes(&mut con3, &key3);
                    let resp3 = rl3(&mut con3, "RL.HIT", &key3, &spec);
                    let resp2 = rl_hit(&mut con2, &key2, &spec);
                    let slack = server_ms(&mut con2) - start + 1;
                    let peek_after = rl3(&mut con3, "RL.PEEK", &key3, &spec);

                    assert_eq!(resp3.tiers.len(), 2, "{context}: {resp3:?}");
                    assert_binding(&context, &resp3);
                    assert_eq!(resp3.binding.allowed, allowed, "{context}: {resp3:?}");
                    assert_eq!(resp3.binding.limit, binding_limit, "{context}: {resp3:?}");
                    // Tiers come in request order, each with its own limit and count.
                    if allowed {
                        used = [used[0] + cost, used[1] + cost];
                    }
                    let shown: Vec<(i64, i64)> =
                        resp3.tiers.iter().map(|t| (t.limit, t.remaining)).collect();
                    assert_eq!(
                        shown,
                        [(l1, l1 - used[0]), (l2, l2 - used[1])],
                        "{context}: {resp3:?}"
                    );
                    // RESP2 gives the same binding decision on a twin key.
                    let (b2, b3) = (resp2, resp3.binding);
                    assert_eq!(
                        (b2.allowed, b2.limit, b2.remaining),
                        (b3.allowed, b3.limit, b3.remaining),
                        "{context}: RESP2 {b2:?} RESP3 {b3:?}"
                    );
                    for (t2, t3) in [
                        (b2.reset_after_ms, b3.reset_after_ms),
                        (b2.retry_after_ms, b3.retry_after_ms),
                    ] {
                        assert!((t2 - t3).abs() <= slack, "{context}: {b2:?} {b3:?}");
                    }
                    if !allowed {
                        // Nothing was counted in any tier: same bytes, and the tier that
                        // had room shows the same count before and after.
                        assert_eq!(get_bytes(&mut con3, &key3), stored_before, "{context}");
                        let counts = |a: &Answer| -> Vec<i64> {
                            a.tiers.iter().map(|t| t.remaining).collect()
                        };
                        assert_eq!(counts(&peek_before), counts(&peek_after), "{context}");
                    }
                }
            }
            // One tier answers a plain map of five, with no `tiers`.
            let single = rl3(
                &mut con3,
                "RL.HIT",
                &key(algo, 50),
                &format!("4 {w}ms ALGO {algo}"),
            );
            assert!(single.tiers.is_empty(), "{flavor:?} {algo}: {single:?}");
            assert_eq!((single.binding.limit, single.binding.remaining), (4, 3));
        }
    });
}

/// A change of parameters on a key that used 5 units under `from`: how many single
/// units `to` allows at once, and the longest wait after that.
struct Change {
    from: String,
    to: String,
    more: i64,
    longest_wait_ms: i64,
}

fn changes(w: i64) -> Vec<Change> {
    let change = |from: String, to: String, more: i64, longest_wait_ms: i64| Change {
        from,
        to,
        more,
        longest_wait_ms,
    };
    let mut rows = Vec::new();
    for from in ALGORITHMS {
        // Another algorithm, same limit and window: the 5 units still count.
        for to in ALGORITHMS.into_iter().filter(|to| *to != from) {
            rows.push(change(
                format!("10 {w}ms ALGO {from}"),
                format!("10 {w}ms ALGO {to}"),
                5,
                w,
            ));
        }
        let a = from;
        let same = |spec: &str| format!("{spec} ALGO {a}");
        let one = same(&format!("10 {w}ms"));
        rows.extend([
            // A higher or lower limit counts the units against it.
            change(one.clone(), same(&format!("20 {w}ms")), 15, w),
            change(one.clone(), same(&format!("6 {w}ms")), 1, w),
            // Below what was used: locked for at most one window, not more.
            change(one.clone(), same(&format!("3 {w}ms")), 0, w),
            // A longer window.
            change(one.clone(), same(&format!("10 {}ms", 2 * w)), 5, 2 * w),
            // A tier more, or a tier fewer.
            change(
                one.clone(),
                same(&format!("10 {w}ms 100 {}ms", 24 * w)),
                5,
                w,
            ),
            change(
                same(&format!("10 {w}ms 100 {}ms", 24 * w)),
                one.clone(),
                5,
                w,
            ),
        ]);
        if a == "token" || a == "gcra" {
            // A bigger bucket, or one smaller than what was used.
            rows.push(change(one.clone(), format!("{one} BURST 20"), 15, w));
            rows.push(change(
                format!("{one} BURST 20"),
                format!("{one} BURST 3"),
                0,
                w,
            ));
        }
    }
    rows
}

#[test]
fn a_parameter_change_never_grants_more_than_the_new_limit_nor_locks_out() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let w = window_clear_of_edges(&mut con);
        for (n, change) in changes(w).into_iter().enumerate() {
            let name = key("change", n);
            let context = format!("{flavor:?} {} then {}", change.from, change.to);
            let used = rl_hit(&mut con, &name, &format!("{} COST 5", change.from));
            assert!(used.allowed, "{context}: {used:?}");
            let mut allowed = 0;
            let denied = loop {
                let r = rl_hit(&mut con, &name, &change.to);
                if !r.allowed {
                    break r;
                }
                allowed += 1;
                assert!(
                    allowed <= change.more,
                    "{context}: hit {allowed} allowed: {r:?}"
                );
            };
            assert_eq!(allowed, change.more, "{context}: allowed at once");
            assert!(
                denied.retry_after_ms > 0 && denied.retry_after_ms <= change.longest_wait_ms,
                "{context}: {denied:?}"
            );
        }
    });
}

/// Uses 5 of 10 units under `from`, then asks for 5 per 500 ms: nothing is left, and
/// the wait is within the new window, after which a hit is allowed.
fn shorter_window_waits_at_most_one_window(server: &Server, flavor: Flavor, algo: &str) {
    let mut con = server.conn();
    let w = window_clear_of_edges(&mut con);
    let other = ALGORITHMS
        .into_iter()
        .find(|a| *a != algo)
        .expect("another algorithm");
    for (n, from) in [algo, other].into_iter().enumerate() {
        let name = key(&format!("shorter:{algo}"), n);
        let to = format!("5 500ms ALGO {algo}");
        let context = format!("{flavor:?} 10 per {w}ms ALGO {from} then {to}");
        let used = rl_hit(&mut con, &name, &format!("10 {w}ms ALGO {from} COST 5"));
        assert!(used.allowed, "{context}");
        let denied = rl_hit(&mut con, &name, &to);
        assert!(!denied.allowed, "{context}: {denied:?}");
        assert!(
            denied.retry_after_ms > 0 && denied.retry_after_ms <= 500,
            "{context}: {denied:?}"
        );
        // The renewal was written even though the hit was denied: the key now lives at
        // most one new window, not the old hour.
        let expiry = pexpiretime(&mut con, &name);
        assert!(
            expiry <= server_ms(&mut con) + 500,
            "{context}: expiry {expiry}"
        );
        std::thread::sleep(Duration::from_millis(denied.retry_after_ms as u64));
        let again = rl_hit(&mut con, &name, &to);
        assert!(again.allowed, "{context}: {denied:?} then {again:?}");
    }
}

#[test]
fn a_shorter_window_never_makes_a_client_wait_longer_than_it() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        std::thread::scope(|scope| {
            for algo in ALGORITHMS {
                let server = &server;
                scope.spawn(move || shorter_window_waits_at_most_one_window(server, flavor, algo));
            }
        });
    });
}
