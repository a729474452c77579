//! What the server logs about the module from its load to a clean shutdown: nothing but
//! the two warnings the operations guide explains (Troubleshooting, "Warnings in the
//! server log"), each only on the servers it names:
//!
//! - at load, redis-module's "Skip register defrag callbacks" on servers without
//!   `RedisModule_RegisterDefragCallbacks` (every one before Redis 8.0, Valkey too): the
//!   crate logs it before the module's own code runs, whatever the module registers;
//! - at shutdown, Valkey 9.1's "Failed to unload module ratelimit" because of the policies'
//!   data type: Valkey never unloads a module that registered one, and the type is what
//!   carries the policies in the RDB (saved before that line, and loaded at the next start).

use testkit::{each_flavor, hit, Flavor, ServerConfig};

const DEFRAG_WARNING: &str = "<ratelimit> Skip register defrag callbacks as defrag callbacks \
                              is not supported on the current Redis server.";
const UNLOAD_WARNING: &str = "Failed to unload module ratelimit: the module exports one or \
                              more module-side data types, can't unload";

/// The warning lines (`#`) of a log, without their pid and time.
fn warnings(log: &str) -> Vec<&str> {
    log.lines()
        .filter_map(|line| line.split_once(" # ").map(|(_, text)| text))
        .collect()
}

#[test]
fn the_module_logs_only_the_documented_warnings_from_load_to_shutdown() {
    each_flavor(|flavor| {
        // Redis 7.0 keeps policies in the RDB only when asked.
        let config = ServerConfig::new(flavor);
        let server = if flavor.needs_policies_opt_in() {
            config.module_arg("policies-in-rdb").module_arg("yes")
        } else {
            config
        }
        .start();
        let (major, minor) = flavor.version();
        let mut con = server.conn();
        let set: String = redis::cmd("RL.POLICY")
            .arg(&["SET", "api", "5", "1m"])
            .query(&mut con)
            .expect("RL.POLICY SET");
        assert_eq!(set, "OK");
        assert!(hit(&mut con, "rl:log", &["5", "1h"]).allowed);
        let log_path = server
            .config
            .dir()
            .join(format!("server-{}.log", server.port()));
        // SHUTDOWN saves (the policies' record too) before the server unloads anything.
        let config = server.shutdown("SAVE");
        let log = std::fs::read_to_string(&log_path).expect("the server log");
        let has_defrag_callbacks = flavor == Flavor::Redis && major >= 8;
        let unloads_at_exit = flavor == Flavor::Valkey && (major, minor) >= (9, 1);
        let expected: Vec<&str> = [
            (!has_defrag_callbacks).then_some(DEFRAG_WARNING),
            unloads_at_exit.then_some(UNLOAD_WARNING),
        ]
        .into_iter()
        .flatten()
        .collect();
        let about_the_module: Vec<&str> = warnings(&log)
            .into_iter()
            .filter(|w| w.contains("ratelimit"))
            .collect();
        assert_eq!(
            about_the_module, expected,
            "{flavor:?} {major}.{minor}: the module's warnings, in order:\n{log}"
        );

        // What the shutdown saved is whole: the policy comes back with the module.
        let restarted = config.start();
        let mut con = restarted.conn();
        let names: Vec<String> = redis::cmd("RL.POLICY")
            .arg("LIST")
            .query(&mut con)
            .expect("RL.POLICY LIST");
        assert_eq!(names, vec!["api".to_string()], "{flavor:?}");
    });
}
