use super::*;
use crate::config::{load, parse, Config};
use crate::net::listen::ListenAddress;

/// `[server]` with `lines` (and a `listen` unless they start with one), then an empty
/// `[redis]`.
fn server(lines: &str) -> Result<Config, String> {
    let listen = match lines.starts_with("listen =") {
        true => "",
        false => "listen = \"127.0.0.1:8080\"\n",
    };
    parse(&format!("[server]\n{listen}{lines}\n[redis]\n")).map_err(|e| e.to_string())
}

fn target(lines: &str) -> UpstreamTarget {
    let config = server(lines).unwrap_or_else(|e| panic!("{lines}: {e}"));
    config.server.upstream.expect("an upstream")
}

#[test]
fn an_https_upstream_is_checked_by_its_host_or_the_name_given() {
    let named = target("upstream = \"https://api.internal:8443\"\n");
    assert_eq!(named.base.to_string(), "https://api.internal:8443/");
    let tls = named.tls.expect("TLS");
    assert_eq!(tls.server_name.to_str(), "api.internal");
    assert_eq!((tls.ca_file, tls.client_files), (None, None));

    let v6 = target("upstream = \"https://[::1]:8443\"\n").tls.unwrap();
    assert_eq!(v6.server_name.to_str(), "::1");

    let overridden = target(
        "upstream = \"https://10.0.0.5\"\nupstream_server_name = \"api.internal\"\n\
         upstream_ca_file = \"ca.pem\"\nupstream_cert_file = \"c.pem\"\n\
         upstream_key_file = \"c.key\"\n",
    )
    .tls
    .unwrap();
    assert_eq!(overridden.server_name.to_str(), "api.internal");
    assert_eq!(overridden.ca_file, Some(PathBuf::from("ca.pem")));
    assert_eq!(
        overridden.client_files,
        Some((PathBuf::from("c.pem"), PathBuf::from("c.key")))
    );

    let plain = target("upstream = \"http://api.internal:9000\"\n");
    assert_eq!((plain.base.host(), plain.tls), (Some("api.internal"), None));
    let underscore = target("upstream = \"http://my_api:9000\"\n");
    assert_eq!(
        underscore.base.host(),
        Some("my_api"),
        "a compose service name"
    );
}

#[test]
fn mistakes_in_the_upstream_settings_are_named() {
    let cases = [
        (
            "upstream = \"ftp://a:1\"",
            "must be like http://127.0.0.1:9000 or https://",
        ),
        ("upstream = \"api.internal:9000\"", "must be like"),
        ("upstream = \"http://\"", "must be like"),
        ("upstream = \"http://a b:1\"", "must be like"),
        ("upstream = \"http://127.0.0.300:1\"", "must be like"),
        (
            "upstream = \"http://u:p@a:1\"",
            "must not carry a user or password",
        ),
        ("upstream = \"http://a:0\"", "port 0"),
        ("upstream = \"https://a:1/v1\"", "no path or query"),
        (
            "upstream = \"http://a:1\"\nupstream_ca_file = \"ca.pem\"",
            "upstream_ca_file needs an https:// upstream; 'http://a:1' is plain HTTP",
        ),
        (
            "upstream = \"http://a:1\"\nupstream_server_name = \"a\"",
            "upstream_server_name needs an https:// upstream",
        ),
        (
            "mode = \"check\"\nupstream_cert_file = \"c.pem\"",
            "upstream_cert_file needs an https:// upstream",
        ),
        (
            "upstream = \"https://a:1\"\nupstream_cert_file = \"c.pem\"",
            "upstream_cert_file needs upstream_key_file",
        ),
        (
            "upstream = \"https://a:1\"\nupstream_key_file = \"c.key\"",
            "upstream_key_file needs upstream_cert_file",
        ),
        (
            "upstream = \"https://a:1\"\nupstream_server_name = \"not a name\"",
            "upstream_server_name 'not a name' is not a host name or an IP address",
        ),
        (
            "upstream = \"https://a:1\"\nupstream_insecure = true",
            "unknown field",
        ),
    ];
    for (lines, expected) in cases {
        let error = server(lines)
            .err()
            .unwrap_or_else(|| panic!("accepted: {lines}"));
        assert!(
            error.contains(expected),
            "{lines}: '{error}' lacks '{expected}'"
        );
    }
}

#[test]
fn listeners_take_host_names_and_refuse_what_is_neither() {
    let config = server(
        "listen = \"localhost:8080\"\nadmin_listen = \"[::1]:9090\"\n\
         upstream = \"http://localhost:9000\"\n",
    );
    let config = config.unwrap();
    assert_eq!(
        config.server.listen,
        ListenAddress::Name {
            host: "localhost".into(),
            port: 8080
        }
    );
    assert_eq!(
        config.server.admin_listen,
        ListenAddress::Address("[::1]:9090".parse().unwrap())
    );
    let envoy = "upstream = \"http://a:1\"\n[envoy]\nlisten = \"rl.internal:8081\"\n\
                 descriptors = \"d\"\n";
    let envoy = server(envoy).unwrap().envoy.unwrap();
    assert_eq!(envoy.listen.to_string(), "rl.internal:8081");
    for (lines, expected) in [
        (
            "listen = \"localhost\"\nupstream = \"http://a:1\"",
            "[server] listen 'localhost' is not an address like 127.0.0.1:8080 or a host:port",
        ),
        (
            "admin_listen = \"::1:9090\"\nupstream = \"http://a:1\"",
            "[server] admin_listen '::1:9090' is not an address",
        ),
        (
            "upstream = \"http://a:1\"\n[envoy]\nlisten = \"a b:1\"\ndescriptors = \"d\"",
            "[envoy] listen 'a b:1' is not an address like 127.0.0.1:8081 or a host:port",
        ),
    ] {
        let error = server(lines)
            .err()
            .unwrap_or_else(|| panic!("accepted: {lines}"));
        assert!(
            error.contains(expected),
            "{lines}: '{error}' lacks '{expected}'"
        );
    }
}

/// A configuration file in `dir` whose `[server]` has an https upstream and `tls_lines`.
fn write_config(dir: &Path, tls_lines: &str) -> PathBuf {
    let path = dir.join("rules.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:8080\"\nupstream = \"https://localhost:8443\"\n\
         {tls_lines}\n[redis]\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_files_are_read_at_load_and_a_bad_one_is_named_with_its_path() {
    let pki = testkit::tls::Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| pki.toml_path(name);
    std::fs::copy(pki.path("ca.pem"), dir.path().join("ca.pem")).unwrap();
    std::fs::write(dir.path().join("garbage.pem"), "not a certificate\n").unwrap();

    // A relative path is the configuration file's directory's.
    let loaded = load(&write_config(dir.path(), "upstream_ca_file = \"ca.pem\"")).unwrap();
    let tls = loaded.server.upstream.unwrap().tls.unwrap();
    assert_eq!(tls.ca_file, Some(dir.path().join("ca.pem")));
    assert_eq!(
        tls.material.ca.as_deref(),
        Some(std::fs::read(pki.path("ca.pem")).unwrap().as_slice())
    );
    let (_, roots) = tls.client_config().unwrap();
    assert_eq!(roots, Roots::CaFile);

    let client = format!(
        "upstream_cert_file = \"{}\"\nupstream_key_file = \"{}\"",
        file("client.pem"),
        file("client.key")
    );
    let loaded = load(&write_config(dir.path(), &client)).unwrap();
    let tls = loaded.server.upstream.unwrap().tls.unwrap();
    assert!(tls.material.client.is_some());
    assert!(
        !format!("{tls:?}").contains("PRIVATE KEY"),
        "the key is kept out of Debug"
    );

    let missing = dir.path().join("missing.pem");
    let garbage = dir.path().join("garbage.pem");
    let cases = [
        (
            "upstream_ca_file = \"missing.pem\"".to_owned(),
            format!(
                "[server] upstream_ca_file '{}': cannot read it",
                missing.display()
            ),
        ),
        (
            "upstream_ca_file = \"garbage.pem\"".to_owned(),
            format!(
                "[server] upstream_ca_file '{}': no PEM certificate in it",
                garbage.display()
            ),
        ),
        (
            format!(
                "upstream_cert_file = \"{}\"\nupstream_key_file = \"{}\"",
                file("client.pem"),
                file("client.pem")
            ),
            format!(
                "[server] upstream_key_file '{}': no PEM private key in it",
                file("client.pem")
            ),
        ),
        (
            format!(
                "upstream_cert_file = \"{}\"\nupstream_key_file = \"{}\"",
                file("client.pem"),
                file("server.key")
            ),
            format!(
                "[server] upstream_cert_file '{}' with upstream_key_file '{}'",
                file("client.pem"),
                file("server.key")
            ),
        ),
    ];
    for (lines, expected) in cases {
        let error = load(&write_config(dir.path(), &lines))
            .err()
            .unwrap_or_else(|| panic!("accepted: {lines}"))
            .to_string();
        assert!(
            error.starts_with(&expected),
            "{lines}: '{error}' is not '{expected}…'"
        );
    }
}

#[test]
fn a_ca_file_not_read_is_an_error_not_the_system_roots() {
    let tls = target("upstream = \"https://a:1\"\nupstream_ca_file = \"ca.pem\"\n")
        .tls
        .unwrap();
    let Err(error) = tls.client_config() else {
        panic!("a CA file not read was taken");
    };
    assert_eq!(error, "[server] upstream_ca_file 'ca.pem': not read");
}

#[test]
fn without_a_ca_file_the_roots_are_the_systems_or_mozillas() {
    let tls = target("upstream = \"https://a:1\"\n").tls.unwrap();
    let (config, roots) = tls.client_config().unwrap();
    assert!(matches!(roots, Roots::System | Roots::Mozilla), "{roots:?}");
    assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
}
