//! Policies survive every way a server saves and loads its data, against real Redis and
//! Valkey servers: `SAVE` and a restart, an AOF restart, an AOF rewrite (with its RDB
//! preamble; without it policies are refused, since the rewrite would drop them) and
//! `DEBUG RELOAD`. An RDB needs the module to load only when it can hold policies.
//!
//! On Redis 7.0 the module is loaded with `policies-in-rdb yes` (without it policies are
//! refused, see [`redis_7_0_refuses_policies_unless_they_go_into_the_rdb`]).

use testkit::policy::*;
use testkit::*;

use redis::Connection;
use std::panic::AssertUnwindSafe;

const HOUR_MS: i64 = 3_600_000;

const NOT_PERSISTED: &str = "ERR policies would not survive a restart: on Redis 7.0 load the \
    module with 'policies-in-rdb yes' (its RDB files then need the module to load)";
/// What the server logs when an RDB holds policies and the module is not loaded.
const NO_MODULE_FOR_RDB: &str = "no matching module 'rl-policy'";

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
        server.info_stat("policies"),
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
fn policies_survive_save_and_restart() {
    each_flavor(|flavor| {
        assert_policies_survive(policy_config(flavor), |server| {
            // Policy changes count as changes for `save` rules.
            let changes = server.info_field("persistence", "rdb_changes_since_last_save");
            assert_ne!(changes.as_deref(), Some("0"), "{flavor:?}");
            server.save_and_restart()
        });
    });
}

#[test]
fn policies_survive_an_aof_restart() {
    each_flavor(|flavor| {
        let config = policy_config(flavor).arg("appendonly", "yes");
        assert_policies_survive(config, Server::restart_on_the_aof);
    });
}

/// Half the changes in the rewritten AOF's base (with its RDB preamble, the default), the
/// rest appended after it, deletions and redefinitions included.
#[test]
fn policies_survive_an_aof_rewrite_and_restart() {
    each_flavor(|flavor| {
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
    });
}

/// `aof-use-rdb-preamble no`: the rewritten base is plain commands.
/// An AOF rewrite without the RDB preamble writes commands for keys only, and policies are
/// no keys: with the AOF on and the preamble off, RL.POLICY SET is refused instead of
/// losing the policy at the next rewrite; with the preamble (the default), it survives.
#[test]
fn policies_are_refused_where_an_aof_rewrite_would_drop_them() {
    each_flavor(|flavor| {
        let server = policy_config(flavor)
            .arg("appendonly", "yes")
            .arg("aof-use-rdb-preamble", "no")
            .start();
        let mut con = server.conn();
        let set = policy_cmd(&["SET", "api", "5", "1m"]);
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
    });
}

#[test]
fn policies_survive_debug_reload() {
    each_flavor(|flavor| {
        assert_policies_survive(policy_config(flavor), Server::debug_reload);
    });
}

/// On Redis 7.0 without `policies-in-rdb yes`, RL.POLICY SET is refused (policies would
/// not survive a restart) and the module's RDB files load without the module as before;
/// Redis 7.2 and newer and Valkey need no opt-in.
#[test]
fn redis_7_0_refuses_policies_unless_they_go_into_the_rdb() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let set = policy_cmd(&["SET", "api", "5", "1m"]);
        if flavor.needs_policies_opt_in() {
            assert_eq!(error_text(&mut con, &set), NOT_PERSISTED);
            let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
            assert_eq!(pong, "PONG");
            assert_eq!(policy_list(&mut con), Vec::<Vec<u8>>::new());
            assert_eq!(policy_get(&mut con, b"api"), None);
            assert_eq!(policy_del(&mut con, b"api"), 0);
            assert_eq!(server.info_stat("policies"), 0);
            let call = redis::cmd("RL.HIT").arg(&["rl:k", "POLICY", "api"]).clone();
            assert_eq!(error_text(&mut con, &call), "ERR no such policy 'api'");
        } else {
            policy_set(&mut con, b"api", "5 1m");
            assert_eq!(policy_del(&mut con, b"api"), 1);
        }
        // The RDB holds nothing of the module but its keys: it loads without the module.
        assert!(hit(&mut con, "rl:k", &["5", "366d"]).allowed);
        let state = get_bytes(&mut con, "rl:k");
        redis::cmd("SAVE").exec(&mut con).expect("SAVE");
        let plain = server.shutdown("NOSAVE").without_module().start();
        assert_eq!(get_bytes(&mut plain.conn(), "rl:k"), state, "{flavor:?}");
        let unknown = error_text(&mut plain.conn(), &set);
        assert!(unknown.contains("unknown command"), "{flavor:?}: {unknown}");
    });
}

/// An explicit `policies-in-rdb no` on Redis 7.0 refuses policies just as the default does
/// (`make run` passes `yes`, the default stays `no`: see the README); Valkey and Redis 7.2
/// and newer, which save them only when there are some, take them whatever the config says.
#[test]
fn an_explicit_no_on_redis_7_0_refuses_policies_too() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor)
            .module_arg("policies-in-rdb")
            .module_arg("no")
            .start();
        let mut con = server.conn();
        let set = policy_cmd(&["SET", "api", "5", "1m"]);
        if flavor.needs_policies_opt_in() {
            assert_eq!(error_text(&mut con, &set), NOT_PERSISTED);
            assert_eq!(policy_list(&mut con), Vec::<Vec<u8>>::new());
        } else {
            policy_set(&mut con, b"api", "5 1m");
            assert_eq!(policy_list(&mut con), vec![b"api".to_vec()]);
        }
    });
}

/// An RDB with policies needs the module to load (the server says which data type is
/// missing); without policies it needs the module only on Redis 7.0 with
/// `policies-in-rdb yes`, which writes its record into every RDB.
#[test]
fn an_rdb_needs_the_module_only_when_it_can_hold_policies() {
    each_flavor(|flavor| {
        // No policy (one defined then deleted).
        let server = policy_config(flavor).start();
        let mut con = server.conn();
        policy_set(&mut con, b"api", "5 1h");
        assert_eq!(policy_del(&mut con, b"api"), 1);
        assert!(hit(&mut con, "rl:k", &["5", "366d"]).allowed);
        let state = get_bytes(&mut con, "rl:k");
        redis::cmd("SAVE").exec(&mut con).expect("SAVE");
        let config = server.shutdown("NOSAVE").without_module();
        if flavor.needs_policies_opt_in() {
            let log = assert_fails_to_start(&config, "Redis 7.0 opted in, no policy");
            assert!(log.contains(NO_MODULE_FOR_RDB), "{flavor:?}: {log}");
        } else {
            let plain = config.clone().start();
            assert_eq!(get_bytes(&mut plain.conn(), "rl:k"), state);
            plain.shutdown("NOSAVE");
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
    });
}
