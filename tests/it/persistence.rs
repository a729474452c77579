//! Rate-limit state survives every way a server saves and loads its data: AOF replay, RDB,
//! `DEBUG RELOAD`, and an AOF replayed by a server without the module. The count, the
//! absolute expiry and counting on afterwards all come back exactly as they were.

use testkit::*;

use redis::Connection;

/// Every window below is whole hours, so all their edges fall on the hour: the tests wait
/// out the last minute before one, when a window could end mid-test and reset counts the
/// test expects to keep.
const HOUR_MS: i64 = 3_600_000;

/// A key counted up to `count` units of `limit` per window.
struct Counted {
    key: &'static [u8],
    limit: i64,
    window: &'static str,
    window_ms: i64,
    count: i64,
}

/// Counts 1..=8 on keys with binary names and varied windows, then two more keys holding
/// the same count: loaded values may share one integer object, and counting on one of
/// them must leave the other alone.
fn counted_keys() -> Vec<Counted> {
    let keys: [(&[u8], &str, i64, i64); 10] = [
        (b"rl:plain", "1h", HOUR_MS, 1),
        (b"rl:nul\0inside", "2h", 2 * HOUR_MS, 2),
        (b"\xff\xfe\x00", "1d", 24 * HOUR_MS, 3),
        (b"rl:crlf\r\n", "86400", 24 * HOUR_MS, 4),
        (b"", "7d", 7 * 24 * HOUR_MS, 5),
        (b"rl:{user}:\xc3\xbc", "30d", 30 * 24 * HOUR_MS, 6),
        (b"rl:ms", "21600000ms", 6 * HOUR_MS, 7),
        (b"rl:year", "366d", 366 * 24 * HOUR_MS, 8),
        (b"rl:twin:counted-on", "1d", 24 * HOUR_MS, 3),
        (b"rl:twin:left-alone", "1d", 24 * HOUR_MS, 3),
    ];
    keys.into_iter()
        .map(|(key, window, window_ms, count)| Counted {
            key,
            limit: 10,
            window,
            window_ms,
            count,
        })
        .collect()
}

/// Brings `counted` to its count with a hit of cost 1 and, above 1, one for the rest.
fn count_up(con: &mut Connection, counted: &Counted) {
    let limit = counted.limit.to_string();
    let first = hit(con, counted.key, &[&limit, counted.window]);
    assert_eq!((first.allowed, first.remaining), (true, counted.limit - 1));
    if counted.count > 1 {
        let rest = (counted.count - 1).to_string();
        let second = hit(con, counted.key, &[&limit, counted.window, "COST", &rest]);
        let remaining = counted.limit - counted.count;
        assert_eq!((second.allowed, second.remaining), (true, remaining));
    }
}

/// The value and absolute expiry of each key.
fn snapshot(con: &mut Connection, keys: &[Counted]) -> Vec<(Option<Vec<u8>>, i64)> {
    keys.iter()
        .map(|k| (get_bytes(con, k.key), pexpiretime(con, k.key)))
        .collect()
}

/// Checks that the keys hold what `count_up` wrote: the count in decimal, expiring at the
/// end of the current epoch-aligned window.
fn assert_counted(server: &Server, keys: &[Counted]) {
    let mut con = server.conn();
    let now_ms = server.time_ms();
    for k in keys {
        let value = get_bytes(&mut con, k.key);
        assert_eq!(value, Some(k.count.to_string().into_bytes()), "{:?}", k.key);
        let expiry = pexpiretime(&mut con, k.key);
        assert_eq!(expiry % k.window_ms, 0, "{:?} ends on a window edge", k.key);
        assert!(
            expiry > now_ms && expiry <= now_ms + k.window_ms,
            "{:?} expires at the end of the current window",
            k.key
        );
    }
}

/// One more hit on every key but the last twin continues from the stored count, in the
/// same window; the last twin keeps its value.
fn assert_counting_continues(server: &Server, keys: &[Counted], before: &[(Option<Vec<u8>>, i64)]) {
    let mut con = server.conn();
    let (left_alone, counted_on) = keys.split_last().expect("keys");
    for (k, (_, expiry)) in counted_on.iter().zip(before) {
        let reply = hit(&mut con, k.key, &[&k.limit.to_string(), k.window]);
        assert!(reply.allowed, "{:?}", k.key);
        assert_eq!(reply.remaining, k.limit - k.count - 1, "{:?}", k.key);
        assert!(reply.reset_after_ms > 0 && reply.reset_after_ms <= k.window_ms);
        let value = get_bytes(&mut con, k.key);
        assert_eq!(
            value,
            Some((k.count + 1).to_string().into_bytes()),
            "{:?}",
            k.key
        );
        assert_eq!(
            pexpiretime(&mut con, k.key),
            *expiry,
            "{:?} same window",
            k.key
        );
    }
    let twin_before = before.last().expect("a state per key");
    assert_eq!(
        snapshot(&mut con, std::slice::from_ref(left_alone))[0],
        *twin_before
    );
}

/// Counts the keys on a server started from `config`, has `reload` bring the data back
/// (restarting or not), and checks every key is as it was and counting goes on from there.
fn assert_state_survives(config: ServerConfig, reload: impl FnOnce(Server) -> Server) {
    let server = config.start();
    stay_clear_of_window_edges(&server, HOUR_MS, 60_000);
    let keys = counted_keys();
    let mut con = server.conn();
    for k in &keys {
        count_up(&mut con, k);
    }
    let before = snapshot(&mut con, &keys);
    let server = reload(server);
    assert_eq!(snapshot(&mut server.conn(), &keys), before);
    assert_counted(&server, &keys);
    assert_counting_continues(&server, &keys, &before);
}

#[test]
fn aof_replay_restores_counts_and_expiries() {
    each_flavor(|flavor| {
        let config = ServerConfig::new(flavor).arg("appendonly", "yes");
        assert_state_survives(config, Server::restart_on_the_aof);
    });
}

#[test]
fn rdb_restores_counts_and_expiries() {
    each_flavor(|flavor| {
        assert_state_survives(ServerConfig::new(flavor), Server::save_and_restart);
    });
}

#[test]
fn debug_reload_restores_counts_and_expiries() {
    each_flavor(|flavor| {
        assert_state_survives(ServerConfig::new(flavor), Server::debug_reload);
    });
}

/// Changes since the last save, what `save <seconds> <changes>` rules compare against.
fn changes_since_save(server: &Server) -> i64 {
    server
        .info_field("persistence", "rdb_changes_since_last_save")
        .expect("rdb_changes_since_last_save in INFO persistence")
        .parse()
        .expect("an integer")
}

/// The module writes through the low-level key API, which by itself does not count as a
/// change; were it not counted, `save` rules would never fire for rate-limit traffic.
#[test]
fn allowed_hits_count_as_changes_for_save_rules() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        stay_clear_of_window_edges(&server, HOUR_MS, 60_000);
        let mut con = server.conn();
        assert_eq!(changes_since_save(&server), 0, "{flavor:?}");
        for _ in 0..3 {
            assert!(hit(&mut con, b"rl:\0saved\xff".as_slice(), &["3", "1d"]).allowed);
        }
        assert!(hit(&mut con, "rl:other", &["5", "1h", "COST", "5"]).allowed);
        assert_eq!(changes_since_save(&server), 4, "{flavor:?}");

        // Denied hits change nothing, so count nothing.
        for _ in 0..10 {
            assert!(!hit(&mut con, b"rl:\0saved\xff".as_slice(), &["3", "1d"]).allowed);
        }
        assert!(!hit(&mut con, "rl:too-big", &["2", "1h", "COST", "3"]).allowed);
        assert_eq!(changes_since_save(&server), 4, "{flavor:?}");

        redis::cmd("SAVE").exec(&mut con).expect("SAVE");
        assert_eq!(changes_since_save(&server), 0, "{flavor:?}");
        assert!(hit(&mut con, "rl:after-save", &["1", "1d"]).allowed);
        assert_eq!(changes_since_save(&server), 1, "{flavor:?}");
    });
}

/// Writes an AOF with the module, half the keys in its rewritten base and half in the
/// commands appended after, replays it on a server without the module, then once more
/// with the module, which counts on from the replayed state.
fn assert_aof_loads_without_module(flavor: Flavor, preamble: Option<&str>, base_suffix: &str) {
    let mut config = ServerConfig::new(flavor).arg("appendonly", "yes");
    if let Some(preamble) = preamble {
        config = config.arg("aof-use-rdb-preamble", preamble);
    }
    let server = config.start();
    stay_clear_of_window_edges(&server, HOUR_MS, 60_000);
    let keys = counted_keys();
    let (in_base, appended) = keys.split_at(keys.len() / 2);
    let mut con = server.conn();
    in_base.iter().for_each(|k| count_up(&mut con, k));
    server.rewrite_aof();
    appended.iter().for_each(|k| count_up(&mut con, k));
    let before = snapshot(&mut con, &keys);
    let config = server.shutdown("NOSAVE");
    assert!(config.has_aof_base(base_suffix), "{flavor:?} {base_suffix}");

    let plain = config.without_module().start();
    let error = error_text(
        &mut plain.conn(),
        redis::cmd("RL.HIT").arg("rl:plain").arg("10").arg("1h"),
    );
    assert!(error.contains("unknown command"), "{flavor:?}: {error}");
    assert_eq!(snapshot(&mut plain.conn(), &keys), before, "{flavor:?}");
    assert_counted(&plain, &keys);

    let mut config = plain.shutdown("NOSAVE");
    config.with_module = true;
    let server = config.start();
    assert_eq!(snapshot(&mut server.conn(), &keys), before, "{flavor:?}");
    assert_counting_continues(&server, &keys, &before);
}

#[test]
fn aof_loads_without_the_module() {
    each_flavor(|flavor| {
        assert_aof_loads_without_module(flavor, Some("no"), ".base.aof");
        assert_aof_loads_without_module(flavor, None, ".base.rdb");
    });
}
