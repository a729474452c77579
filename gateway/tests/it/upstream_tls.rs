//! `[server] upstream = "https://..."`: the gateway reaches an HTTPS upstream (rustls in
//! the test, testkit's `TlsUpstream`) in proxy mode, verifying its certificate against
//! `upstream_ca_file` and the name it is reached by (or `upstream_server_name`), with a
//! client certificate when the upstream requires one. Allowed requests pass through and
//! the limit still applies; a TLS failure is a 502, counted in
//! `rl_gateway_upstream_errors_total` and logged once per cause, not once per request.
//! `--check-config` refuses each setting's mistakes, naming the setting and the path.

use testkit::gateway::tls_upstream::TlsUpstream;
use testkit::gateway::*;
use testkit::tls::Pki;

const UPSTREAM_ERRORS: &str = "rl_gateway_upstream_errors_total";
/// The start of the line a TLS failure is logged with.
const TLS_LOGGED: &str = "upstream TLS with";

/// A gateway in front of `upstream_line` (and `tls_lines`) deciding with `redis`, three
/// requests an hour to `/api/**`.
fn gateway(redis: &Server, upstream_line: &str, tls_lines: &str) -> Gateway {
    Gateway::start(
        &format!("{upstream_line}{tls_lines}"),
        &format!(
            "{}[[rule]]\nname = \"api\"\npath = \"/api/**\"\nlimits = [\"3/1h\"]\n",
            redis_section(redis.port(), "")
        ),
    )
}

fn upstream_errors(gateway: &Gateway) -> f64 {
    gateway.metrics().value(UPSTREAM_ERRORS, &[]).unwrap_or(0.0)
}

#[test]
fn an_https_upstream_with_its_ca_answers_through_the_gateway_and_the_limit_holds() {
    let pki = Pki::new();
    let redis = Server::start(ServerConfig::new(Flavor::Redis));
    let upstream = TlsUpstream::start(&pki, "server", false);
    let gateway = gateway(
        &redis,
        &format!("upstream = \"https://localhost:{}\"\n", upstream.port),
        &format!("upstream_ca_file = \"{}\"\n", pki.toml_path("ca.pem")),
    );
    for remaining in (0..3).rev() {
        let resp = gateway.get("/api/items?x=1");
        assert_eq!(resp.status, 200, "{resp:?}");
        assert!(resp.body.starts_with("tls upstream\n"), "{resp:?}");
        assert_eq!(resp.remaining(), remaining, "{resp:?}");
    }
    let denied = gateway.get("/api/items");
    assert_eq!(denied.status, 429, "{denied:?}");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 3, "the denied request never left: {seen:?}");
    for request in &seen {
        assert_eq!(request.line, "GET /api/items?x=1 HTTP/1.1");
        // SNI is the upstream's name; Host is the client's, forwarded as it came.
        assert_eq!(request.sni.as_deref(), Some("localhost"));
        let client_host = format!("127.0.0.1:{}", gateway.port);
        assert_eq!(request.host.as_deref(), Some(client_host.as_str()));
    }
    assert_eq!(upstream_errors(&gateway), 0.0);
    assert_eq!(gateway.log_lines_with(TLS_LOGGED), 0, "{}", gateway.log());
}

#[test]
fn a_certificate_of_another_ca_is_a_502_counted_each_time_and_logged_once() {
    let pki = Pki::new();
    let redis = Server::start(ServerConfig::new(Flavor::Redis));
    let upstream = TlsUpstream::start(&pki, "server", false);
    let upstream_line = format!("upstream = \"https://127.0.0.1:{}\"\n", upstream.port);
    // The CA file names another CA; without a CA file, the system's roots, which do not
    // know the test's CA either.
    let other_ca = format!("upstream_ca_file = \"{}\"\n", pki.toml_path("other-ca.pem"));
    for tls_lines in [other_ca.as_str(), ""] {
        let gateway = gateway(&redis, &upstream_line, tls_lines);
        for _ in 0..4 {
            let resp = gateway.get("/other/path");
            assert_eq!(resp.status, 502, "{tls_lines}: {resp:?}");
        }
        assert_eq!(upstream_errors(&gateway), 4.0, "{tls_lines}");
        let log = gateway.log();
        assert_eq!(
            gateway.log_lines_with(TLS_LOGGED),
            1,
            "{tls_lines}: one line for one cause: {log}"
        );
        assert!(
            log.contains("invalid peer certificate: UnknownIssuer"),
            "{tls_lines}: {log}"
        );
    }
    assert!(upstream.seen().is_empty(), "no request got through");
}

#[test]
fn an_upstream_that_requires_a_client_certificate_refuses_without_and_accepts_with() {
    let pki = Pki::new();
    let redis = Server::start(ServerConfig::new(Flavor::Redis));
    let upstream = TlsUpstream::start(&pki, "server", true);
    let upstream_line = format!("upstream = \"https://localhost:{}\"\n", upstream.port);
    let ca = format!("upstream_ca_file = \"{}\"\n", pki.toml_path("ca.pem"));

    let without = gateway(&redis, &upstream_line, &ca);
    let refused = without.get("/x");
    assert_eq!(refused.status, 502, "{refused:?}");
    assert_eq!(upstream_errors(&without), 1.0);
    assert_eq!(without.log_lines_with(TLS_LOGGED), 1, "{}", without.log());

    let client = format!(
        "{ca}upstream_cert_file = \"{}\"\nupstream_key_file = \"{}\"\n",
        pki.toml_path("client.pem"),
        pki.toml_path("client.key")
    );
    let with = gateway(&redis, &upstream_line, &client);
    let accepted = with.get("/x");
    assert_eq!(accepted.status, 200, "{accepted:?}");
    assert_eq!(upstream_errors(&with), 0.0);
    assert_eq!(
        upstream.seen().len(),
        1,
        "only the request with a certificate"
    );
}

#[test]
fn the_certificate_is_checked_against_upstream_server_name_when_given() {
    let pki = Pki::new();
    let redis = Server::start(ServerConfig::new(Flavor::Redis));
    // Its certificate names redis.test alone, not the address it is reached at.
    let upstream = TlsUpstream::start(&pki, "named", false);
    let upstream_line = format!("upstream = \"https://127.0.0.1:{}\"\n", upstream.port);
    let ca = format!("upstream_ca_file = \"{}\"\n", pki.toml_path("ca.pem"));

    let by_address = gateway(&redis, &upstream_line, &ca);
    assert_eq!(by_address.get("/x").status, 502);
    assert!(
        by_address.log().contains("certificate not valid for name"),
        "{}",
        by_address.log()
    );

    let named = gateway(
        &redis,
        &upstream_line,
        &format!("{ca}upstream_server_name = \"redis.test\"\n"),
    );
    let resp = named.get("/x");
    assert_eq!(resp.status, 200, "{resp:?}");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].sni.as_deref(), Some("redis.test"));
}

#[test]
fn check_config_names_the_upstream_setting_and_the_file() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    let missing = dir.path().join("missing.pem");
    let https = "upstream = \"https://api.internal:8443\"\n";
    let cases = [
        (
            format!("{https}upstream_ca_file = \"{}\"\n", missing.display()),
            format!(
                "[server] upstream_ca_file '{}': cannot read it",
                missing.display()
            ),
        ),
        (
            format!("{https}upstream_ca_file = \"{}\"\n", garbage.display()),
            format!(
                "[server] upstream_ca_file '{}': no PEM certificate in it",
                garbage.display()
            ),
        ),
        (
            format!(
                "{https}upstream_cert_file = \"{}\"\nupstream_key_file = \"{}\"\n",
                pki.toml_path("client.pem"),
                garbage.display()
            ),
            format!(
                "[server] upstream_key_file '{}': no PEM private key in it",
                garbage.display()
            ),
        ),
        (
            format!(
                "{https}upstream_cert_file = \"{}\"\nupstream_key_file = \"{}\"\n",
                pki.toml_path("client.pem"),
                pki.toml_path("server.key")
            ),
            format!(
                "[server] upstream_cert_file '{}' with upstream_key_file '{}'",
                pki.toml_path("client.pem"),
                pki.toml_path("server.key")
            ),
        ),
        (
            format!(
                "{https}upstream_cert_file = \"{}\"\n",
                pki.toml_path("client.pem")
            ),
            "[server] upstream_cert_file needs upstream_key_file".into(),
        ),
        (
            format!("{https}upstream_server_name = \"a b\"\n"),
            "[server] upstream_server_name 'a b' is not a host name".into(),
        ),
        (
            "upstream = \"http://api.internal:9000\"\nupstream_ca_file = \"ca.pem\"\n".into(),
            "[server] upstream_ca_file needs an https:// upstream".into(),
        ),
        (
            "upstream = \"https://api.internal:8443/v1\"\n".into(),
            "must have no path or query".into(),
        ),
    ];
    for (lines, expected) in cases {
        let path = dir.path().join("rules.toml");
        let text = format!("[server]\nlisten = \"127.0.0.1:1\"\n{lines}[redis]\n");
        std::fs::write(&path, text).expect("write the file");
        let output = check_config(&path);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{lines}: passed");
        assert!(
            stderr.contains(&expected),
            "{lines}: '{stderr}' lacks '{expected}'"
        );
    }
    // And the good ones pass, the CA file read.
    let path = dir.path().join("rules.toml");
    let text = format!(
        "[server]\nlisten = \"localhost:1\"\n{https}upstream_ca_file = \"{}\"\n[redis]\n",
        pki.toml_path("ca.pem")
    );
    std::fs::write(&path, text).expect("write the file");
    let output = check_config(&path);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
