//! A panic inside a handler must answer an error and leave the server serving.
use testkit::*;

#[test]
fn a_panicking_handler_answers_an_error_logs_it_and_the_server_keeps_serving() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor)
            .module_arg("enable-testing-commands")
            .start();
        let mut con = server.conn();
        let before = hit(&mut con, "kept", &["10", "1h"]);
        let err = error_text(&mut con, &redis::cmd("RL.TESTING.PANIC"));
        assert!(
            err.starts_with("ERR internal error in the ratelimit module"),
            "{flavor:?}: {err}"
        );
        let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
        assert_eq!(pong, "PONG");
        let after = hit(&mut con, "kept", &["10", "1h"]);
        assert_eq!(
            after.remaining,
            before.remaining - 1,
            "{flavor:?}: state kept"
        );
        let log = std::fs::read_to_string(
            server
                .config
                .dir()
                .join(format!("server-{}.log", server.port())),
        )
        .expect("log file");
        assert!(
            log.contains("ratelimit: panic: ") && log.contains("RL.TESTING.PANIC was called"),
            "{flavor:?}: the panic hook logs through the server"
        );
    });
}

#[test]
fn testing_commands_are_absent_unless_asked_for() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let err = error_text(&mut server.conn(), &redis::cmd("RL.TESTING.PANIC"));
        assert!(err.starts_with("ERR unknown command"), "{flavor:?}: {err}");
    });
}
