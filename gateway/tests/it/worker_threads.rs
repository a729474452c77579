//! `[server] worker_threads`: at 1 the gateway runs a single-threaded runtime, where the
//! RL.HITs of concurrent requests leave for Redis together, as one pipeline. Every request
//! still gets its own decision (each of 24 concurrent requests a different `remaining`),
//! a denial is still a 429, and the admin listener still answers. A value over the cap is
//! refused by `--check-config`.

use testkit::gateway::*;

const RULES: &str = "[default]\nlimits = [\"24/1h\"]\n";

#[test]
fn one_worker_thread_gives_each_concurrent_request_its_own_decision() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &format!("{}worker_threads = 1\n", upstream.server_line()),
        &format!("{}{RULES}", redis_section(redis.port(), "")),
    );
    assert_eq!(
        gateway.log_lines_with("1 threads"),
        1,
        "the start line says so: {}",
        gateway.log()
    );
    let url = gateway.url("/same");
    let answers: Vec<Resp> = std::thread::scope(|scope| {
        let started: Vec<_> = (0..24)
            .map(|_| scope.spawn(|| send(&agent(), "GET", &url, &[])))
            .collect();
        started
            .into_iter()
            .map(|thread| thread.join().expect("a client thread"))
            .collect()
    });
    for resp in &answers {
        assert_eq!(resp.status, 200, "{resp:?}");
        assert!(resp.has_ratelimit_headers(), "{resp:?}");
    }
    let mut remaining: Vec<i64> = answers.iter().map(Resp::remaining).collect();
    remaining.sort_unstable();
    assert_eq!(
        remaining,
        (0..24).collect::<Vec<i64>>(),
        "each request was charged once and told its own remainder"
    );
    let denied = gateway.get("/same");
    assert_eq!(denied.status, 429, "{denied:?}");
    assert!(denied.retry_after() > 0, "{denied:?}");
    assert_eq!(upstream.requests(), 24);
    gateway.metrics().assert_decisions(
        "24 allowed, then one denied",
        &[("default", "allowed", 24.0), ("default", "denied", 1.0)],
    );
}

#[test]
fn worker_threads_over_the_cap_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.toml");
    let head = "[server]\nlisten = \"127.0.0.1:1\"\nupstream = \"http://127.0.0.1:2\"\n";
    std::fs::write(&path, format!("{head}worker_threads = 5000\n{RULES}")).expect("write");
    let output = check_config(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "5000 threads passed: {stderr}");
    assert!(
        stderr.contains("[server] worker_threads must be 0 (one per CPU) to 1024"),
        "{stderr}"
    );
    std::fs::write(&path, format!("{head}worker_threads = 2\n{RULES}")).expect("write");
    let output = check_config(&path);
    assert!(output.status.success(), "{output:?}");
}
