//! Which address a `key = "ip"` rule limits: the TCP peer (here always 127.0.0.1), unless
//! the peer is a trusted proxy, in which case the right-most address of X-Forwarded-For
//! that is not trusted (the left-most when all are). The Redis key names show which
//! subject was counted.
//!
//! `trusted_proxies` covering every address (`0.0.0.0/0`, `::/0`), which would let every
//! client choose its address, is refused.

use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "api"
path = "/**"
key = "ip"
limits = ["3/1h"]
algorithm = "log"
"#;

fn start(redis: &Server, upstream: &Upstream, trusted: &str) -> Gateway {
    Gateway::start(
        &format!("{}trusted_proxies = {trusted}\n", upstream.server_line()),
        &format!("{}{RULES}", redis_section(redis.port(), "")),
    )
}

fn get_from(gateway: &Gateway, xff: &str) -> Resp {
    gateway.send("GET", "/thing", &[("X-Forwarded-For", xff)])
}

#[test]
fn x_forwarded_for_from_an_untrusted_peer_is_ignored() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        for trusted in [r#"[]"#, r#"["10.0.0.0/8"]"#] {
            redis::cmd("FLUSHALL")
                .exec(&mut redis.conn())
                .expect("FLUSHALL");
            let gateway = start(&redis, &upstream, trusted);
            let what = format!("{flavor:?} trusted_proxies = {trusted}");
            for (i, xff) in ["203.0.113.1", "203.0.113.2", "198.51.100.1, 203.0.113.3"]
                .into_iter()
                .enumerate()
            {
                let resp = get_from(&gateway, xff);
                assert_eq!(resp.status, 200, "{what}: {resp:?}");
                assert_eq!(
                    resp.remaining(),
                    2 - i as i64,
                    "{what}: X-Forwarded-For {xff:?} shares the peer's budget: {resp:?}"
                );
            }
            let denied = get_from(&gateway, "192.0.2.77");
            assert_eq!(denied.status, 429, "{what}: {denied:?}");
            assert_eq!(
                keys(&redis, "*"),
                vec!["rl:{ip:127.0.0.1}:api".to_string()],
                "{what}"
            );
        }
    });
}

#[test]
fn x_forwarded_for_from_a_trusted_peer_names_the_client() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateway = start(&redis, &upstream, r#"["127.0.0.1/32", "10.0.0.0/8"]"#);

        for expected in [2, 1, 0] {
            let resp = get_from(&gateway, "203.0.113.1");
            assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
            assert_eq!(resp.remaining(), expected, "{flavor:?}: {resp:?}");
        }
        let denied = get_from(&gateway, "203.0.113.1");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");

        // Another client behind the proxy has its own budget.
        let other = get_from(&gateway, "203.0.113.2");
        assert_eq!(other.status, 200, "{flavor:?}: {other:?}");
        assert_eq!(other.remaining(), 2, "{flavor:?}: {other:?}");

        // A chain: the right-most untrusted address is the client, whatever the client
        // wrote on the left; trusted hops on the right are skipped.
        for chain in [
            "198.51.100.7, 203.0.113.9",
            "203.0.113.1, 203.0.113.9, 10.1.2.3",
        ] {
            let resp = get_from(&gateway, chain);
            assert_eq!(resp.status, 200, "{flavor:?} {chain:?}: {resp:?}");
        }
        let third = get_from(&gateway, "203.0.113.9");
        assert_eq!(
            third.remaining(),
            0,
            "{flavor:?}: both chains counted for 203.0.113.9: {third:?}"
        );

        // Every hop trusted: the left-most address.
        let resp = get_from(&gateway, "10.9.9.9, 10.0.0.2");
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        // No X-Forwarded-For: the peer itself.
        let resp = gateway.get("/thing");
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");

        assert_eq!(
            keys(&redis, "*"),
            vec![
                "rl:{ip:10.9.9.9}:api".to_string(),
                "rl:{ip:127.0.0.1}:api".to_string(),
                "rl:{ip:203.0.113.1}:api".to_string(),
                "rl:{ip:203.0.113.2}:api".to_string(),
                "rl:{ip:203.0.113.9}:api".to_string(),
            ],
            "{flavor:?}"
        );
    });
}

#[test]
fn trusting_every_address_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.toml");
    for (nets, ok) in [
        ("\"0.0.0.0/0\"", false),
        ("\"::/0\"", false),
        ("\"10.0.0.0/8\", \"0.0.0.0/0\"", false),
        ("\"10.0.0.0/8\", \"::1\"", true),
    ] {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:1\"\nupstream = \"http://127.0.0.1:2\"\n\
             trusted_proxies = [{nets}]\n[default]\nlimits = [\"5/1m\"]\n"
        );
        std::fs::write(&path, text).expect("write the rules");
        let output = check_config(&path);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.success(), ok, "{nets}: {stderr}");
        if !ok {
            assert!(stderr.contains("trusts every address"), "{nets}: {stderr}");
        }
    }
}
