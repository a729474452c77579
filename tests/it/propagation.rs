//! Propagation that cannot fail silently. The module carries every effect
//! to replicas and the AOF as `SET key value PXAT ms` or `DEL key`; a server where
//! `rename-command` took one of them away would let the module write without propagating,
//! so the module refuses to load there, naming the command. `CONFIG`, which `RL.POLICY SET`
//! asks whether an AOF rewrite keeps policies, may be renamed away (operators often do):
//! the module loads, and a policy it cannot vouch for is refused with an error.

use redis::Connection;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::policy::{policy_cmd, policy_config};
use testkit::{each_flavor, error_text, module_path, Flavor, ServerConfig};

/// The log line of a refused load, up to the command's name.
fn refusal(command: &str) -> String {
    format!("ratelimit: cannot load: the command {command} is missing")
}

/// Starts `flavor` with the module and `args`, expecting it to exit because the module
/// refused to load; returns the server's log.
fn start_expecting_exit(flavor: Flavor, args: &[&str]) -> String {
    let dir = tempfile::Builder::new()
        .prefix("rl-test-")
        .tempdir()
        .expect("temp dir");
    let log = dir.path().join("server.log");
    let port = testkit::free_port();
    let mut child = Command::new(flavor.binary())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--logfile")
        .arg(&log)
        .args(["--save", "", "--appendonly", "no"])
        .args(args)
        .arg("--loadmodule")
        .arg(module_path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        status.is_some_and(|s| !s.success()),
        "{flavor:?} {args:?}: the server should have refused to start ({status:?}); log:\n{text}"
    );
    text
}

#[test]
fn a_server_without_set_or_del_refuses_the_module_at_startup() {
    each_flavor(|flavor| {
        for command in ["SET", "DEL"] {
            let renamed = ["--rename-command", command, ""];
            let log = start_expecting_exit(flavor, &renamed);
            assert!(
                log.contains(&refusal(command)),
                "{flavor:?} without {command}: the log does not name it:\n{log}"
            );
            // Renamed, not removed: the module propagates the name SET, which is gone.
            let elsewhere = ["--rename-command", command, "RL-RENAMED-CMD"];
            let log = start_expecting_exit(flavor, &elsewhere);
            assert!(log.contains(&refusal(command)), "{flavor:?}:\n{log}");
        }
    });
}

#[test]
fn module_load_at_run_time_refuses_without_set_and_writes_nothing() {
    each_flavor(|flavor| {
        let server = renamed_away(ServerConfig::new(flavor).without_module(), "SET")
            .arg("enable-module-command", "yes")
            .start();
        let mut con = server.conn();
        let load = redis::cmd("MODULE")
            .arg("LOAD")
            .arg(module_path().to_string_lossy().as_ref())
            .clone();
        let error = error_text(&mut con, &load);
        assert!(error.starts_with("ERR"), "{flavor:?}: {error}");
        let modules = crate::replication::loaded_modules(&server);
        assert!(
            !modules.contains(&"ratelimit".to_string()),
            "{flavor:?}: {modules:?}"
        );
        let unknown = error_text(&mut con, redis::cmd("RL.HIT").arg(&["k", "5", "1m"]));
        assert!(unknown.contains("unknown command"), "{flavor:?}: {unknown}");
        let keys: i64 = redis::cmd("DBSIZE").query(&mut con).expect("DBSIZE");
        assert_eq!(keys, 0, "{flavor:?}");
        let log = server
            .config
            .dir()
            .join(format!("server-{}.log", server.port()));
        let text = std::fs::read_to_string(log).unwrap_or_default();
        assert!(text.contains(&refusal("SET")), "{flavor:?}:\n{text}");
    });
}

/// `config` with `--rename-command <command> ""`: the command is gone.
fn renamed_away(mut config: ServerConfig, command: &str) -> ServerConfig {
    config
        .args
        .extend(["--rename-command", command, ""].map(String::from));
    config
}

fn policy_set(con: &mut Connection) -> redis::RedisResult<String> {
    policy_cmd(&["SET", "api", "5", "1m"]).query(con)
}

/// A server whose policies persist (see [`policy_config`]), without `CONFIG`.
fn without_config(flavor: Flavor) -> ServerConfig {
    renamed_away(policy_config(flavor), "CONFIG")
}

#[test]
fn without_config_the_module_loads_and_refuses_policies_it_cannot_vouch_for() {
    let cannot_tell = "ERR cannot tell whether policies survive an AOF rewrite: CONFIG GET \
                       aof-use-rdb-preamble failed (is CONFIG renamed?)";
    each_flavor(|flavor| {
        // AOF without its RDB preamble: a rewrite would drop policies, and without CONFIG
        // the module cannot see that. Before, it took the failed CONFIG call for "fine".
        let server = without_config(flavor)
            .arg("appendonly", "yes")
            .arg("aof-use-rdb-preamble", "no")
            .start();
        let mut con = server.conn();
        let set = policy_cmd(&["SET", "api", "5", "1m"]);
        assert_eq!(error_text(&mut con, &set), cannot_tell, "{flavor:?}");
        let names: Vec<String> = redis::cmd("RL.POLICY")
            .arg("LIST")
            .query(&mut con)
            .expect("RL.POLICY LIST");
        assert!(names.is_empty(), "{flavor:?}: {names:?}");
        // Keys go through SET and DEL, which are there: they work.
        let hit = testkit::hit(&mut con, "rl:k", &["5", "1m"]);
        assert!(hit.allowed, "{flavor:?}");
        drop(server);

        // The AOF off (read without CONFIG): nothing to vouch for, so policies work.
        let server = without_config(flavor).start();
        let mut con = server.conn();
        assert_eq!(policy_set(&mut con).as_deref(), Ok("OK"), "{flavor:?}");
    });
}

#[test]
fn without_setrange_a_renewal_is_propagated_whole_and_the_aof_still_agrees() {
    each_flavor(|flavor| {
        // SETRANGE gone: the module still loads (SET and DEL are there) and propagates
        // every write as SET, also a renewal of a large lease key it would otherwise send
        // as a patch. The AOF then holds those SETs, and a restart on it gives the same
        // bytes and expiry.
        let server = renamed_away(ServerConfig::new(flavor), "SETRANGE")
            .arg("appendonly", "yes")
            .start();
        let mut con = server.conn();
        let mut ids: Vec<Vec<u8>> = Vec::new();
        for _ in 0..100 {
            let reply: Vec<redis::Value> = redis::cmd("RL.ACQUIRE")
                .arg(&["big", "1000", "1h"])
                .query(&mut con)
                .expect("RL.ACQUIRE");
            match reply.get(3) {
                Some(redis::Value::BulkString(id)) => ids.push(id.clone()),
                other => panic!("{flavor:?}: no id in {other:?}"),
            }
        }
        let size: i64 = redis::cmd("STRLEN")
            .arg("big")
            .query(&mut con)
            .expect("STRLEN");
        assert!(size >= 1024, "{flavor:?}: {size} bytes, enough for a patch");
        for (n, id) in ids.iter().enumerate() {
            let renewed: i64 = redis::cmd("RL.RENEW")
                .arg("big")
                .arg(id)
                .arg(format!("{}s", 7_200 + n))
                .query(&mut con)
                .expect("RL.RENEW");
            assert_eq!(renewed, 1, "{flavor:?}");
        }
        let read = |con: &mut Connection| -> (Vec<u8>, i64) {
            let value: Vec<u8> = redis::cmd("GET").arg("big").query(con).expect("GET");
            let end: i64 = redis::cmd("PEXPIRETIME")
                .arg("big")
                .query(con)
                .expect("PEXPIRETIME");
            (value, end)
        };
        let before = read(&mut con);
        drop(con);
        let server = server.restart_on_the_aof();
        assert_eq!(read(&mut server.conn()), before, "{flavor:?}");
    });
}
