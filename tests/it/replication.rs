//! RL.HIT replicates its effects, never itself: every allowed hit reaches a replica as a
//! plain `SET key <count> PXAT <window end>`, so the replica holds the primary's exact bytes
//! and absolute expiry, with or without the module; a denied or failing hit sends nothing.

use testkit::*;

use redis::Connection;
use std::time::Duration;

const HOUR_MS: i64 = 3_600_000;

/// Windows as RL.HIT accepts them, with their length in ms. All are whole hours, so every
/// window edge falls on the hour, and the tests wait out the minute before one.
const WINDOWS: [(&str, i64); 7] = [
    ("1h", HOUR_MS),
    ("2h", 2 * HOUR_MS),
    ("21600000ms", 6 * HOUR_MS),
    ("86400", 24 * HOUR_MS),
    ("1d", 24 * HOUR_MS),
    ("7d", 7 * 24 * HOUR_MS),
    ("30d", 30 * 24 * HOUR_MS),
];

/// Key number `i`: plain names and names with NUL, 0xff, CR LF and non-ASCII bytes, plus
/// the empty name, all distinct.
fn key_name(i: usize) -> Vec<u8> {
    match i % 6 {
        0 if i == 0 => Vec::new(),
        0 => format!("rl:plain:{i}").into_bytes(),
        1 => [b"rl:nul\0".as_slice(), i.to_string().as_bytes(), b"\0"].concat(),
        2 => vec![
            0xff,
            0xfe,
            u8::try_from(i).expect("fewer than 256 keys"),
            0x00,
        ],
        3 => format!("rl:crlf\r\n{i}\r\n").into_bytes(),
        4 => format!("rl:{{user{i}}}:ünïcode").into_bytes(),
        _ => [b"\r\n\0\xff".as_slice(), i.to_string().as_bytes()].concat(),
    }
}

/// One key and the hits made on it.
struct Plan {
    key: Vec<u8>,
    limit: i64,
    window: &'static str,
    window_ms: i64,
    costs: Vec<i64>,
}

/// ~50 keys with varied limits, windows and costs: most fill up and then see denied hits,
/// and a few only ever ask for more than their limit, so they are never written.
fn plans() -> Vec<Plan> {
    (0..50)
        .map(|i| {
            let (window, window_ms) = WINDOWS[i % WINDOWS.len()];
            let limit = 1 + (i as i64 * 7) % 11;
            let costs = if i % 10 == 9 {
                vec![limit + 1, limit + 5]
            } else {
                (0..2 + i % 6).map(|j| 1 + ((i + j) as i64) % 3).collect()
            };
            Plan {
                key: key_name(i),
                limit,
                window,
                window_ms,
                costs,
            }
        })
        .collect()
}

/// Makes every planned hit on `con`, checking each reply against a plain count of
/// what was allowed so far, and returns how many hits were allowed.
fn run_plans(con: &mut Connection, plans: &[Plan]) -> usize {
    let mut allowed = 0;
    for plan in plans {
        let mut count = 0;
        for &cost in &plan.costs {
            let (limit, cost_arg) = (plan.limit.to_string(), cost.to_string());
            let reply = hit(con, &plan.key, &[&limit, plan.window, "COST", &cost_arg]);
            let fits = count + cost <= plan.limit;
            assert_eq!(reply.allowed, fits, "key {:?} cost {cost}", plan.key);
            if fits {
                count += cost;
                allowed += 1;
            }
            assert_eq!(reply.remaining, plan.limit - count, "key {:?}", plan.key);
        }
    }
    allowed
}

/// The count a key must hold after its plan: the sum of the costs that fit.
fn expected_value(plan: &Plan) -> Option<Vec<u8>> {
    let count = plan.costs.iter().fold(0, |count, &cost| {
        if count + cost <= plan.limit {
            count + cost
        } else {
            count
        }
    });
    (count > 0).then(|| count.to_string().into_bytes())
}

/// Checks that the replica holds, for every key, the primary's bytes and absolute expiry,
/// and that those are the count and the end of an epoch-aligned window.
fn assert_replica_matches(primary: &Server, replica: &Server, plans: &[Plan]) {
    let (mut on_primary, mut on_replica) = (primary.conn(), replica.conn());
    let now_ms = primary.time_ms();
    for plan in plans {
        let value = get_bytes(&mut on_primary, &plan.key);
        assert_eq!(
            value,
            expected_value(plan),
            "primary value of {:?}",
            plan.key
        );
        assert_eq!(
            get_bytes(&mut on_replica, &plan.key),
            value,
            "replica value of {:?}",
            plan.key
        );
        let expiry = pexpiretime(&mut on_primary, &plan.key);
        assert_eq!(
            pexpiretime(&mut on_replica, &plan.key),
            expiry,
            "replica expiry of {:?}",
            plan.key
        );
        if value.is_none() {
            assert_eq!(
                expiry, -2,
                "{:?} was never allowed, so never written",
                plan.key
            );
            continue;
        }
        assert_eq!(
            expiry % plan.window_ms,
            0,
            "{:?} ends on a window edge",
            plan.key
        );
        assert!(
            expiry > now_ms && expiry <= now_ms + plan.window_ms,
            "{:?} expires at the end of the current window",
            plan.key
        );
    }
}

/// The modules a server has loaded, by name: built-in ones too (Redis 8's `vectorset`,
/// Valkey 9's `lua`).
pub(crate) fn loaded_modules(server: &Server) -> Vec<String> {
    // RESP2 gives each module as a flat array: name, <name>, ver, <version>, ...
    let modules: Vec<Vec<redis::Value>> = redis::cmd("MODULE")
        .arg("LIST")
        .query(&mut server.conn())
        .expect("MODULE LIST");
    modules
        .into_iter()
        .map(|fields| {
            let fields: Vec<String> = fields
                .into_iter()
                .map(|f| redis::from_redis_value(f).unwrap_or_default())
                .collect();
            let at = fields
                .iter()
                .position(|f| f == "name")
                .expect("a name field");
            fields[at + 1].clone()
        })
        .collect()
}

#[test]
fn replica_holds_the_primarys_bytes_and_expiries() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        stay_clear_of_window_edges(&primary, HOUR_MS, 60_000);
        let plans = plans();
        let mut con = primary.conn();
        let allowed = run_plans(&mut con, &plans);
        wait_for_replicas(&mut con, 1);
        assert_replica_matches(&primary, &replica, &plans);
        // One SET per allowed hit, and the command itself never ran on the replica.
        assert_eq!(
            replica.command_calls("set"),
            Some(allowed as i64),
            "{flavor:?}"
        );
        assert_eq!(replica.command_calls("rl.hit"), None, "{flavor:?}");
    });
}

#[test]
fn replica_without_the_module_holds_the_same_state() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica_configs(
            ServerConfig::new(flavor),
            ServerConfig::new(flavor).without_module(),
        );
        let ratelimit = "ratelimit".to_string();
        let on_replica = loaded_modules(&replica);
        assert!(
            !on_replica.contains(&ratelimit),
            "{flavor:?}: {on_replica:?}"
        );
        let on_primary = loaded_modules(&primary);
        assert!(
            on_primary.contains(&ratelimit),
            "{flavor:?}: {on_primary:?}"
        );
        stay_clear_of_window_edges(&primary, HOUR_MS, 60_000);
        let plans = plans();
        let mut con = primary.conn();
        run_plans(&mut con, &plans);
        wait_for_replicas(&mut con, 1);
        assert_replica_matches(&primary, &replica, &plans);
    });
}

/// Keys written before the replica attaches reach it in the full sync's RDB, the rest as
/// SETs; both give the same state, here on a replica without the module.
#[test]
fn replica_attached_late_holds_the_same_state() {
    each_flavor(|flavor| {
        let primary = ServerConfig::new(flavor).start();
        stay_clear_of_window_edges(&primary, HOUR_MS, 60_000);
        let plans = plans();
        let (before_sync, after_sync) = plans.split_at(plans.len() / 2);
        let mut con = primary.conn();
        run_plans(&mut con, before_sync);

        let replica = ServerConfig::new(flavor)
            .without_module()
            .arg("replicaof", &format!("127.0.0.1 {}", primary.port()))
            .start();
        wait_until(Duration::from_secs(30), "replica link up", || {
            let link = replica.info_field("replication", "master_link_status");
            link.as_deref() == Some("up")
        });
        let allowed_after_sync = run_plans(&mut con, after_sync);
        wait_for_replicas(&mut con, 1);
        assert_replica_matches(&primary, &replica, &plans);
        assert_eq!(
            replica.command_calls("set"),
            Some(allowed_after_sync as i64),
            "{flavor:?}"
        );
    });
}

#[test]
fn denied_and_failing_hits_propagate_nothing() {
    each_flavor(|flavor| {
        // No pings either: then nothing but our own writes moves the replication offset.
        let (primary, replica) = primary_with_replica_configs(
            ServerConfig::new(flavor).arg("repl-ping-replica-period", "3600"),
            ServerConfig::new(flavor),
        );
        stay_clear_of_window_edges(&primary, HOUR_MS, 60_000);
        let mut con = primary.conn();
        let mut rl_hit_calls = 0;

        let full = b"rl:full\0\xff".as_slice();
        for remaining in [2, 1, 0] {
            let reply = hit(&mut con, full, &["3", "1d"]);
            assert_eq!((reply.allowed, reply.remaining), (true, remaining));
            rl_hit_calls += 1;
        }
        let allowed_hits = rl_hit_calls;
        // Keys RL.HIT must refuse, written with commands other than SET so that the
        // replica's SET count stays the number of allowed hits.
        redis::cmd("RPUSH")
            .arg("rl:list")
            .arg("x")
            .exec(&mut con)
            .expect("RPUSH");
        redis::cmd("APPEND")
            .arg("rl:text")
            .arg("hello")
            .exec(&mut con)
            .expect("APPEND");
        // Not a canonical count, so not a state (a canonical count without an expiry is
        // a state that lost it: tests/lost_expiry.rs).
        redis::cmd("APPEND")
            .arg("rl:no-expiry")
            .arg("02")
            .exec(&mut con)
            .expect("APPEND");

        wait_for_replicas(&mut con, 1);
        let offset_before = primary.master_repl_offset();

        for i in 0..500 {
            let cost = ["1", "2", "3", "4"][i % 4];
            let reply = hit(&mut con, full, &["3", "1d", "COST", cost]);
            assert!(!reply.allowed, "hit {i} on a full key");
            rl_hit_calls += 1;
        }
        // A cost above the limit is denied even on an empty key, which stays absent.
        for _ in 0..20 {
            let reply = hit(&mut con, "rl:never", &["2", "1h", "COST", "3"]);
            assert_eq!((reply.allowed, reply.retry_after_ms), (false, -1));
            rl_hit_calls += 1;
        }
        let failing: [(&[&str], &str); 11] = [
            (&[], "ERR wrong number of arguments"),
            (&["rl:full"], "ERR wrong number of arguments"),
            (&["rl:full", "3"], "ERR wrong number of arguments"),
            (&["rl:fresh", "0", "1h"], "ERR limit"),
            (&["rl:fresh", "3", "0"], "ERR window"),
            (&["rl:fresh", "3", "1y"], "ERR window"),
            (&["rl:fresh", "3", "1h", "COST", "0"], "ERR COST"),
            (
                &["rl:fresh", "3", "1h", "COST", "1", "COST", "1"],
                "ERR COST",
            ),
            (&["rl:list", "3", "1h"], "WRONGTYPE"),
            (&["rl:text", "3", "1h"], "ERR key holds a string"),
            (&["rl:no-expiry", "3", "1h"], "ERR key holds a string"),
        ];
        for (args, expected) in failing {
            let error = error_text(&mut con, redis::cmd("RL.HIT").arg(args));
            assert!(error.starts_with(expected), "RL.HIT {args:?}: {error}");
            rl_hit_calls += 1;
        }

        assert_eq!(primary.master_repl_offset(), offset_before, "{flavor:?}");
        assert_eq!(get_bytes(&mut con, full), Some(b"3".to_vec()));
        assert_eq!(pexpiretime(&mut con, "rl:never"), -2);
        assert_eq!(pexpiretime(&mut con, "rl:fresh"), -2);
        assert_eq!(get_bytes(&mut con, "rl:text"), Some(b"hello".to_vec()));
        assert_eq!(pexpiretime(&mut con, "rl:no-expiry"), -1);

        wait_for_replicas(&mut con, 1);
        assert_eq!(primary.command_calls("rl.hit"), Some(rl_hit_calls));
        assert_eq!(
            replica.command_calls("set"),
            Some(allowed_hits),
            "{flavor:?}"
        );
        assert_eq!(replica.command_calls("rl.hit"), None, "{flavor:?}");
        assert_eq!(get_bytes(&mut replica.conn(), full), Some(b"3".to_vec()));
    });
}
