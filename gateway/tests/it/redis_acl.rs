//! An ACL user and its password: from `password_env` or `password_file` (a mounted
//! secret), never in the file; decisions pass as that user; a wrong password leaves the
//! gateway not ready; a password that cannot be read stops the start with an error naming
//! where it was looked for. No password appears in any log line or error.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::gateway::*;

const SECRET: &str = "gw-S3cret-acl-pass";
const WRONG: &str = "not-the-Pass-w0rd";
const VARIABLE: &str = "RL_TEST_REDIS_PASSWORD";

const RULES: &str = r#"
[[rule]]
name = "strict"
path = "/strict/**"
limits = ["100/1h"]
on_redis_failure = "closed"
"#;

const POLL: Duration = Duration::from_secs(30);

/// A server with the module and the ACL user `gw` (password [`SECRET`], every key and
/// command: the module's commands are in `@all`).
fn server_with_user(flavor: Flavor) -> Server {
    let server = ServerConfig::new(flavor).start();
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("gw")
        .arg("on")
        .arg(format!(">{SECRET}"))
        .arg("~*")
        .arg("+@all")
        .exec(&mut server.conn())
        .expect("ACL SETUSER");
    server
}

fn redis_lines(port: u16, extra: &str) -> String {
    format!("[redis]\nurl = \"redis://127.0.0.1:{port}\"\ndeadline_ms = 1000\n{extra}\n{RULES}")
}

/// Whether a client of `server` is logged in as `gw`.
fn gw_connected(server: &Server) -> bool {
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .expect("CLIENT LIST");
    clients.lines().any(|line| line.contains(" user=gw "))
}

fn assert_decides_as_gw(gateway: &Gateway, server: &Server, what: &str) {
    wait_until(POLL, &format!("{what}: /readyz answers 200"), || {
        gateway.admin_get("/readyz").status == 200
    });
    let resp = gateway.get("/strict/x");
    assert_eq!(resp.status, 200, "{what}: {resp:?}");
    assert_eq!(resp.remaining(), 99, "{what}: {resp:?}");
    assert!(
        gw_connected(server),
        "{what}: the gateway is logged in as gw"
    );
    assert_no_secret(&gateway.log(), what);
}

fn assert_no_secret(text: &str, what: &str) {
    for secret in [SECRET, WRONG] {
        assert!(!text.contains(secret), "{what}: a password in:\n{text}");
    }
}

#[test]
fn the_password_from_an_environment_variable() {
    each_flavor(|flavor| {
        let server = server_with_user(flavor);
        let upstream = Upstream::start();
        let gateway = Gateway::start_with_env(
            &upstream.server_line(),
            &redis_lines(
                server.port(),
                &format!("username = \"gw\"\npassword_env = \"{VARIABLE}\"\n"),
            ),
            &[(VARIABLE, SECRET)],
        );
        assert_decides_as_gw(&gateway, &server, &format!("{flavor:?} password_env"));
    });
}

#[test]
fn the_password_from_a_file_less_its_newline() {
    let server = server_with_user(Flavor::Redis);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("redis-password");
    std::fs::write(&file, format!("{SECRET}\n")).expect("write the secret");
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &upstream.server_line(),
        &redis_lines(
            server.port(),
            &format!(
                "username = \"gw\"\npassword_file = \"{}\"\n",
                file.display()
            ),
        ),
    );
    assert_decides_as_gw(&gateway, &server, "password_file");
}

#[test]
fn a_wrong_password_leaves_the_gateway_not_ready_and_unlogged() {
    let server = server_with_user(Flavor::Redis);
    let upstream = Upstream::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("redis-password");
    std::fs::write(&file, WRONG).expect("write the secret");
    let from_file = redis_lines(
        server.port(),
        &format!(
            "username = \"gw\"\npassword_file = \"{}\"\n",
            file.display()
        ),
    );
    // The same mistake written into the URL, which the gateway must not repeat either.
    let in_url = format!(
        "[redis]\nurl = \"redis://gw:{WRONG}@127.0.0.1:{}\"\ndeadline_ms = 1000\n{RULES}",
        server.port()
    );
    for (what, rest) in [("password_file", from_file), ("in the url", in_url)] {
        let gateway = Gateway::start(&upstream.server_line(), &rest);
        gateway.wait_redis_unreachable(POLL, what);
        let ready = gateway.admin_get("/readyz");
        assert_eq!(ready.status, 503, "{what}: {ready:?}");
        assert_no_secret(&ready.body, what);
        let resp = gateway.get("/strict/x");
        assert_eq!(resp.status, 503, "{what}: {resp:?}");
        assert!(!gw_connected(&server), "{what}");
        assert_no_secret(&gateway.log(), what);
    }
}

/// Runs the gateway on `rest` (after a `[server]` of free ports) and waits for it to exit,
/// which it must, within the start limit; returns its stderr.
fn failed_start(dir: &Path, rest: &str) -> String {
    let path = dir.join("rules.toml");
    let server = format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\nupstream = \"http://127.0.0.1:1\"\n",
        free_port(),
        free_port()
    );
    std::fs::write(&path, format!("{server}{rest}")).expect("write the file");
    let mut child = Command::new(gateway_binary())
        .arg("--config")
        .arg(&path)
        .env_remove(VARIABLE)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rl-gateway starts");
    let deadline = Instant::now() + START_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the gateway kept running on:\n{rest}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    assert!(!status.success(), "{stderr}");
    stderr
}

#[test]
fn a_password_that_cannot_be_read_stops_the_start_saying_where_it_was_looked_for() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stderr = failed_start(
        dir.path(),
        &format!("[redis]\nusername = \"gw\"\npassword_env = \"{VARIABLE}\"\n{RULES}"),
    );
    assert!(
        stderr.contains(&format!(
            "password_env: the environment variable {VARIABLE} is not set"
        )),
        "{stderr}"
    );
    let missing = dir.path().join("no-such-secret");
    let stderr = failed_start(
        dir.path(),
        &format!(
            "[redis]\npassword_file = \"{}\"\n{RULES}",
            missing.display()
        ),
    );
    assert!(
        stderr.contains(&format!(
            "password_file '{}': cannot read it",
            missing.display()
        )),
        "{stderr}"
    );
}
