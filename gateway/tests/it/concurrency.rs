//! `concurrency = N` rules: a lease (`RL.ACQUIRE`) is taken before a request is forwarded
//! and given back when its response ends (the body sent to the end) or when the client goes
//! away mid-response (the body dropped); a gateway killed mid-request leaves its slot for
//! `lease_ttl` at most. The rule's limits count in the same call. Rules a lease cannot
//! serve are refused at load, and Redis stopped follows `on_redis_failure`.
//!
//! Requests are held in flight by the demo upstream (`hold=1` until `/__release`, or a
//! body dripped slowly), so nothing here depends on how fast anything runs: every wait is a
//! poll with a generous deadline.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use testkit::gateway::*;

use testkit::server_ms;

/// Long enough for any poll below: a slot freed within it was freed by the gateway, not by
/// the lease's end.
const LONG_TTL: &str = "300s";
const POLL: Duration = Duration::from_secs(30);

fn rules(path: &str, n: u64, ttl: &str, rest: &str) -> String {
    format!(
        "[[rule]]\nname = \"llm\"\npath = \"{path}\"\nconcurrency = {n}\nlease_ttl = \"{ttl}\"\n{rest}\n"
    )
}

/// The lease key of rule `llm` for the test client.
const LEASE_KEY: &str = "rl:{ip:127.0.0.1}:llm:lease";

/// `RL.LEASES key max`: how many leases are held now.
fn held(redis: &Server, key: &str, max: u64) -> i64 {
    let reply: Vec<i64> = redis::cmd("RL.LEASES")
        .arg(key)
        .arg(max)
        .query(&mut redis.conn())
        .expect("RL.LEASES");
    reply[0]
}

fn lease_metric(gateway: &Gateway, event: &str) -> f64 {
    gateway.metrics().counter(
        "rl_gateway_leases_total",
        &[("rule", "llm"), ("event", event)],
    )
}

#[test]
fn n_requests_in_flight_then_429_until_their_bodies_end() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, &rules("/slow", 2, LONG_TTL, ""));
        let held_requests: Vec<_> = (0..2)
            .map(|_| in_flight(&gateway, "/slow?hold=1"))
            .collect();
        wait_until(POLL, "both requests reach the upstream", || {
            upstream.requests() == 2
        });
        assert_eq!(held(&redis, LEASE_KEY, 2), 2, "{flavor:?}");
        assert_eq!(leases_held(&gateway), 2.0, "{flavor:?}");

        let extra = gateway.get("/slow?hold=1");
        assert_eq!(extra.status, 429, "{flavor:?}: {extra:?}");
        let retry = extra.retry_after();
        assert!(
            (1..=300).contains(&retry),
            "{flavor:?}: Retry-After {retry}"
        );
        assert!(
            !extra.has_ratelimit_headers(),
            "{flavor:?}: a slot is not a quota per window: {extra:?}"
        );
        assert_eq!(
            upstream.requests(),
            2,
            "{flavor:?}: the extra one is not forwarded"
        );

        upstream.release_held();
        for request in held_requests {
            assert_eq!(request.join().expect("the thread"), 200, "{flavor:?}");
        }
        wait_until(POLL, "both leases are given back", || {
            held(&redis, LEASE_KEY, 2) == 0
        });
        // A HEAD: a body at its end from the start, which hyper never polls.
        let head = gateway.send("HEAD", "/slow", &[]);
        assert_eq!(head.status, 200, "{flavor:?}: a slot is free");
        wait_until(POLL, "that lease is given back too", || {
            lease_metric(&gateway, "released") == 3.0
        });
        assert_eq!(lease_metric(&gateway, "acquired"), 3.0, "{flavor:?}");
        assert_eq!(lease_metric(&gateway, "denied"), 1.0, "{flavor:?}");
        assert_eq!(release_cause(&gateway, "end"), 3.0, "{flavor:?}");
        assert_eq!(release_cause(&gateway, "dropped"), 0.0, "{flavor:?}");
        assert_eq!(leases_held(&gateway), 0.0, "{flavor:?}");
        let metrics = gateway.metrics();
        metrics.assert_decisions(
            &format!("{flavor:?}"),
            &[("llm", "allowed", 3.0), ("llm", "denied", 1.0)],
        );
        // Not answered from the deny cache: a slot can free up at any moment.
        assert_eq!(metrics.decisions("llm", "denied_cached"), 0.0);
    });
}

#[test]
fn the_rules_limits_count_in_the_same_call_on_the_lease_key() {
    each_flavor(|flavor| {
        let (redis, _upstream, gateway) = stack(
            flavor,
            &rules("/capped", 5, LONG_TTL, "limits = [\"2/1h\"]"),
        );
        let statuses: Vec<u16> = (0..3).map(|_| gateway.get("/capped").status).collect();
        assert_eq!(statuses, [200, 200, 429], "{flavor:?}");
        let denied = gateway.get("/capped");
        assert!(
            denied.retry_after() > 60,
            "{flavor:?}: the tier's wait: {denied:?}"
        );
        // One key, the lease key: no RL.HIT key beside it.
        assert_eq!(keys(&redis, "rl:*"), [LEASE_KEY], "{flavor:?}");
        wait_until(POLL, "the two leases are given back", || {
            held(&redis, LEASE_KEY, 5) == 0
        });
    });
}

#[test]
fn a_client_gone_mid_response_frees_its_slot() {
    each_flavor(|flavor| {
        let (redis, _upstream, gateway) = stack(flavor, &rules("/drip", 1, LONG_TTL, ""));
        let mut client = TcpStream::connect(("127.0.0.1", gateway.port)).expect("connect");
        client.set_read_timeout(Some(POLL)).expect("a read timeout");
        // 600 chunks 100 ms apart: a minute of response, longer than any poll below.
        client
            .write_all(b"GET /drip?drip_ms=100&chunks=600 HTTP/1.1\r\nHost: t\r\n\r\n")
            .expect("send");
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("drip") {
            let n = client.read(&mut buf).expect("the response starts");
            assert!(
                n > 0,
                "{flavor:?}: closed early: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
        assert!(seen.starts_with(b"HTTP/1.1 200"), "{flavor:?}");
        assert_eq!(held(&redis, LEASE_KEY, 1), 1, "{flavor:?}");
        assert_eq!(
            gateway.get("/drip").status,
            429,
            "{flavor:?}: the one slot is taken"
        );

        drop(client);
        wait_until(POLL, "the slot of the client gone is given back", || {
            held(&redis, LEASE_KEY, 1) == 0
        });
        assert_eq!(release_cause(&gateway, "dropped"), 1.0, "{flavor:?}");
        assert_eq!(
            gateway.get("/drip?drip_ms=1&chunks=2").status,
            200,
            "{flavor:?}"
        );
    });
}

#[test]
fn a_client_gone_before_the_upstream_answers_frees_its_slot() {
    let (redis, upstream, gateway) = stack(Flavor::Redis, &rules("/slow", 1, LONG_TTL, ""));
    let mut client = TcpStream::connect(("127.0.0.1", gateway.port)).expect("connect");
    client
        .write_all(b"GET /slow?hold=1 HTTP/1.1\r\nHost: t\r\n\r\n")
        .expect("send");
    wait_until(POLL, "the request reaches the upstream", || {
        upstream.requests() == 1
    });
    assert_eq!(held(&redis, LEASE_KEY, 1), 1);
    drop(client);
    wait_until(POLL, "the slot of the client gone is given back", || {
        held(&redis, LEASE_KEY, 1) == 0
    });
    assert_eq!(release_cause(&gateway, "dropped"), 1.0);
    upstream.release_held();
}

#[test]
fn a_response_streaming_longer_than_lease_ttl_keeps_its_slot() {
    each_flavor(|flavor| {
        // A 1 s lease, and a body dripped over 3 s at least (30 chunks, one per 100 ms):
        // the gateway renews the lease while the response is in flight, so the slot stays
        // taken, and lease_ttl only bounds how long a dead gateway's slot stays taken.
        let (redis, upstream, gateway) = stack(flavor, &rules("/drip", 1, "1s", ""));
        let url = gateway.url("/drip?drip_ms=100&chunks=30");
        let agent = gateway.agent.clone();
        // Read to its end: the body is what keeps the request in flight.
        let streaming = std::thread::spawn(move || match agent.get(&url).call() {
            Ok(resp) => {
                let status = resp.status();
                let body = resp.into_string().unwrap_or_default();
                (status, body.matches("drip").count())
            }
            Err(_) => (0, 0),
        });
        wait_until(POLL, "the request reaches the upstream", || {
            upstream.requests() == 1
        });
        // Longer than the lease; shorter than the body can take.
        std::thread::sleep(Duration::from_millis(2_500));
        assert_eq!(held(&redis, LEASE_KEY, 1), 1, "{flavor:?}: still held");
        let extra = gateway.get("/drip?drip_ms=1&chunks=1");
        assert_eq!(extra.status, 429, "{flavor:?}: the slot is still taken");
        assert_eq!(
            streaming.join().expect("the thread"),
            (200, 30),
            "{flavor:?}"
        );
        wait_until(POLL, "the lease is given back", || {
            held(&redis, LEASE_KEY, 1) == 0
        });
        assert!(lease_metric(&gateway, "renewed") >= 1.0, "{flavor:?}");
        assert_eq!(lease_metric(&gateway, "lost"), 0.0, "{flavor:?}");
        assert_eq!(leases_held(&gateway), 0.0, "{flavor:?}");
    });
}

#[test]
fn a_killed_gateway_leaves_its_slot_for_lease_ttl_at_most() {
    const TTL_MS: i64 = 8_000;
    each_flavor(|flavor| {
        let (redis, upstream, mut gateway) = stack(flavor, &rules("/slow", 1, "8s", ""));
        let before = server_ms(&mut redis.conn());
        let request = in_flight(&gateway, "/slow?hold=1");
        wait_until(POLL, "the request reaches the upstream", || {
            upstream.requests() == 1
        });
        gateway.signal("KILL");
        assert!(!gateway_running(&mut gateway), "{flavor:?}: killed");
        assert_eq!(
            request.join().expect("the thread"),
            0,
            "{flavor:?}: cut off"
        );

        // Still held (unless lease_ttl has passed already on a very slow machine): a lease
        // ends by its own clock, never because its holder vanished.
        let pttl: i64 = redis::cmd("PTTL")
            .arg(LEASE_KEY)
            .query(&mut redis.conn())
            .expect("PTTL");
        let still = held(&redis, LEASE_KEY, 1);
        let now = server_ms(&mut redis.conn());
        assert!(
            (still == 1 && pttl > 0 && pttl <= TTL_MS) || now - before >= TTL_MS,
            "{flavor:?}: freed before lease_ttl (held {still}, PTTL {pttl})"
        );
        wait_until(
            POLL + Duration::from_millis(TTL_MS as u64),
            "the lease ends",
            || held(&redis, LEASE_KEY, 1) == 0,
        );
        let freed = server_ms(&mut redis.conn());
        assert!(
            freed - before >= TTL_MS,
            "{flavor:?}: free {} ms after the request, before lease_ttl",
            freed - before
        );
        upstream.release_held();
    });
}

/// Whether the gateway process still runs, waiting a little for a kill to land.
fn gateway_running(gateway: &mut Gateway) -> bool {
    let mut running = true;
    wait_until(POLL, "the gateway exits", || {
        running = gateway.running();
        !running
    });
    running
}

#[test]
fn redis_stopped_follows_on_redis_failure() {
    each_flavor(|flavor| {
        let rest = "[[rule]]\nname = \"open\"\npath = \"/open\"\nconcurrency = 1\n\
                    [[rule]]\nname = \"closed\"\npath = \"/closed\"\nconcurrency = 1\n\
                    on_redis_failure = \"closed\"\n";
        let (redis, upstream, gateway) = stack(flavor, rest);
        assert_eq!(gateway.get("/open").status, 200, "{flavor:?}");
        drop(redis);
        let open = gateway.get("/open");
        assert_eq!(open.status, 200, "{flavor:?}: forwarded, holding no lease");
        assert!(open.fail_open_reason().is_some(), "{flavor:?}: {open:?}");
        assert_eq!(gateway.get("/closed").status, 503, "{flavor:?}");
        assert_eq!(upstream.requests(), 2, "{flavor:?}");
        let metrics = gateway.metrics();
        metrics.assert_decisions(
            &format!("{flavor:?}"),
            &[
                ("open", "allowed", 1.0),
                ("open", "fail_open", 1.0),
                ("closed", "fail_closed", 1.0),
            ],
        );
        assert_eq!(
            metrics.counter(
                "rl_gateway_leases_total",
                &[("rule", "open"), ("event", "acquired")]
            ),
            1.0
        );
        wait_until(POLL, "the first lease is no longer held", || {
            leases_held(&gateway) == 0.0
        });
    });
}

#[test]
fn an_upstream_error_gives_the_lease_back() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    // Nothing listens there: every request is a 502.
    let nowhere = format!("upstream = \"http://127.0.0.1:{}\"\n", free_port());
    let gateway = Gateway::start(
        &nowhere,
        &format!(
            "{}{}",
            redis_section(redis.port(), ""),
            rules("/x", 1, LONG_TTL, "")
        ),
    );
    for _ in 0..2 {
        assert_eq!(gateway.get("/x").status, 502);
        wait_until(POLL, "the lease is given back", || {
            held(&redis, LEASE_KEY, 1) == 0
        });
    }
    wait_until(POLL, "both releases are counted", || {
        lease_metric(&gateway, "released") == 2.0
    });
    assert_eq!(release_cause(&gateway, "error"), 2.0);
}

#[test]
fn rules_a_lease_cannot_serve_are_refused_at_load() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.toml");
    let proxy = "[server]\nlisten = \"127.0.0.1:1\"\nupstream = \"http://127.0.0.1:2\"\n";
    let check = "[server]\nlisten = \"127.0.0.1:1\"\nmode = \"check\"\n";
    let cases = [
        (
            check,
            "concurrency = 2",
            "concurrency needs mode = \"proxy\"",
        ),
        (
            proxy,
            "concurrency = 0",
            "concurrency = 0: must be from 1 to 10000",
        ),
        (
            proxy,
            "concurrency = 10001",
            "concurrency = 10001: must be from 1 to 10000",
        ),
        (
            proxy,
            "concurrency = 2\nlease_ttl = \"0s\"",
            "lease_ttl '0s' must be a duration",
        ),
        (
            proxy,
            "concurrency = 2\nlease_ttl = \"400d\"",
            "from 1ms to 366d",
        ),
        (
            proxy,
            "concurrency = 2\nlease_ttl = \"1 minute\"",
            "lease_ttl '1 minute'",
        ),
        (
            proxy,
            "concurrency = 2\npolicy = \"p\"",
            "concurrency with policy",
        ),
    ];
    for (head, rule, reason) in cases {
        let text = format!("{head}[[rule]]\nname = \"llm\"\npath = \"/llm\"\n{rule}\n");
        std::fs::write(&path, &text).expect("write the rules");
        let output = check_config(&path);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "accepted:\n{text}");
        assert!(stderr.contains(reason), "{text}\n{stderr}");
    }
    std::fs::write(
        &path,
        format!("{proxy}[[rule]]\nname = \"llm\"\npath = \"/llm\"\nconcurrency = 2\n"),
    )
    .expect("write");
    let output = check_config(&path);
    assert!(output.status.success(), "{output:?}");
}
