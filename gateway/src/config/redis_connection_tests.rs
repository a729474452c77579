use super::*;
use crate::config::{assert_refused, parse_after_server};

#[test]
fn inconsistent_connection_settings_are_refused_at_load() {
    assert_refused(&[
        (
            "[redis]\nurl = \"redis://a:1\"\nsentinels = [\"b:2\"]\nmaster_name = \"m\"\n",
            "sentinels is a third way",
        ),
        (
            "[redis]\ncluster = [\"redis://a:1\"]\nsentinels = [\"b:2\"]\nmaster_name = \"m\"\n",
            "choose one",
        ),
        ("[redis]\nsentinels = [\"b:2\"]\n", "needs master_name"),
        ("[redis]\nsentinels = []\nmaster_name = \"m\"\n", "at least one"),
        ("[redis]\nsentinels = [\"b\"]\nmaster_name = \"m\"\n", "'b' is not a host:port"),
        ("[redis]\nsentinels = [\"redis://b:2\"]\nmaster_name = \"m\"\n", "not a host:port"),
        ("[redis]\nsentinels = [\"b:2\"]\nmaster_name = \"\"\n", "master_name is empty"),
        ("[redis]\nmaster_name = \"m\"\n", "master_name goes with sentinels"),
        (
            "[redis]\nurl = \"rediss://a:1\"\ntls_cert_file = \"c.pem\"\n",
            "tls_cert_file needs tls_key_file",
        ),
        (
            "[redis]\nurl = \"rediss://a:1\"\ntls_key_file = \"k.pem\"\n",
            "tls_key_file needs tls_cert_file",
        ),
        (
            "[redis]\nurl = \"redis://a:1\"\ntls_ca_file = \"ca.pem\"\n",
            "tls_* settings need TLS",
        ),
        ("[redis]\nurl = \"rediss://a:1\"\ntls = true\n", "tls goes with sentinels"),
        (
            "[redis]\ncluster = [\"rediss://a:1\", \"redis://b:2\"]\n",
            "mixes rediss:// and redis://",
        ),
        (
            "[redis]\ncluster = [\"rediss://a:1\"]\ntls_server_name = \"x\"\n",
            "tls_server_name is for a single server",
        ),
        (
            "[redis]\nsentinels = [\"b:2\"]\nmaster_name = \"m\"\ntls = true\ntls_server_name = \"x\"\n",
            "tls_server_name is for a single server",
        ),
        (
            "[redis]\nurl = \"rediss://a:1\"\ntls_server_name = \"not a name\"\n",
            "not a host name",
        ),
        (
            "[redis]\npassword_env = \"P\"\npassword_file = \"/p\"\n",
            "password_env and password_file both",
        ),
        ("[redis]\npassword_env = \"\"\n", "must name an environment variable"),
        (
            "[redis]\nurl = \"redis://:pw@a:1\"\npassword_env = \"P\"\n",
            "the url has a password",
        ),
        (
            "[redis]\ncluster = [\"redis://u:pw@a:1\"]\npassword_file = \"/p\"\n",
            "the url has a password",
        ),
        (
            "[redis]\nurl = \"redis://u:pw@a:1\"\nusername = \"v\"\n",
            "names a user and so does username",
        ),
        ("[redis]\nusername = \"\"\n", "username is empty"),
        (
            "[redis]\nsentinel_password_env = \"P\"\n",
            "go with sentinels",
        ),
        (
            "[redis]\nsentinels = [\"b:2\"]\nmaster_name = \"m\"\nsentinel_password_env = \"P\"\nsentinel_password_file = \"/p\"\n",
            "sentinel_password_env and sentinel_password_file both",
        ),
    ]);
}

#[test]
fn a_password_in_a_refused_url_is_not_repeated() {
    let error =
        parse_after_server("[redis]\nurl = \"redis://gw:hunter2@a:1\"\npassword_env = \"P\"\n")
            .unwrap_err();
    assert!(!error.contains("hunter2"), "{error}");
    let error =
        parse_after_server("[redis]\nurl = \"redis://gw:hunter2@a:notaport\"\n").unwrap_err();
    assert!(!error.contains("hunter2"), "{error}");
    assert!(error.contains("gw:***@"), "{error}");
}

#[test]
fn passwords_in_urls_are_hidden() {
    assert_eq!(redacted("redis://u:p@h:1/0"), "redis://u:***@h:1/0");
    assert_eq!(redacted("rediss://:p@h:1"), "rediss://:***@h:1");
    assert_eq!(redacted("redis://u@h:1"), "redis://u@h:1");
    assert_eq!(redacted("redis://h:1"), "redis://h:1");
    assert_eq!(redacted("redis://u:p@a@h:1"), "redis://u:***@h:1");
}

#[test]
fn sentinels_tls_and_sources_as_configured() {
    let config = parse_after_server(
        "[redis]\nsentinels = [\"10.0.0.1:26379\", \"[::1]:26380\"]\nmaster_name = \"mymaster\"\n\
         tls = true\ntls_ca_file = \"ca.pem\"\nusername = \"gw\"\npassword_file = \"secret\"\n\
         sentinel_password_env = \"SENTINEL_PASSWORD\"\n",
    )
    .unwrap();
    assert_eq!(
        config.redis.target,
        RedisTarget::Sentinel {
            sentinels: vec!["10.0.0.1:26379".into(), "[::1]:26380".into()],
            master_name: "mymaster".into(),
        }
    );
    let connection = &config.redis.connection;
    let tls = connection.tls.as_ref().expect("tls = true");
    assert_eq!(tls.ca_file.as_deref(), Some(Path::new("ca.pem")));
    assert_eq!(connection.username.as_deref(), Some("gw"));
    assert_eq!(
        connection.password.as_ref().map(|s| &s.place),
        Some(&SecretPlace::File("secret".into()))
    );
    assert_eq!(
        connection.sentinel_password.as_ref().map(|s| s.setting),
        Some("sentinel_password_env")
    );
    assert_eq!(host_port("[::1]:26380"), Some(("::1".into(), 26380)));
    assert_eq!(host_port("a:0"), None);
}

#[test]
fn a_rediss_url_turns_tls_on_and_redis_leaves_it_off() {
    let on = parse_after_server("[redis]\nurl = \"rediss://a:6380\"\n").unwrap();
    assert_eq!(on.redis.connection.tls, Some(TlsSettings::default()));
    let off = parse_after_server("[redis]\nurl = \"redis://a:6379\"\n").unwrap();
    assert_eq!(off.redis.connection.tls, None);
    let cluster =
        parse_after_server("[redis]\ncluster = [\"rediss://a:1\", \"rediss://b:2\"]\n").unwrap();
    assert!(cluster.redis.connection.tls.is_some());
}

#[test]
fn a_password_file_loses_one_trailing_newline_and_an_empty_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("password");
    let source = SecretSource {
        setting: "password_file",
        place: SecretPlace::File(path.clone()),
    };
    std::fs::write(&path, "s3cret\r\n").unwrap();
    assert_eq!(source.read().unwrap(), "s3cret");
    std::fs::write(&path, "s3cret\n\n").unwrap();
    assert_eq!(source.read().unwrap(), "s3cret\n");
    std::fs::write(&path, "\n").unwrap();
    let error = source.read().unwrap_err().to_string();
    assert!(
        error.contains("password_file") && error.contains("empty"),
        "{error}"
    );
    let missing = SecretSource {
        setting: "password_file",
        place: SecretPlace::File(dir.path().join("nope")),
    };
    let error = missing.read().unwrap_err().to_string();
    assert!(
        error.contains("cannot read") && error.contains("nope"),
        "{error}"
    );
    let unset = SecretSource {
        setting: "sentinel_password_env",
        place: SecretPlace::Env("RL_GATEWAY_TEST_SURELY_UNSET".into()),
    };
    let error = unset.read().unwrap_err().to_string();
    assert!(
        error.contains("RL_GATEWAY_TEST_SURELY_UNSET is not set"),
        "{error}"
    );
}
