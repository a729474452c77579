//! `aux_save`, which writes the policies into the RDB, runs under the panic guard like
//! every other callback: a panic there leaves the server serving, is logged,
//! and the RDB it was writing still loads (without policies). Without the guard, the panic
//! would unwind into the server and abort it in the middle of `SAVE`.

use testkit::{each_flavor, error_text, hit, Flavor, ServerConfig};

fn config(flavor: Flavor) -> ServerConfig {
    let config = ServerConfig::new(flavor).module_arg("enable-testing-commands");
    match flavor {
        Flavor::Redis => config.module_arg("policies-in-rdb").module_arg("yes"),
        Flavor::Valkey => config,
    }
}

#[test]
fn a_panic_while_saving_policies_leaves_the_server_serving_and_the_rdb_loadable() {
    each_flavor(|flavor| {
        let server = config(flavor).start();
        let mut con = server.conn();
        let set: String = redis::cmd("RL.POLICY")
            .arg(&["SET", "api", "5", "1m"])
            .query(&mut con)
            .expect("RL.POLICY SET");
        assert_eq!(set, "OK");
        assert!(hit(&mut con, "rl:kept", &["5", "1h"]).allowed);
        let armed: String = redis::cmd("RL.TESTING.PANIC-IN-SAVE")
            .query(&mut con)
            .expect("RL.TESTING.PANIC-IN-SAVE");
        assert_eq!(armed, "OK");
        let saved: String = redis::cmd("SAVE")
            .query(&mut con)
            .unwrap_or_else(|e| panic!("{flavor:?}: SAVE: {e}"));
        assert_eq!(saved, "OK", "{flavor:?}");
        let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
        assert_eq!(pong, "PONG", "{flavor:?}");
        let log_path = server
            .config
            .dir()
            .join(format!("server-{}.log", server.port()));
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        assert!(
            log.contains("ratelimit: panic: ")
                && log.contains("saving the policies failed (see the panic above)"),
            "{flavor:?}: the panic is logged:\n{log}"
        );

        // The RDB written meanwhile loads: the key is there, the policies are not.
        let restarted = server.shutdown("NOSAVE").start();
        let mut con = restarted.conn();
        let value: Option<String> = redis::cmd("GET")
            .arg("rl:kept")
            .query(&mut con)
            .expect("GET");
        assert_eq!(value.as_deref(), Some("1"), "{flavor:?}: the key survived");
        let names: Vec<String> = redis::cmd("RL.POLICY")
            .arg("LIST")
            .query(&mut con)
            .expect("RL.POLICY LIST");
        assert!(names.is_empty(), "{flavor:?}: {names:?}");
        // Only the next save panicked: this one saves the policy again.
        let set = redis::cmd("RL.POLICY")
            .arg(&["SET", "api", "5", "1m"])
            .clone();
        assert_eq!(set.query::<String>(&mut con).as_deref(), Ok("OK"));
        redis::cmd("SAVE").exec(&mut con).expect("SAVE");
        let again = restarted.shutdown("NOSAVE").start();
        let shown = redis::cmd("RL.POLICY").arg(&["GET", "api"]).clone();
        let shown: Option<Vec<String>> = shown.query(&mut again.conn()).expect("GET");
        assert!(shown.is_some(), "{flavor:?}: saved normally afterwards");
    });
}

#[test]
fn the_save_panic_hook_is_a_testing_command_only() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let err = error_text(&mut server.conn(), &redis::cmd("RL.TESTING.PANIC-IN-SAVE"));
        assert!(err.starts_with("ERR unknown command"), "{flavor:?}: {err}");
    });
}
