//! Named policies (`RL.POLICY SET|GET|DEL|LIST`) against real Redis and Valkey servers:
//! calls that name a policy use its rule, a redefinition applies to the next call for every
//! key, shadow mode never denies but says and counts what it would have denied, policies
//! survive every way a server saves and loads its data, reach replicas and stay on a
//! promoted one, and every malformed command is refused by name and changes nothing.
//!
//! On Redis 7.0 the module is loaded with `policies-in-rdb yes` (without it policies are
//! refused, see [`redis_7_0_refuses_policies_unless_they_go_into_the_rdb`]).

mod support;
use support::*;

use redis::{Connection, Value};
use std::panic::AssertUnwindSafe;
use std::time::Duration;

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;

const READONLY: &str = "READONLY You can't write against a read only replica.";
const POLICY_ARITY: &str = "ERR wrong number of arguments for 'RL.POLICY' command";
const NOT_PERSISTED: &str = "ERR policies would not survive a restart: on Redis 7.0 load the \
    module with 'policies-in-rdb yes' (its RDB files then need the module to load)";
/// What the server logs when an RDB holds policies and the module is not loaded.
const NO_MODULE_FOR_RDB: &str = "no matching module 'rl-policy'";

/// Every policy: its name and its definition as `RL.POLICY GET` shows it.
type Policies = Vec<(Vec<u8>, Vec<String>)>;

/// A server whose policies persist: on Redis 7.0 the module opts in with
/// `policies-in-rdb yes`; Valkey needs nothing.
fn policy_config(flavor: Flavor) -> ServerConfig {
    let config = ServerConfig::new(flavor);
    match flavor {
        Flavor::Redis => config.module_arg("policies-in-rdb").module_arg("yes"),
        Flavor::Valkey => config,
    }
}

/// `RL.POLICY SET name <rule split on spaces>`, which must answer OK.
fn policy_set(con: &mut Connection, name: &[u8], rule: &str) {
    let rule: Vec<&str> = rule.split_whitespace().collect();
    let reply: String = redis::cmd("RL.POLICY")
        .arg("SET")
        .arg(name)
        .arg(&rule)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.POLICY SET {name:?} {rule:?}: {e}"));
    assert_eq!(reply, "OK", "RL.POLICY SET {name:?} {rule:?}");
}

/// `RL.POLICY GET name`: the canonical arguments, or `None`.
fn policy_get(con: &mut Connection, name: &[u8]) -> Option<Vec<String>> {
    redis::cmd("RL.POLICY")
        .arg("GET")
        .arg(name)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.POLICY GET {name:?}: {e}"))
}

/// `RL.POLICY DEL name`: 1 when it existed, else 0.
fn policy_del(con: &mut Connection, name: &[u8]) -> i64 {
    redis::cmd("RL.POLICY")
        .arg("DEL")
        .arg(name)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.POLICY DEL {name:?}: {e}"))
}

/// `RL.POLICY LIST`.
fn policy_list(con: &mut Connection) -> Vec<Vec<u8>> {
    redis::cmd("RL.POLICY")
        .arg("LIST")
        .query(con)
        .expect("RL.POLICY LIST")
}

/// Every policy of the server, in `RL.POLICY LIST` order, with its definition.
fn all_policies(server: &Server) -> Policies {
    let mut con = server.conn();
    policy_list(&mut con)
        .into_iter()
        .map(|name| {
            let definition = policy_get(&mut con, &name)
                .unwrap_or_else(|| panic!("{name:?} is listed but GET answers nil"));
            (name, definition)
        })
        .collect()
}

/// The words of `text`, to compare with `RL.POLICY GET`.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// Policies with their names as text, for failure messages.
fn readable(policies: &Policies) -> Vec<(String, String)> {
    policies
        .iter()
        .map(|(name, shown)| (String::from_utf8_lossy(name).into_owned(), shown.join(" ")))
        .collect()
}

/// `command key POLICY name [extra ...]` on a RESP2 connection: the five integers.
fn through(con: &mut Connection, command: &str, key: &str, name: &[u8], extra: &[&str]) -> Reply {
    let values: Vec<i64> = redis::cmd(command)
        .arg(key)
        .arg("POLICY")
        .arg(name)
        .arg(extra)
        .query(con)
        .unwrap_or_else(|e| panic!("{command} {key} POLICY {name:?} {extra:?}: {e}"));
    decode_reply(&values)
}

/// `RL.HIT key POLICY name` on a RESP2 connection.
fn hit_policy(con: &mut Connection, key: &str, name: &[u8]) -> Reply {
    through(con, "RL.HIT", key, name, &[])
}

/// `command key POLICY name [extra ...]` on a RESP3 connection: the map's fields, in order.
fn through3(
    con: &mut Connection,
    command: &str,
    key: &str,
    name: &[u8],
    extra: &[&str],
) -> Vec<(String, i64)> {
    let value: Value = redis::cmd(command)
        .arg(key)
        .arg("POLICY")
        .arg(name)
        .arg(extra)
        .query(con)
        .unwrap_or_else(|e| panic!("{command} {key} POLICY {name:?} {extra:?}: {e}"));
    assert!(
        matches!(value, Value::Map(_)),
        "RESP3 answers a map: {value:?}"
    );
    named_integers(value)
}

/// Name/value pairs from a RESP3 map or a flat RESP2 `[name, value, ...]` array.
fn named_integers(value: Value) -> Vec<(String, i64)> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "pairs: {items:?}");
            items
                .chunks(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect()
        }
        other => panic!("neither a map nor an array: {other:?}"),
    };
    pairs
        .into_iter()
        .map(|(name, value)| {
            let name: String = redis::from_redis_value(name).expect("a field name");
            let value: i64 = redis::from_redis_value(value).expect("an integer");
            (name, value)
        })
        .collect()
}

fn pairs(expected: &[(&str, i64)]) -> Vec<(String, i64)> {
    expected.iter().map(|&(n, v)| (n.to_string(), v)).collect()
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

/// One field of a decision's RESP3 fields.
fn field(fields: &[(String, i64)], name: &str) -> i64 {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} in {fields:?}"))
        .1
}

/// `RL.STATS [name]` as name/value pairs (RESP2 or RESP3 alike).
fn rl_stats(con: &mut Connection, name: Option<&[u8]>) -> Vec<(String, i64)> {
    let mut cmd = redis::cmd("RL.STATS");
    if let Some(name) = name {
        cmd.arg(name);
    }
    named_integers(cmd.query(con).expect("RL.STATS"))
}

/// `RL.STATS RESET [name]`, which must answer OK.
fn rl_stats_reset(con: &mut Connection, name: Option<&[u8]>) {
    let mut cmd = redis::cmd("RL.STATS");
    cmd.arg("RESET");
    if let Some(name) = name {
        cmd.arg(name);
    }
    let reply: String = cmd.query(con).expect("RL.STATS RESET");
    assert_eq!(reply, "OK");
}

/// `INFO ratelimit` field `ratelimit_<name>`.
fn info_stat(server: &Server, name: &str) -> i64 {
    server
        .info_field("ratelimit", &format!("ratelimit_{name}"))
        .unwrap_or_else(|| panic!("INFO ratelimit has no ratelimit_{name}"))
        .parse()
        .expect("a count")
}

/// `ms` as a window argument in minutes.
fn minutes(ms: i64) -> String {
    format!("{}m", ms / MINUTE_MS)
}

/// Waits out the last three seconds of a minute, so that the minute-long windows of the
/// seeds' rules do not end mid-test. Never waits longer than that.
fn stay_clear_of_minute_edges(server: &Server) {
    const MARGIN_MS: i64 = 3_000;
    let into_minute = server.time_ms().rem_euclid(MINUTE_MS);
    if into_minute > MINUTE_MS - MARGIN_MS {
        let until_past_edge = MINUTE_MS - into_minute + 100;
        std::thread::sleep(Duration::from_millis(until_past_edge as u64));
    }
}

/// Starts a server that becomes a replica of `primary`, and waits until its link is up
/// (the full sync done).
fn attach_replica(primary: &Server, config: ServerConfig) -> Server {
    let replica = config
        .arg("replicaof", &format!("127.0.0.1 {}", primary.port()))
        .start();
    wait_for_link(&replica);
    replica
}

fn wait_for_link(replica: &Server) {
    wait_until(Duration::from_secs(30), "replica link up", || {
        replica
            .info_field("replication", "master_link_status")
            .as_deref()
            == Some("up")
    });
}

/// Starts `config`, which must fail to start; returns the server's log.
fn assert_fails_to_start(config: &ServerConfig, what: &str) -> String {
    let attempt = config.clone();
    let started = std::panic::catch_unwind(AssertUnwindSafe(move || attempt.start()));
    assert!(started.is_err(), "{what}: the server started");
    let log = config.dir().join(format!("server-{}.log", config.port));
    std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()))
}

/// The policies the persistence tests define: every part of a definition, a binary name,
/// names that differ only in case, a redefined one and a deleted one, and `counted`, a
/// fixed window clear of edges (`window_ms`) used to check that counting goes on.
fn define_policies(con: &mut Connection, window_ms: i64) {
    policy_set(con, b"api", "5 1m");
    policy_set(con, b"login", "3 15m");
    policy_set(con, b"Api", "10 1s 1000 1h ALGO sliding");
    policy_set(con, b"burst", "10 1h ALGO gcra BURST 3");
    policy_set(con, b"tokens", "100 1d algo token burst 150 mode Shadow");
    policy_set(con, b"log", "7 90s ALGO log MODE enforce");
    policy_set(con, b"bin\0\xff\r\n name", "2 250ms");
    policy_set(con, b"changed", "1 1h");
    policy_set(con, b"changed", "2 2h MODE shadow");
    policy_set(con, b"gone", "1 1h");
    assert_eq!(policy_del(con, b"gone"), 1);
    policy_set(con, b"counted", &format!("3 {}", minutes(window_ms)));
}

/// What [`define_policies`] defines, as the server shows it.
fn defined_policies(window_ms: i64) -> Policies {
    let counted = if window_ms == HOUR_MS {
        "1h".to_string()
    } else {
        minutes(window_ms)
    };
    let counted = format!("3 {counted} ALGO fixed MODE enforce");
    let rows: [(&[u8], &str); 9] = [
        (b"Api", "10 1s 1000 1h ALGO sliding MODE enforce"),
        (b"api", "5 1m ALGO fixed MODE enforce"),
        (b"bin\0\xff\r\n name", "2 250ms ALGO fixed MODE enforce"),
        (b"burst", "10 1h ALGO gcra BURST 3 MODE enforce"),
        (b"changed", "2 2h ALGO fixed MODE shadow"),
        (b"counted", &counted),
        (b"log", "7 90s ALGO log MODE enforce"),
        (b"login", "3 15m ALGO fixed MODE enforce"),
        (b"tokens", "100 1d ALGO token BURST 150 MODE shadow"),
    ];
    rows.into_iter()
        .map(|(name, shown)| (name.to_vec(), words(shown)))
        .collect()
}

/// Counts two of the three units of `counted` on `rl:counted`.
fn count_two(con: &mut Connection) {
    assert_eq!(hit_policy(con, "rl:counted", b"counted").remaining, 2);
    assert_eq!(hit_policy(con, "rl:counted", b"counted").remaining, 1);
}

/// After a reload: the policies are all there, unchanged, and `counted` goes on from the
/// two units counted before (one more allowed, then denied).
fn assert_policies_came_back(server: &Server, expected: &Policies, context: &str) {
    assert_eq!(&all_policies(server), expected, "{context}");
    let mut con = server.conn();
    assert_eq!(
        info_stat(server, "policies"),
        expected.len() as i64,
        "{context}"
    );
    let last = hit_policy(&mut con, "rl:counted", b"counted");
    assert_eq!((last.allowed, last.remaining), (true, 0), "{context}");
    let denied = hit_policy(&mut con, "rl:counted", b"counted");
    assert!(!denied.allowed, "{context}: the policy enforces its limit");
}

/// Defines the policies on a server started from `config`, has `reload` bring the data
/// back (restarting or not), and checks that they all came back.
fn assert_policies_survive(config: ServerConfig, reload: impl FnOnce(Server) -> Server) {
    let flavor = config.flavor;
    let server = config.start();
    let window_ms = window_clear_of_edges(&mut server.conn());
    let mut con = server.conn();
    define_policies(&mut con, window_ms);
    count_two(&mut con);
    let expected = defined_policies(window_ms);
    assert_eq!(all_policies(&server), expected, "{flavor:?} before");
    let server = reload(server);
    assert_policies_came_back(&server, &expected, &format!("{flavor:?} after"));
}

#[test]
fn policies_are_defined_shown_listed_and_deleted() {
    for flavor in FLAVORS {
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
        assert_eq!(info_stat(&server, "policies"), 8, "{flavor:?}");
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
        assert_eq!(info_stat(&server, "policies"), 6, "{flavor:?}");
        for name in &left {
            assert_eq!(policy_del(&mut con, name), 1, "{flavor:?}");
        }
        assert_eq!(policy_list(&mut con), Vec::<Vec<u8>>::new(), "{flavor:?}");
        assert_eq!(info_stat(&server, "policies"), 0, "{flavor:?}");
    }
}

/// The seeds' rules: 5 per minute per endpoint, and a stricter one for login.
#[test]
fn the_seeds_rules_limit_each_endpoint() {
    for flavor in FLAVORS {
        let server = policy_config(flavor).start();
        let mut con = server.conn();
        policy_set(&mut con, b"api", "5 1m");
        policy_set(&mut con, b"login", "3 15m");
        stay_clear_of_minute_edges(&server);

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
    }
}

/// A redefinition applies to the next call for every key, by the module's renewal rules:
/// never more than the new limit on top of what was used, never a wait longer than one
/// new window.
#[test]
fn a_redefined_policy_applies_to_the_next_call_for_every_key() {
    for flavor in FLAVORS {
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
    }
}

/// Deleting a policy makes every call naming it fail with a clear ERR, and touches no key.
#[test]
fn a_deleted_policy_fails_the_calls_that_name_it() {
    for flavor in FLAVORS {
        let server = policy_config(flavor).start();
        let rule = format!("5 {}", minutes(window_clear_of_edges(&mut server.conn())));
        let mut con = server.conn();
        policy_set(&mut con, b"api", &rule);
        assert!(hit_policy(&mut con, "rl:k", b"api").allowed);
        let state = (get_bytes(&mut con, "rl:k"), pexpiretime(&mut con, "rl:k"));
        assert_eq!(policy_del(&mut con, b"api"), 1);

        for command in ["RL.HIT", "RL.PEEK", "RL.REFUND"] {
            for extra in [&[][..], &["COST", "2"]] {
                let cmd = redis::cmd(command)
                    .arg("rl:k")
                    .arg("POLICY")
                    .arg("api")
                    .arg(extra)
                    .clone();
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
        let odd = redis::cmd("RL.HIT")
            .arg("rl:k")
            .arg("POLICY")
            .arg(b"a b\r\n\0\xff-ERR".as_slice())
            .clone();
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
    }
}

#[test]
fn shadow_mode_never_denies_and_counts_what_it_would_have_denied() {
    for flavor in FLAVORS {
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
        .map(|name| (name.to_string(), info_stat(&server, name)))
        .collect();
        assert_eq!(info, totals, "{flavor:?} INFO ratelimit");
        assert_eq!(info_stat(&server, "fixed_allowed"), 8, "{flavor:?}");
        assert_eq!(info_stat(&server, "fixed_denied"), 1, "{flavor:?}");

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
        assert_eq!(info_stat(&server, "shadow_denied"), 0, "{flavor:?}");
        assert_eq!(info_stat(&server, "policies"), 2, "{flavor:?}");
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
        assert_eq!(info_stat(&server, "shadow_denied"), 1, "{flavor:?}");
    }
}

#[test]
fn malformed_policy_commands_are_refused_and_change_nothing() {
    // RL.POLICY is a container command: the server answers unknown subcommands itself.
    let unknown_foo = "ERR unknown subcommand 'FOO'. Try RL.POLICY HELP.";
    let unknown_setx = "ERR unknown subcommand 'SETX'. Try RL.POLICY HELP.";
    let cost_in_definition = "ERR unknown option 'COST' (expected ALGO, BURST or MODE)";
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
        (&["SET", "new", "5", "1m", "cost", "2"], "ERR unknown option 'cost' (expected ALGO, BURST or MODE)"),
        (&["SET", "api", "5", "1m", "MODE", "loud"], mode),
        (&["SET", "api", "5", "1m", "MODE"], mode),
        (&["SET", "api", "5", "1m", "MODE", "shadow", "MODE", "enforce"], "ERR MODE is given more than once"),
        (&["SET", "api", "5", "1m", "MODE", "shadow", "extra"], "ERR unknown option 'extra' (expected ALGO, BURST or MODE)"),
        (&["SET", "api", "0", "1m"], "ERR limit must be a positive integer"),
        (&["SET", "api", "5", "1y"], "ERR window has an unknown unit: use ms, s, m, h or d"),
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
    for flavor in FLAVORS {
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
            let cmd = redis::cmd("RL.POLICY").arg(*args).clone();
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
        assert_eq!(info_stat(&server, "errors"), errors, "{flavor:?}");
        // The policies still work.
        let reply = hit_policy(&mut con, "rl:k", b"api");
        assert_eq!((reply.allowed, reply.limit, reply.remaining), (true, 5, 4));
    }
}

/// Definitions are checked against the configs when they are made (and take the default
/// algorithm then); a policy already defined keeps working when the configs change, and a
/// replica with stricter configs takes the primary's policies as they are.
#[test]
fn definitions_are_checked_against_the_configs_of_the_server_that_takes_them() {
    for flavor in FLAVORS {
        let primary = policy_config(flavor)
            .module_arg("max-window-ms")
            .module_arg("7200000")
            .module_arg("max-log-limit")
            .module_arg("50")
            .module_arg("default-algorithm")
            .module_arg("sliding")
            .start();
        let mut con = primary.conn();
        let too_long = redis::cmd("RL.POLICY")
            .arg(&["SET", "p", "5", "3h"])
            .clone();
        assert_eq!(
            error_text(&mut con, &too_long),
            "ERR window must be at most 7200000ms (ratelimit.max-window-ms)",
            "{flavor:?}"
        );
        let too_big = redis::cmd("RL.POLICY")
            .arg(&["SET", "p", "51", "1h", "ALGO", "log"])
            .clone();
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
    }
}

#[test]
fn policies_survive_save_and_restart() {
    for flavor in FLAVORS {
        assert_policies_survive(policy_config(flavor), |server| {
            // Policy changes count as changes for `save` rules.
            let changes = server.info_field("persistence", "rdb_changes_since_last_save");
            assert_ne!(changes.as_deref(), Some("0"), "{flavor:?}");
            redis::cmd("SAVE").exec(&mut server.conn()).expect("SAVE");
            let config = server.shutdown("NOSAVE");
            assert!(config.dir().join("dump.rdb").exists(), "{flavor:?}");
            config.start()
        });
    }
}

#[test]
fn policies_survive_an_aof_restart() {
    for flavor in FLAVORS {
        let config = policy_config(flavor).arg("appendonly", "yes");
        assert_policies_survive(config, |server| {
            let config = server.shutdown("NOSAVE");
            // Nothing but the AOF could bring them back.
            assert!(!config.dir().join("dump.rdb").exists(), "{flavor:?}");
            config.start()
        });
    }
}

/// Half the changes in the rewritten AOF's base (with its RDB preamble, the default), the
/// rest appended after it, deletions and redefinitions included.
#[test]
fn policies_survive_an_aof_rewrite_and_restart() {
    for flavor in FLAVORS {
        let server = policy_config(flavor).arg("appendonly", "yes").start();
        let window_ms = window_clear_of_edges(&mut server.conn());
        let mut con = server.conn();
        define_policies(&mut con, window_ms);
        policy_set(&mut con, b"deleted-after-rewrite", "1 1h");
        policy_set(&mut con, b"log", "1 1h");
        server.rewrite_aof();
        assert_eq!(policy_del(&mut con, b"deleted-after-rewrite"), 1);
        policy_set(&mut con, b"log", "7 90s ALGO log MODE enforce");
        policy_set(&mut con, b"appended", "4 4h ALGO token BURST 8");
        count_two(&mut con);
        let mut expected = defined_policies(window_ms);
        expected.push((
            b"appended".to_vec(),
            words("4 4h ALGO token BURST 8 MODE enforce"),
        ));
        expected.sort();
        assert_eq!(all_policies(&server), expected, "{flavor:?} before");
        let config = server.shutdown("NOSAVE");
        assert!(config.has_aof_base(".base.rdb"), "{flavor:?}");
        assert!(!config.dir().join("dump.rdb").exists(), "{flavor:?}");
        let server = config.start();
        assert_policies_came_back(&server, &expected, &format!("{flavor:?} after"));
    }
}

/// `aof-use-rdb-preamble no`: the rewritten base is plain commands.
/// An AOF rewrite without the RDB preamble writes commands for keys only, and policies are
/// no keys: with the AOF on and the preamble off, RL.POLICY SET is refused instead of
/// losing the policy at the next rewrite; with the preamble (the default), it survives.
#[test]
fn policies_are_refused_where_an_aof_rewrite_would_drop_them() {
    for flavor in FLAVORS {
        let server = policy_config(flavor)
            .arg("appendonly", "yes")
            .arg("aof-use-rdb-preamble", "no")
            .start();
        let mut con = server.conn();
        let set = redis::cmd("RL.POLICY")
            .arg(&["SET", "api", "5", "1m"])
            .clone();
        assert_eq!(
            error_text(&mut con, &set),
            "ERR policies would not survive an AOF rewrite with aof-use-rdb-preamble no: \
             keep the RDB preamble (the default) to use policies",
            "{flavor:?}"
        );
        assert!(all_policies(&server).is_empty(), "{flavor:?}");
        redis::cmd("CONFIG")
            .arg(&["SET", "aof-use-rdb-preamble", "yes"])
            .exec(&mut con)
            .expect("CONFIG SET");
        let ok: String = set.query(&mut con).expect("RL.POLICY SET");
        assert_eq!(ok, "OK");
        server.rewrite_aof();
        let config = server.shutdown("NOSAVE");
        let server = config.start();
        assert_eq!(
            all_policies(&server).len(),
            1,
            "{flavor:?}: kept by the rewrite"
        );
    }
}

#[test]
fn policies_survive_debug_reload() {
    for flavor in FLAVORS {
        assert_policies_survive(policy_config(flavor), |server| {
            redis::cmd("DEBUG")
                .arg("RELOAD")
                .exec(&mut server.conn())
                .expect("DEBUG RELOAD");
            server
        });
    }
}

/// On Redis 7.0 without `policies-in-rdb yes`, RL.POLICY SET is refused (policies would
/// not survive a restart) and the module's RDB files load without the module as before;
/// Valkey needs no opt-in.
#[test]
fn redis_7_0_refuses_policies_unless_they_go_into_the_rdb() {
    for flavor in FLAVORS {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let set = redis::cmd("RL.POLICY")
            .arg(&["SET", "api", "5", "1m"])
            .clone();
        match flavor {
            Flavor::Redis => {
                assert_eq!(error_text(&mut con, &set), NOT_PERSISTED);
                let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
                assert_eq!(pong, "PONG");
                assert_eq!(policy_list(&mut con), Vec::<Vec<u8>>::new());
                assert_eq!(policy_get(&mut con, b"api"), None);
                assert_eq!(policy_del(&mut con, b"api"), 0);
                assert_eq!(info_stat(&server, "policies"), 0);
                let call = redis::cmd("RL.HIT").arg(&["rl:k", "POLICY", "api"]).clone();
                assert_eq!(error_text(&mut con, &call), "ERR no such policy 'api'");
            }
            Flavor::Valkey => {
                policy_set(&mut con, b"api", "5 1m");
                assert_eq!(policy_del(&mut con, b"api"), 1);
            }
        }
        // The RDB holds nothing of the module but its keys: it loads without the module.
        assert!(hit(&mut con, "rl:k", &["5", "366d"]).allowed);
        let state = get_bytes(&mut con, "rl:k");
        redis::cmd("SAVE").exec(&mut con).expect("SAVE");
        let plain = server.shutdown("NOSAVE").without_module().start();
        assert_eq!(get_bytes(&mut plain.conn(), "rl:k"), state, "{flavor:?}");
        let unknown = error_text(&mut plain.conn(), &set);
        assert!(unknown.contains("unknown command"), "{flavor:?}: {unknown}");
    }
}

/// An RDB with policies needs the module to load (the server says which data type is
/// missing); without policies it needs the module only on Redis 7.0 with
/// `policies-in-rdb yes`, which writes its record into every RDB.
#[test]
fn an_rdb_needs_the_module_only_when_it_can_hold_policies() {
    for flavor in FLAVORS {
        // No policy (one defined then deleted).
        let server = policy_config(flavor).start();
        let mut con = server.conn();
        policy_set(&mut con, b"api", "5 1h");
        assert_eq!(policy_del(&mut con, b"api"), 1);
        assert!(hit(&mut con, "rl:k", &["5", "366d"]).allowed);
        let state = get_bytes(&mut con, "rl:k");
        redis::cmd("SAVE").exec(&mut con).expect("SAVE");
        let config = server.shutdown("NOSAVE").without_module();
        match flavor {
            Flavor::Valkey => {
                let plain = config.clone().start();
                assert_eq!(get_bytes(&mut plain.conn(), "rl:k"), state);
                plain.shutdown("NOSAVE");
            }
            Flavor::Redis => {
                let log = assert_fails_to_start(&config, "Redis 7.0 opted in, no policy");
                assert!(log.contains(NO_MODULE_FOR_RDB), "{flavor:?}: {log}");
            }
        }

        // With a policy.
        let mut config = config;
        config.with_module = true;
        let server = config.start();
        let mut con = server.conn();
        policy_set(&mut con, b"api", "5 1h");
        redis::cmd("SAVE").exec(&mut con).expect("SAVE");
        let config = server.shutdown("NOSAVE").without_module();
        let log = assert_fails_to_start(&config, &format!("{flavor:?} with a policy"));
        assert!(log.contains(NO_MODULE_FOR_RDB), "{flavor:?}: {log}");
        let mut config = config;
        config.with_module = true;
        let server = config.start();
        assert_eq!(
            all_policies(&server),
            vec![(b"api".to_vec(), words("5 1h ALGO fixed MODE enforce"))],
            "{flavor:?}"
        );
        assert_eq!(get_bytes(&mut server.conn(), "rl:k"), state, "{flavor:?}");
    }
}

#[test]
fn replicas_get_policies_refuse_to_change_them_and_keep_them_when_promoted() {
    for flavor in FLAVORS {
        let primary = policy_config(flavor).start();
        let w = window_clear_of_edges(&mut primary.conn());
        let mut con = primary.conn();
        policy_set(&mut con, b"api", &format!("5 {}", minutes(w)));
        policy_set(&mut con, b"login", "3 15m");
        policy_set(&mut con, b"shadow", "1 1h ALGO gcra MODE shadow");
        policy_set(&mut con, b"bin\0\xff", "2 2h");
        policy_set(&mut con, b"to-delete", "1 1h");
        let key = "rl:{203.0.113.7}:GET:/home";
        for _ in 0..3 {
            assert!(hit_policy(&mut con, key, b"api").allowed);
        }

        // Defined before the replica attached: the full sync brings them.
        let replica = attach_replica(&primary, policy_config(flavor));
        let before = all_policies(&primary);
        assert_eq!(before.len(), 5);
        assert_eq!(all_policies(&replica), before, "{flavor:?} full sync");
        assert_eq!(info_stat(&replica, "policies"), 5, "{flavor:?}");

        // Changed after: the changes are propagated.
        policy_set(&mut con, b"late", "2 1h ALGO token BURST 4");
        policy_set(&mut con, b"login", "2 30m MODE shadow");
        assert_eq!(policy_del(&mut con, b"to-delete"), 1);
        assert_eq!(policy_del(&mut con, b"never"), 0);
        wait_for_replicas(&mut con, 1);
        let after = all_policies(&primary);
        let names: Vec<&[u8]> = after.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(
            names,
            [&b"api"[..], b"bin\0\xff", b"late", b"login", b"shadow"],
            "{flavor:?}"
        );
        assert_eq!(all_policies(&replica), after, "{flavor:?} propagated");

        // A client may not change the replica's policies.
        let mut rcon = replica.conn();
        for args in [
            &["SET", "new", "1", "1h"][..],
            &["SET", "api", "1", "1h"],
            &["DEL", "api"],
            &["DEL", "never"],
        ] {
            let cmd = redis::cmd("RL.POLICY").arg(args).clone();
            assert_eq!(error_text(&mut rcon, &cmd), READONLY, "{flavor:?} {args:?}");
        }
        assert_eq!(all_policies(&replica), after, "{flavor:?} unchanged");

        // Reads through a policy work on the replica, on the replicated state.
        let peek = through(&mut rcon, "RL.PEEK", key, b"api", &[]);
        assert_eq!(
            (
                peek.allowed,
                peek.limit,
                peek.remaining,
                peek.retry_after_ms
            ),
            (true, 5, 1, 0),
            "{flavor:?}"
        );
        let peek = through(&mut rcon, "RL.PEEK", key, b"api", &["COST", "3"]);
        assert!(!peek.allowed, "{flavor:?}: 3 more than the 2 left");
        let write = redis::cmd("RL.HIT").arg(&[key, "POLICY", "api"]).clone();
        let error = error_text(&mut rcon, &write);
        assert!(error.starts_with("READONLY"), "{flavor:?}: {error}");

        // Promoted, it keeps the policies, enforces them and accepts changes.
        redis::cmd("REPLICAOF")
            .arg(&["NO", "ONE"])
            .exec(&mut rcon)
            .expect("REPLICAOF NO ONE");
        drop(primary);
        assert_eq!(all_policies(&replica), after, "{flavor:?} promoted");
        for remaining in [1, 0] {
            let reply = hit_policy(&mut rcon, key, b"api");
            assert_eq!(
                (reply.allowed, reply.remaining),
                (true, remaining),
                "{flavor:?}"
            );
        }
        assert!(!hit_policy(&mut rcon, key, b"api").allowed, "{flavor:?}");
        let shadow = hit_policy(&mut rcon, "rl:new", b"login");
        assert!(shadow.allowed, "{flavor:?}");
        policy_set(&mut rcon, b"new", &format!("1 {}", minutes(w)));
        assert_eq!(policy_del(&mut rcon, b"to-delete"), 0);
        assert_eq!(policy_del(&mut rcon, b"late"), 1);
        assert!(hit_policy(&mut rcon, "rl:n", b"new").allowed);
        assert!(!hit_policy(&mut rcon, "rl:n", b"new").allowed);
        assert_eq!(
            rl_stats(&mut rcon, Some(b"new")),
            pairs(&[
                ("hits", 2),
                ("allowed", 1),
                ("denied", 1),
                ("shadow_denied", 0)
            ]),
        );
    }
}

/// A server that becomes a replica holds exactly its primary's policies afterwards, its
/// own dropped, whether the primary has policies or none.
#[test]
fn a_server_that_becomes_a_replica_takes_exactly_its_primarys_policies() {
    // (flavor, primary has policies, primary's, the replica's), checked once all ran.
    let mut outcomes = Vec::new();
    for flavor in FLAVORS {
        for primary_has_policies in [true, false] {
            let primary = policy_config(flavor).start();
            if primary_has_policies {
                policy_set(&mut primary.conn(), b"kept", "5 1h");
            }
            let server = policy_config(flavor).start();
            let mut con = server.conn();
            policy_set(&mut con, b"stale", "1 1h");
            policy_set(&mut con, b"kept", "9 9h MODE shadow");
            redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(primary.port())
                .exec(&mut con)
                .expect("REPLICAOF");
            wait_for_link(&server);
            let on_primary = readable(&all_policies(&primary));
            let on_replica = readable(&all_policies(&server));
            assert_eq!(
                info_stat(&server, "policies"),
                on_replica.len() as i64,
                "{flavor:?}"
            );
            outcomes.push((flavor, primary_has_policies, on_primary, on_replica));
        }
    }
    let expected: Vec<_> = outcomes
        .iter()
        .map(|(flavor, has, on_primary, _)| (*flavor, *has, on_primary.clone(), on_primary.clone()))
        .collect();
    assert_eq!(
        outcomes, expected,
        "(flavor, primary has policies, the primary's, the replica's after the sync)"
    );
}

/// A policy defined without ALGO takes the default algorithm of the server it was defined
/// on, when it was defined; replicas and the AOF must keep that algorithm, whatever their
/// own default when they replay the definition.
#[test]
fn a_policy_keeps_the_algorithm_it_was_defined_with_on_replicas_and_after_restart() {
    let gcra = Some(words("5 1h ALGO gcra MODE enforce"));
    // (flavor, on the replica, on the primary after an AOF restart), checked once both ran.
    let mut outcomes = Vec::new();
    for flavor in FLAVORS {
        let primary = policy_config(flavor).arg("appendonly", "yes").start();
        let replica = attach_replica(&primary, policy_config(flavor));
        let mut con = primary.conn();
        redis::cmd("CONFIG")
            .arg(&["SET", "ratelimit.default-algorithm", "gcra"])
            .exec(&mut con)
            .expect("CONFIG SET");
        policy_set(&mut con, b"p", "5 1h");
        assert_eq!(
            policy_get(&mut con, b"p"),
            gcra,
            "{flavor:?} on the primary"
        );
        wait_for_replicas(&mut con, 1);
        let on_replica = policy_get(&mut replica.conn(), b"p");
        // CONFIG SET is not saved: the restarted primary has its default back.
        let restarted = primary.shutdown("NOSAVE").start();
        let after_restart = policy_get(&mut restarted.conn(), b"p");
        outcomes.push((flavor, on_replica, after_restart));
    }
    let expected: Vec<_> = FLAVORS
        .iter()
        .map(|&f| (f, gcra.clone(), gcra.clone()))
        .collect();
    assert_eq!(
        outcomes, expected,
        "(flavor, on the replica, on the primary after an AOF restart)"
    );
}
