//! TLS to Redis (`rediss://`): decisions pass with the CA given, with a client certificate
//! where the server asks for one, and under `tls_server_name` where the certificate names
//! another host; a wrong CA or a missing client certificate leaves the gateway not ready and
//! each rule failing as its `on_redis_failure` says; `--check-config` refuses the TLS files
//! that cannot be used. On every flavour whose server is built with TLS (Debian's Redis
//! 7.0, and the Redis 8.6 and Valkey 9.1 of `scripts/newer-servers.sh`; PyPI's Valkey 8.1
//! has none and is skipped, saying so); the certificates are made by `openssl` for each
//! test.

use std::time::Duration;
use testkit::gateway::*;
use testkit::tls::{each_tls_flavor, tls_server, Pki};

const RULES: &str = r#"
[[rule]]
name = "strict"
path = "/strict/**"
limits = ["100/1h"]
on_redis_failure = "closed"

[[rule]]
name = "lenient"
path = "/open/**"
limits = ["100/1h"]
on_redis_failure = "open"
"#;

/// How long a probe of Redis may take to be seen on `/readyz` (a debug build, busy).
const POLL: Duration = Duration::from_secs(30);

/// `[redis]` on the TLS port with `extra` lines.
fn rediss(port: u16, extra: &str) -> String {
    format!("[redis]\nurl = \"rediss://127.0.0.1:{port}\"\ndeadline_ms = 1000\n{extra}\n{RULES}")
}

fn ca_line(pki: &Pki, name: &str) -> String {
    format!("tls_ca_file = \"{}\"\n", pki.toml_path(name))
}

fn client_lines(pki: &Pki) -> String {
    format!(
        "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
        pki.toml_path("client.pem"),
        pki.toml_path("client.key")
    )
}

/// Waits until `/readyz` says 200, then asserts two decisions counted in Redis.
fn assert_decides(gateway: &Gateway, redis: &Server, what: &str) {
    wait_until(POLL, &format!("{what}: /readyz answers 200"), || {
        gateway.admin_get("/readyz").status == 200
    });
    for expected in [99, 98] {
        let resp = gateway.get("/strict/x");
        assert_eq!(resp.status, 200, "{what}: {resp:?}");
        assert_eq!(resp.remaining(), expected, "{what}: {resp:?}");
        assert!(resp.fail_open_reason().is_none(), "{what}: {resp:?}");
    }
    assert_eq!(hit_calls(redis), 2, "{what}: the hits reached this server");
}

/// Waits until a probe of Redis has failed, then asserts what a failing Redis means: not
/// ready, the strict route closed, the lenient one open.
fn assert_cannot_decide(gateway: &Gateway, what: &str) {
    gateway.wait_redis_unreachable(POLL, what);
    assert_eq!(gateway.admin_get("/readyz").status, 503, "{what}");
    let resp = gateway.get("/strict/x");
    assert_eq!(resp.status, 503, "{what}: {resp:?}");
    let resp = gateway.get("/open/x");
    assert_eq!(resp.status, 200, "{what}: {resp:?}");
    assert!(resp.fail_open_reason().is_some(), "{what}: {resp:?}");
}

#[test]
fn decisions_pass_over_tls_with_the_ca_given_and_fail_with_another() {
    each_tls_flavor(|flavor| {
        let pki = Pki::new();
        let (redis, tls_port) = tls_server(flavor, &pki, "server", false);
        let upstream = Upstream::start();
        let gateway = Gateway::start(
            &upstream.server_line(),
            &rediss(tls_port, &ca_line(&pki, "ca.pem")),
        );
        assert_decides(&gateway, &redis, "the CA that signed the server");
        drop(gateway);

        let other = Gateway::start(
            &upstream.server_line(),
            &rediss(tls_port, &ca_line(&pki, "other-ca.pem")),
        );
        assert_cannot_decide(&other, "a CA that did not sign the server");
        assert_eq!(hit_calls(&redis), 2, "{flavor:?}: nothing reached Redis");
    });
}

#[test]
fn a_server_that_asks_for_a_client_certificate_gets_the_one_configured() {
    each_tls_flavor(|flavor| {
        let pki = Pki::new();
        let (redis, tls_port) = tls_server(flavor, &pki, "server", true);
        let upstream = Upstream::start();
        let without = Gateway::start(
            &upstream.server_line(),
            &rediss(tls_port, &ca_line(&pki, "ca.pem")),
        );
        assert_cannot_decide(&without, "no client certificate");
        drop(without);

        let with = Gateway::start(
            &upstream.server_line(),
            &rediss(
                tls_port,
                &format!("{}{}", ca_line(&pki, "ca.pem"), client_lines(&pki)),
            ),
        );
        assert_decides(&with, &redis, "the client certificate given");
    });
}

#[test]
fn tls_server_name_checks_the_certificate_against_the_name_it_gives() {
    each_tls_flavor(|flavor| {
        let pki = Pki::new();
        // The certificate names redis.test only; the gateway reaches it at 127.0.0.1.
        let (redis, tls_port) = tls_server(flavor, &pki, "named", false);
        let upstream = Upstream::start();
        let by_address = Gateway::start(
            &upstream.server_line(),
            &rediss(tls_port, &ca_line(&pki, "ca.pem")),
        );
        assert_cannot_decide(&by_address, "a certificate that does not name 127.0.0.1");
        drop(by_address);

        let by_name = Gateway::start(
            &upstream.server_line(),
            &rediss(
                tls_port,
                &format!(
                    "{}tls_server_name = \"redis.test\"\n",
                    ca_line(&pki, "ca.pem")
                ),
            ),
        );
        assert_decides(&by_name, &redis, "tls_server_name = redis.test");
    });
}

/// `--check-config` on `redis_lines` in a file of the directory `dir`.
fn checked_in(dir: &std::path::Path, redis_lines: &str) -> (bool, String) {
    let path = dir.join("rules.toml");
    let head = "[server]\nlisten = \"127.0.0.1:1\"\nupstream = \"http://127.0.0.1:2\"\n";
    std::fs::write(&path, format!("{head}[redis]\n{redis_lines}")).expect("write the file");
    let output = check_config(&path);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.success(), stderr)
}

#[test]
fn check_config_refuses_tls_files_that_cannot_be_used_naming_the_setting_and_path() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let url = "url = \"rediss://127.0.0.1:6380\"\n";
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello\n").expect("write");
    let missing = dir.path().join("missing.pem");
    let cases = [
        (
            format!("tls_ca_file = \"{}\"\n", missing.display()),
            format!("tls_ca_file '{}': cannot read it", missing.display()),
        ),
        (
            format!("tls_ca_file = \"{}\"\n", not_pem.display()),
            format!(
                "tls_ca_file '{}': no PEM certificate in it",
                not_pem.display()
            ),
        ),
        (
            format!(
                "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
                pki.toml_path("client.pem"),
                pki.toml_path("client.pem")
            ),
            format!(
                "tls_key_file '{}': no PEM private key",
                pki.toml_path("client.pem")
            ),
        ),
        (
            format!("tls_cert_file = \"{}\"\n", pki.toml_path("client.pem")),
            "tls_cert_file needs tls_key_file".to_string(),
        ),
    ];
    for (lines, expected) in cases {
        let (passed, stderr) = checked_in(dir.path(), &format!("{url}{lines}"));
        assert!(!passed, "passed: {lines}");
        assert!(
            stderr.contains(&expected),
            "{lines}: '{stderr}' lacks '{expected}'"
        );
    }
    let (passed, stderr) = checked_in(
        dir.path(),
        &format!("{url}{}{}", ca_line(&pki, "ca.pem"), client_lines(&pki)),
    );
    assert!(passed, "{stderr}");
    // A relative path is the file's neighbour, wherever the gateway is started.
    std::fs::copy(pki.path("ca.pem"), dir.path().join("ca.pem")).expect("copy the CA");
    let (passed, stderr) = checked_in(dir.path(), &format!("{url}tls_ca_file = \"ca.pem\"\n"));
    assert!(passed, "{stderr}");
}
