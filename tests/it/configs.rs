//! Module configs: set at load time and at run time, refused when invalid, and followed by
//! the next call.
use testkit::*;

fn config_get(server: &Server, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(&mut server.conn())
        .expect("CONFIG GET");
    assert_eq!(pair.len(), 2, "{name}: {pair:?}");
    pair[1].clone()
}

fn config_set(server: &Server, name: &str, value: &str) -> Result<(), String> {
    let mut con = server.conn();
    match redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query::<redis::Value>(&mut con)
    {
        Ok(redis::Value::Okay) => Ok(()),
        Ok(redis::Value::ServerError(err)) => Err(format!("{err:?}")),
        Ok(other) => Err(format!("{other:?}")),
        Err(err) => Err(err.to_string()),
    }
}

/// The algorithm id a stored value was written with: `None` for a plain fixed count.
fn stored_algorithm(server: &Server, key: &str) -> Option<u8> {
    let value = get_bytes(&mut server.conn(), key).expect("stored");
    match value[0] {
        b'1'..=b'9' => None,
        0x01 => Some(value[1]),
        tag if tag >= 0xF8 => Some(if tag & 0b100 != 0 { 5 } else { 4 }),
        tag => panic!("unknown form {tag:#x}"),
    }
}

#[test]
fn defaults_are_listed_under_the_module_prefix() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        assert_eq!(config_get(&server, "ratelimit.default-algorithm"), "fixed");
        assert_eq!(
            config_get(&server, "ratelimit.max-window-ms"),
            "31622400000"
        );
        assert_eq!(config_get(&server, "ratelimit.max-log-limit"), "10000");
    });
}

#[test]
fn configs_given_at_load_time_apply() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor)
            .module_arg("default-algorithm")
            .module_arg("gcra")
            .module_arg("max-window-ms")
            .module_arg("60000")
            .module_arg("max-log-limit")
            .module_arg("20")
            .start();
        assert_eq!(config_get(&server, "ratelimit.default-algorithm"), "gcra");
        let mut con = server.conn();
        hit(&mut con, "k", &["5", "1m"]);
        assert_eq!(
            stored_algorithm(&server, "k"),
            Some(5),
            "{flavor:?}: GCRA by default"
        );
        let too_long = error_text(&mut con, redis::cmd("RL.HIT").arg("k2").arg("5").arg("61s"));
        assert_eq!(
            too_long,
            "ERR window must be at most 60000ms (ratelimit.max-window-ms)"
        );
        let log = error_text(
            &mut con,
            redis::cmd("RL.HIT")
                .arg("k3")
                .arg("21")
                .arg("1m")
                .arg("ALGO")
                .arg("log"),
        );
        assert_eq!(log, "ERR ALGO log allows a limit of at most 20");
    });
}

#[test]
fn out_of_range_values_at_load_time_refuse_the_load() {
    each_flavor(|flavor| {
        for (name, bad) in [("max-window-ms", "-5"), ("max-log-limit", "10001")] {
            let config = ServerConfig::new(flavor).module_arg(name).module_arg(bad);
            let log = config.dir().join("refused.log");
            let status = std::process::Command::new(flavor.binary())
                .args(["--port", &config.port.to_string(), "--bind", "127.0.0.1"])
                .arg("--logfile")
                .arg(&log)
                .arg("--loadmodule")
                .arg(module_path())
                .args(&config.module_args)
                .status()
                .expect("the server runs");
            assert!(!status.success(), "{flavor:?}: {name} {bad} must not load");
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(
                text.contains(&format!("ratelimit: {name} must be between")),
                "{text}"
            );
        }
    });
}

#[test]
fn config_set_applies_to_the_next_call_and_refuses_bad_values() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        hit(&mut con, "before", &["5", "1h"]);
        assert_eq!(stored_algorithm(&server, "before"), None);
        config_set(&server, "ratelimit.default-algorithm", "sliding").expect("valid");
        hit(&mut con, "after", &["5", "1h"]);
        assert_eq!(
            stored_algorithm(&server, "after"),
            Some(2),
            "{flavor:?}: sliding now"
        );

        config_set(&server, "ratelimit.max-window-ms", "1000").expect("valid");
        let err = error_text(&mut con, redis::cmd("RL.HIT").arg("k").arg("5").arg("2s"));
        assert_eq!(
            err,
            "ERR window must be at most 1000ms (ratelimit.max-window-ms)"
        );
        config_set(&server, "ratelimit.max-window-ms", "31622400000").expect("valid");
        hit(&mut con, "k", &["5", "366d"]);

        for (name, bad) in [
            ("ratelimit.default-algorithm", "leaky"),
            ("ratelimit.max-window-ms", "0"),
            ("ratelimit.max-window-ms", "316224000001"),
            ("ratelimit.max-log-limit", "0"),
            ("ratelimit.max-log-limit", "10001"),
            ("ratelimit.max-log-limit", "ten"),
        ] {
            let err = config_set(&server, name, bad).expect_err("refused");
            assert!(
                err.contains("ERR") || err.contains("CONFIG"),
                "{name} {bad}: {err}"
            );
        }
        assert_eq!(
            config_get(&server, "ratelimit.default-algorithm"),
            "sliding"
        );
        assert_eq!(config_get(&server, "ratelimit.max-log-limit"), "10000");
        let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
        assert_eq!(pong, "PONG");
    });
}
