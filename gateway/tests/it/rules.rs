//! How requests meet rules: methods and path patterns (`*` one segment, `**` any number,
//! the query ignored), the first match winning, what is keyed (ip, a header, a path
//! segment, per endpoint) as the Redis key names show, `limits = []` and unmatched requests
//! (never limited, no Redis call), shadow mode, `cost`, named policies, `[default]` and
//! `key_prefix`, and a 502 when the upstream cannot be reached.

use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "login"
methods = ["POST"]
path = "/auth/*"
per_endpoint = true
limits = ["2/1h"]
algorithm = "log"

[[rule]]
name = "search"
path = "/api/search/**"
key = "header:X-Api-Key"
limits = ["2/1h"]
algorithm = "log"

[[rule]]
name = "tenant"
path = "/t/*/items"
key = "segment:2"
limits = ["2/1h"]
algorithm = "log"

[[rule]]
name = "deep"
path = "/d/**"
key = "segment:3"
limits = ["2/1h"]
algorithm = "log"

[[rule]]
name = "free"
path = "/status"
limits = []

[[rule]]
name = "shadow"
path = "/shadow/**"
limits = ["1/1h"]
algorithm = "log"
mode = "shadow"

[[rule]]
name = "heavy"
path = "/heavy"
limits = ["5/1h"]
algorithm = "log"
cost = 2

[[rule]]
name = "named"
path = "/named"
policy = "gw-test"

[[rule]]
name = "never-reached"
path = "/heavy"
limits = ["1/1h"]
algorithm = "log"
"#;

fn start(flavor: Flavor) -> (Server, Upstream, Gateway) {
    stack_on(server_with_policies(flavor), RULES)
}

/// The one tier's (name, r) of an allowed answer.
fn decided(resp: &Resp) -> (String, i64) {
    assert_eq!(resp.status, 200, "{resp:?}");
    let limits = resp.limits();
    assert_eq!(limits.len(), 1, "{resp:?}");
    (limits[0].name.clone(), limits[0].r)
}

/// The keys with the hex digits of every `%XX` in upper case (percent-encoding may use
/// either), sorted.
fn uppercase_escapes(keys: &[String]) -> Vec<String> {
    let mut keys: Vec<String> = keys
        .iter()
        .map(|key| {
            let mut out = String::new();
            let mut chars = key.chars();
            while let Some(c) = chars.next() {
                out.push(c);
                if c == '%' {
                    out.extend(chars.by_ref().take(2).map(|h| h.to_ascii_uppercase()));
                }
            }
            out
        })
        .collect();
    keys.sort();
    keys
}

fn assert_unlimited(resp: &Resp, what: &str) {
    assert_eq!(resp.status, 200, "{what}: {resp:?}");
    assert!(!resp.has_ratelimit_headers(), "{what}: {resp:?}");
    assert!(resp.fail_open_reason().is_none(), "{what}: {resp:?}");
}

#[test]
fn keys_follow_the_subject_rule_and_endpoint() {
    each_flavor(|flavor| {
        let (redis, _upstream, gateway) = start(flavor);
        let f = format!("{flavor:?}");

        // per_endpoint: a counter per method and path.
        assert_eq!(
            decided(&gateway.post("/auth/login")),
            ("login".into(), 1),
            "{f}"
        );
        assert_eq!(
            decided(&gateway.post("/auth/login?x=1")),
            ("login".into(), 0),
            "{f}"
        );
        assert_eq!(
            decided(&gateway.post("/auth/logout")),
            ("login".into(), 1),
            "{f}"
        );

        // header:X-Api-Key; `**` also matches nothing; without the header, the IP.
        let key1 = [("X-Api-Key", "k1")];
        assert_eq!(
            decided(&gateway.send("GET", "/api/search/a/b", &key1)),
            ("search".into(), 1),
            "{f}"
        );
        assert_eq!(
            decided(&gateway.send("GET", "/api/search", &key1)),
            ("search".into(), 0),
            "{f}"
        );
        assert_eq!(
            decided(&gateway.send("GET", "/api/search/x", &[("X-Api-Key", "a{b}\tc")])),
            ("search".into(), 1),
            "{f}"
        );
        assert_eq!(
            decided(&gateway.get("/api/search/x")),
            ("search".into(), 1),
            "{f}"
        );
        // Non-ASCII bytes in the value (obs-text, which ureq does not send).
        assert_eq!(
            raw_get(gateway.port, "/api/search/y", b"X-Api-Key: caf\xc3\xa9\r\n"),
            200,
            "{f}"
        );

        // segment:2 of /t/<tenant>/items; the query is no part of the path.
        assert_eq!(
            decided(&gateway.get("/t/acme/items")),
            ("tenant".into(), 1),
            "{f}"
        );
        assert_eq!(
            decided(&gateway.get("/t/acme/items?page=2")),
            ("tenant".into(), 0),
            "{f}"
        );
        assert_eq!(
            decided(&gateway.get("/t/other/items")),
            ("tenant".into(), 1),
            "{f}"
        );
        // `*` is one segment only: no rule matches these (and there is no default).
        assert_unlimited(&gateway.get("/t/acme/x/items"), &f);
        assert_unlimited(&gateway.get("/t/items"), &f);

        // segment:3 missing: the IP.
        assert_eq!(decided(&gateway.get("/d/x/y")), ("deep".into(), 1), "{f}");
        assert_eq!(decided(&gateway.get("/d")), ("deep".into(), 1), "{f}");

        let got = keys(&redis, "*");
        let mut expected = vec![
            "rl:{ip:127.0.0.1}:login:POST /auth/login".to_string(),
            "rl:{ip:127.0.0.1}:login:POST /auth/logout".to_string(),
            "rl:{h:k1}:search".to_string(),
            "rl:{h:a%7Bb%7D%09c}:search".to_string(),
            "rl:{h:caf%C3%A9}:search".to_string(),
            "rl:{ip:127.0.0.1}:search".to_string(),
            "rl:{seg:acme}:tenant".to_string(),
            "rl:{seg:other}:tenant".to_string(),
            "rl:{seg:y}:deep".to_string(),
            "rl:{ip:127.0.0.1}:deep".to_string(),
        ];
        expected.sort();
        assert_eq!(uppercase_escapes(&got), expected, "{f}");
    });
}

#[test]
fn methods_restrict_a_rule_and_unmatched_or_empty_limits_never_call_redis() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = start(flavor);
        let f = format!("{flavor:?}");
        let calls = hit_calls(&redis);
        for _ in 0..5 {
            // GET does not match the POST-only login rule; nothing else matches.
            assert_unlimited(&gateway.get("/auth/login"), &f);
            // limits = []
            assert_unlimited(&gateway.get("/status"), &f);
            // no rule at all
            assert_unlimited(&gateway.send("PUT", "/nowhere?page=1", &[]), &f);
        }
        assert_eq!(hit_calls(&redis), calls, "{f}: no RL.HIT call");
        assert_eq!(upstream.requests(), 15, "{f}");
        assert!(keys(&redis, "*").is_empty(), "{f}");
    });
}

#[test]
fn shadow_mode_never_denies_and_sends_no_headers() {
    each_flavor(|flavor| {
        let (_redis, upstream, gateway) = start(flavor);
        for i in 0..4 {
            let resp = gateway.get("/shadow/x");
            assert_unlimited(&resp, &format!("{flavor:?} shadow request {i}"));
        }
        assert_eq!(upstream.requests(), 4, "{flavor:?}");
        let metrics = gateway.metrics();
        metrics.assert_decisions(
            &format!("{flavor:?}"),
            &[
                ("shadow", "allowed", 1.0),
                ("shadow", "shadow_denied", 3.0),
                ("shadow", "denied", 0.0),
                ("shadow", "denied_cached", 0.0),
            ],
        );
    });
}

#[test]
fn cost_charges_several_units_and_the_first_matching_rule_wins() {
    each_flavor(|flavor| {
        let (_redis, upstream, gateway) = start(flavor);
        let resp = gateway.get("/heavy");
        assert_eq!(resp.policy()[0].name, "heavy", "{flavor:?}: {resp:?}");
        assert_eq!(decided(&resp), ("heavy".into(), 3), "{flavor:?}");
        assert_eq!(
            decided(&gateway.get("/heavy")),
            ("heavy".into(), 1),
            "{flavor:?}"
        );
        let denied = gateway.get("/heavy");
        assert_eq!(
            denied.status, 429,
            "{flavor:?}: one unit left, two needed: {denied:?}"
        );
        assert_eq!(upstream.requests(), 2, "{flavor:?}");
    });
}

#[test]
fn a_policy_rule_uses_the_named_policy() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = start(flavor);
        redis::cmd("RL.POLICY")
            .arg(&["SET", "gw-test", "3", "1h", "ALGO", "log"])
            .exec(&mut redis.conn())
            .expect("RL.POLICY SET");
        for expected in [2, 1, 0] {
            let resp = gateway.get("/named");
            assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
            let policy = resp.policy();
            assert_eq!(policy.len(), 1, "{flavor:?}: {resp:?}");
            assert_eq!((policy[0].name.as_str(), policy[0].q), ("named", 3));
            assert!(
                policy[0].w.is_none() || policy[0].w == Some(3600),
                "{flavor:?}: {resp:?}"
            );
            assert_eq!(resp.remaining(), expected, "{flavor:?}: {resp:?}");
        }
        let denied = gateway.get("/named");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        denied.retry_after();
        assert_eq!(upstream.requests(), 3, "{flavor:?}");
        assert_eq!(
            keys(&redis, "*"),
            vec!["rl:{ip:127.0.0.1}:named".to_string()],
            "{flavor:?}"
        );
    });
}

#[test]
fn the_default_rule_covers_the_rest_with_the_configured_key_prefix() {
    let redis = ServerConfig::new(Flavor::Valkey).start();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &upstream.server_line(),
        &format!(
            "{}{}",
            redis_section(redis.port(), "key_prefix = \"pfx:\""),
            r#"
[[rule]]
name = "free"
path = "/status"
limits = []

[default]
key = "ip"
per_endpoint = true
limits = ["2/1h"]
algorithm = "log"
"#
        ),
    );
    assert_eq!(decided(&gateway.get("/a")), ("default".into(), 1));
    assert_eq!(decided(&gateway.get("/a")), ("default".into(), 0));
    assert_eq!(gateway.get("/a").status, 429);
    assert_eq!(decided(&gateway.get("/b")), ("default".into(), 1));
    assert_eq!(decided(&gateway.post("/a")), ("default".into(), 1));
    assert_unlimited(&gateway.get("/status"), "the free rule before the default");
    assert_eq!(
        keys(&redis, "*"),
        vec![
            "pfx:{ip:127.0.0.1}:default:GET /a".to_string(),
            "pfx:{ip:127.0.0.1}:default:GET /b".to_string(),
            "pfx:{ip:127.0.0.1}:default:POST /a".to_string(),
        ]
    );
    let metrics = gateway.metrics();
    metrics.assert_decisions(
        "the default rule",
        &[("default", "allowed", 4.0), ("default", "denied", 1.0)],
    );
}

#[test]
fn an_unreachable_upstream_is_a_502() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let nobody = free_port();
    let gateway = Gateway::start(
        &format!("upstream = \"http://127.0.0.1:{nobody}\"\n"),
        &format!("{}{RULES}", redis_section(redis.port(), "")),
    );
    assert_eq!(gateway.get("/status").status, 502);
    assert_eq!(gateway.get("/heavy").status, 502);
}
