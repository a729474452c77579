//! Upgrading to the exact log that decides at constant cost: a log stored by an
//! earlier module, in the plain layout (entry count, oldest time, then every entry), is
//! read as it was by RL.PEEK and RL.HIT on Redis and Valkey; its units keep counting
//! exactly; the first counted hit rewrites it in the header layout, and the replica holds
//! the same bytes.

use redis::Connection;
use testkit::{
    each_flavor, get_bytes, hit, primary_with_replica, rl, server_ms, wait_for_replicas,
};

const HOUR_MS: i64 = 3_600_000;
const RULE: &str = "10 1h ALGO log";

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The value an earlier module stored for `10 1h ALGO log` after hits of 3, 1 and 1 units
/// at `at[0..3]`, and the length of the part before the tier (form, algorithm, tier count,
/// limit, window, burst), where the tier's layout starts.
fn plain_value(at: [i64; 3]) -> (Vec<u8>, usize) {
    let mut value = vec![1, 3, 1];
    varint(10, &mut value);
    varint(HOUR_MS as u64, &mut value);
    varint(10, &mut value);
    let prefix = value.len();
    varint(3, &mut value); // entries
    value.extend_from_slice(&at[0].to_le_bytes());
    varint(3, &mut value); // the oldest entry's units
    for (gap, units) in [(at[1] - at[0], 1), (at[2] - at[1], 1)] {
        varint(gap as u64, &mut value);
        varint(units, &mut value);
    }
    (value, prefix)
}

fn set_with_expiry(con: &mut Connection, key: &[u8], value: &[u8], expires_at_ms: i64) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PXAT")
        .arg(expires_at_ms)
        .exec(con)
        .expect("SET the earlier module's value");
}

#[test]
fn a_log_in_the_earlier_layout_is_read_counted_exactly_and_rewritten() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        let mut con = primary.conn();
        let now = server_ms(&mut con);
        let at = [now - 3_000, now - 2_000, now - 1_000];
        let (plain, prefix) = plain_value(at);
        let key = b"log:upgraded".as_slice();
        set_with_expiry(&mut con, key, &plain, at[2] + HOUR_MS);

        // A look reads the 5 units and writes nothing.
        let look = rl(&mut con, "RL.PEEK", key, RULE);
        assert!(look.allowed, "{flavor:?}: {look:?}");
        assert_eq!(look.remaining, 10 - 5 - 1, "{flavor:?}: {look:?}");
        assert_eq!(
            get_bytes(&mut con, key).as_deref(),
            Some(&plain[..]),
            "{flavor:?}"
        );

        // The first counted hit is the 6th unit and rewrites the value with the header.
        let first = hit(&mut con, key, &["10", "1h", "ALGO", "log"]);
        assert!(
            first.allowed && first.remaining == 4,
            "{flavor:?}: {first:?}"
        );
        let rewritten = get_bytes(&mut con, key).expect("the key is there");
        assert_ne!(rewritten, plain, "{flavor:?}: the hit rewrote the value");
        assert_eq!(
            rewritten[..prefix],
            plain[..prefix],
            "{flavor:?}: same rule"
        );
        assert_eq!(
            rewritten[prefix], 0,
            "{flavor:?}: the header layout starts with 0"
        );

        // Exactly 10 units in the hour: 4 more hits, then a denial until the oldest 3 units
        // (logged 3 s before the start) are an hour old.
        for remaining in (0..4).rev() {
            let reply = hit(&mut con, key, &["10", "1h", "ALGO", "log"]);
            assert!(reply.allowed, "{flavor:?}: {reply:?}");
            assert_eq!(reply.remaining, remaining, "{flavor:?}");
        }
        // Read before the call: the server's clock at the call is this or later.
        let oldest_leaves_ms = at[0] + HOUR_MS - server_ms(&mut con);
        let denied = hit(&mut con, key, &["10", "1h", "ALGO", "log"]);
        assert!(!denied.allowed, "{flavor:?}: {denied:?}");
        assert!(
            denied.retry_after_ms <= oldest_leaves_ms
                && denied.retry_after_ms > oldest_leaves_ms - 60_000,
            "{flavor:?}: retry after {} ms, the oldest entry leaves in {oldest_leaves_ms}",
            denied.retry_after_ms
        );

        wait_for_replicas(&mut con, 1);
        let mut replica_con = replica.conn();
        assert_eq!(
            get_bytes(&mut replica_con, key),
            get_bytes(&mut con, key),
            "{flavor:?}: the replica holds the primary's bytes"
        );
        let on_replica = rl(&mut replica_con, "RL.PEEK", key, RULE);
        assert!(!on_replica.allowed, "{flavor:?}: {on_replica:?}");
    });
}
