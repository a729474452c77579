//! The gateway's life as an operator sees it: the command line (`--help`, `--version`, no
//! arguments), the log (text or JSON, filtered by `RL_LOG`), readiness (`/readyz` answers
//! 503 against a Redis without the module and says so in the log, 200 once the module is
//! there) and the graceful stop on SIGTERM (the listener closes, a request in flight
//! finishes, its lease is given back, exit 0; after the drain time what is left is cut).
//!
//! Requests are held in flight by the demo upstream (`hold=1` until `/__release`), and
//! every wait is a poll with a generous deadline: nothing depends on how fast anything runs.

use std::fs::{self, File};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use testkit::gateway::*;

const POLL: Duration = Duration::from_secs(30);

/// What the log says when the module (and the Functions library) is missing, word for
/// word up to the fix.
const NO_MODULE: &str = concat!(
    "neither the module (RL.HIT unknown) nor the Functions library ratelimit ",
    env!("CARGO_PKG_VERSION"),
    " is loaded on the server; load the module (redis-server --loadmodule"
);

/// One `concurrency` rule whose lease outlives every poll here: a slot found free was freed
/// by the gateway, not by the lease's end.
const LEASED: &str =
    "[[rule]]\nname = \"llm\"\npath = \"/slow\"\nconcurrency = 1\nlease_ttl = \"300s\"\n";

/// The lease key of rule `llm` for the test client.
const LEASE_KEY: &str = "rl:{ip:127.0.0.1}:llm:lease";

/// `rl-gateway` with `args` and nothing else, run to completion.
fn run_with(args: &[&str]) -> Output {
    Command::new(gateway_binary())
        .args(args)
        .env_remove("RL_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("rl-gateway runs")
}

/// `RL.LEASES key 1`: how many leases are held on `key` now.
fn leases_in_redis(redis: &Server, key: &str) -> i64 {
    let reply: Vec<i64> = redis::cmd("RL.LEASES")
        .arg(key)
        .arg(1)
        .query(&mut redis.conn())
        .expect("RL.LEASES");
    reply[0]
}

/// A gateway started with the caller's arguments and environment besides `--config`, its
/// stderr in a file, killed on drop: the harness's [`Gateway`] takes neither, nor gives
/// the exit status of a process that stops by itself.
struct Process {
    child: Child,
    port: u16,
    admin_port: u16,
    log_path: PathBuf,
    _dir: TempDir,
}

impl Process {
    /// In front of `upstream`, deciding with the server on `redis_port` with `rules`.
    fn start(
        upstream: &Upstream,
        redis_port: u16,
        rules: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Process {
        Process::start_with(upstream, &redis_section(redis_port, ""), rules, args, env)
    }

    /// As [`Process::start`], with `redis` as the `[redis]` section.
    fn start_with(
        upstream: &Upstream,
        redis: &str,
        rules: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Process {
        let dir = tempfile::Builder::new()
            .prefix("rl-lifecycle-")
            .tempdir()
            .expect("temp dir");
        let (port, admin_port) = (free_port(), free_port());
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin_port}\"\n\
             {}{redis}{rules}\n",
            upstream.server_line(),
        );
        let config_path = dir.path().join("rules.toml");
        fs::write(&config_path, config).expect("write the config");
        let log_path = dir.path().join("gateway.log");
        let log = File::create(&log_path).expect("gateway log");
        let child = Command::new(gateway_binary())
            .arg("--config")
            .arg(&config_path)
            .args(args)
            .env_remove("RL_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("rl-gateway starts");
        let mut process = Process {
            child,
            port,
            admin_port,
            log_path,
            _dir: dir,
        };
        process.wait_healthy();
        process
    }

    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + START_LIMIT;
        let agent = agent();
        let health = self.admin_url("/healthz");
        loop {
            let healthy = agent
                .get(&health)
                .timeout(Duration::from_secs(2))
                .call()
                .is_ok_and(|r| r.status() == 200);
            if healthy && self.accepts() {
                return;
            }
            let exited = self.child.try_wait().ok().flatten();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "rl-gateway did not come up ({exited:?}); log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the main listener takes a connection now.
    fn accepts(&self) -> bool {
        TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_secs(2))
            .is_ok()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    fn admin_get(&self, path: &str) -> Resp {
        send(&agent(), "GET", &self.admin_url(path), &[])
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn wait_log(&self, needle: &str) {
        wait_until(POLL, &format!("the log says {needle:?}"), || {
            self.log().contains(needle)
        });
    }

    /// Replaces the config file with `text`, at once (a sibling renamed over it): the
    /// gateway's poll never reads half of it.
    fn rewrite(&self, text: &str) {
        let new = self._dir.path().join("rules.toml.new");
        fs::write(&new, text).expect("write the new config");
        fs::rename(&new, self._dir.path().join("rules.toml")).expect("rename the config");
    }

    fn signal(&self, name: &str) {
        signal(self.child.id(), name);
    }

    /// `GET path` sent on its own thread: the answer's status, 0 when the connection broke.
    fn in_flight(&self, path: &str) -> std::thread::JoinHandle<u16> {
        let url = self.url(path);
        std::thread::spawn(move || match agent().get(&url).call() {
            Ok(resp) => resp.status(),
            Err(ureq::Error::Status(status, _)) => status,
            Err(_) => 0,
        })
    }

    /// Waits (generously) for the process to exit by itself.
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + POLL;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "rl-gateway did not exit; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- rl-gateway log ---\n{}\n---", self.log());
        }
    }
}

// ---------------------------------------------------------------------------------------
// The command line
// ---------------------------------------------------------------------------------------

#[test]
fn help_goes_to_stdout_and_exits_0() {
    for flag in ["--help", "-h"] {
        let out = run_with(&[flag]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{flag}: {out:?}");
        assert!(out.stderr.is_empty(), "{flag}: {out:?}");
        for part in [
            "Usage: rl-gateway",
            "--config <FILE>",
            "--check-config <FILE>",
            "--log-format",
            "--drain-seconds",
        ] {
            assert!(stdout.contains(part), "{flag}: no {part:?} in\n{stdout}");
        }
    }
}

#[test]
fn version_names_the_commit_and_exits_0() {
    // The commit as the build saw it: the tests are built from the same checkout.
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(workspace_root())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    let expected = format!("rl-gateway {} ({commit})\n", env!("CARGO_PKG_VERSION"));
    for flag in ["--version", "-V"] {
        let out = run_with(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected, "{flag}");
        assert!(out.stderr.is_empty(), "{flag}: {out:?}");
    }
}

#[test]
fn no_arguments_or_a_wrong_one_is_a_usage_error_on_stderr() {
    let cases: [&[&str]; 4] = [
        &[],
        &["--bogus"],
        &["--config", "a.toml", "--check-config", "b.toml"],
        &["--config", "a.toml", "--log-format", "xml"],
    ];
    for args in cases {
        let out = run_with(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        assert!(stderr.contains("--help"), "{args:?}: {stderr}");
        if args.is_empty() {
            assert!(stderr.contains("Usage: rl-gateway"), "{stderr}");
        }
    }
}

#[test]
fn an_invalid_log_filter_is_refused() {
    let out = Command::new(gateway_binary())
        .args(["--config", "never-read.toml"])
        .env("RL_LOG", "warn,rl_gateway=loud")
        .stdin(Stdio::null())
        .output()
        .expect("rl-gateway runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr.contains("RL_LOG"), "{stderr}");
}

// ---------------------------------------------------------------------------------------
// Logs
// ---------------------------------------------------------------------------------------

#[test]
fn text_lines_start_with_an_rfc3339_time_and_a_level() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let upstream = Upstream::start();
    let gateway = Process::start(&upstream, redis.port(), "", &[], &[]);
    gateway.wait_log("listening on");
    let log = gateway.log();
    let line = log
        .lines()
        .find(|line| line.contains("listening on"))
        .expect("the line is there");
    let mut words = line.split_whitespace();
    let time = words.next().unwrap_or_default();
    assert!(
        chrono::DateTime::parse_from_rfc3339(time).is_ok(),
        "not an RFC 3339 time: {line}"
    );
    assert_eq!(words.next(), Some("INFO"), "{line}");
}

#[test]
fn json_lines_parse_with_time_level_and_message() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let upstream = Upstream::start();
    let gateway = Process::start(&upstream, redis.port(), "", &["--log-format", "json"], &[]);
    gateway.wait_log("RL.HIT known");
    let log = gateway.log();
    let mut messages = Vec::new();
    for line in log.lines() {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let field = |name: &str| event[name].as_str().map(str::to_owned);
        let time = field("timestamp").unwrap_or_else(|| panic!("no time: {line}"));
        assert!(
            chrono::DateTime::parse_from_rfc3339(&time).is_ok(),
            "{line}"
        );
        let level = field("level").unwrap_or_else(|| panic!("no level: {line}"));
        assert!(
            ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(&level.as_str()),
            "{line}"
        );
        messages.push((level, field("message").unwrap_or_else(|| panic!("{line}"))));
    }
    assert!(
        messages
            .iter()
            .any(|(level, text)| level == "INFO" && text.starts_with("listening on")),
        "{messages:?}"
    );
}

#[test]
fn rl_log_warn_hides_info_lines_and_log_level_wins_over_it() {
    let redis = ServerConfig::new(Flavor::Redis).without_module().start();
    let upstream = Upstream::start();
    let quiet = Process::start(&upstream, redis.port(), "", &[], &[("RL_LOG", "warn")]);
    // An error line shows that the log is written at all.
    quiet.wait_log(NO_MODULE);
    let log = quiet.log();
    assert!(!log.contains("listening on"), "{log}");
    assert!(!log.contains(" INFO "), "{log}");
    assert!(log.contains(" ERROR "), "{log}");

    let told = Process::start(
        &upstream,
        redis.port(),
        "",
        &["--log-level", "info"],
        &[("RL_LOG", "warn")],
    );
    told.wait_log("listening on");
}

// ---------------------------------------------------------------------------------------
// Readiness
// ---------------------------------------------------------------------------------------

#[test]
fn readyz_is_503_without_the_module_and_200_once_it_is_loaded() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor)
            .without_module()
            .arg("enable-module-command", "yes")
            .start();
        let upstream = Upstream::start();
        let gateway = Process::start(&upstream, redis.port(), "", &[], &[]);
        gateway.wait_log(NO_MODULE);
        let resp = gateway.admin_get("/readyz");
        assert_eq!(resp.status, 503, "{flavor:?}: {resp:?}");
        assert_eq!(
            resp.body,
            concat!(
                "not ready: neither the module (RL.HIT unknown) nor the Functions library \
                 ratelimit ",
                env!("CARGO_PKG_VERSION"),
                " is loaded on the server\n"
            ),
            "{flavor:?}"
        );
        let health = gateway.admin_get("/healthz");
        assert_eq!(health.status, 200, "{flavor:?}: liveness only: {health:?}");
        assert_eq!(
            gateway.log().matches(NO_MODULE).count(),
            1,
            "{flavor:?}: once per change, not per beat"
        );

        let module = testkit::module_path().to_string_lossy().into_owned();
        let _: () = redis::cmd("MODULE")
            .arg("LOAD")
            .arg(&module)
            .query(&mut redis.conn())
            .expect("MODULE LOAD");
        wait_until(POLL, "/readyz answers 200", || {
            gateway.admin_get("/readyz").status == 200
        });
        assert_eq!(gateway.admin_get("/readyz").body, "ready\n", "{flavor:?}");
        gateway.wait_log("RL.HIT known");
    });
}

#[test]
fn readyz_is_200_with_the_module() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateway = Process::start(&upstream, redis.port(), "", &[], &[]);
        wait_until(POLL, "/readyz answers 200", || {
            gateway.admin_get("/readyz").status == 200
        });
        assert!(!gateway.log().contains(NO_MODULE), "{flavor:?}");
    });
}

// ---------------------------------------------------------------------------------------
// Graceful stop
// ---------------------------------------------------------------------------------------

/// A gateway with the [`LEASED`] rule, and one request held in flight by the upstream
/// with its lease taken.
fn one_request_in_flight(
    flavor: Flavor,
    args: &[&str],
) -> (Server, Upstream, Process, std::thread::JoinHandle<u16>) {
    let redis = ServerConfig::new(flavor).start();
    let upstream = Upstream::start();
    let gateway = Process::start(&upstream, redis.port(), LEASED, args, &[]);
    let held = gateway.in_flight("/slow?hold=1");
    wait_until(POLL, "the request reaches the upstream", || {
        upstream.requests() == 1
    });
    assert_eq!(leases_in_redis(&redis, LEASE_KEY), 1, "{flavor:?}");
    (redis, upstream, gateway, held)
}

#[test]
fn sigterm_lets_the_request_in_flight_finish_then_exits_0_with_its_lease_given_back() {
    each_flavor(|flavor| {
        let (redis, upstream, mut gateway, held) = one_request_in_flight(flavor, &[]);
        gateway.signal("TERM");
        gateway.wait_log("main listener closed");
        assert!(
            !gateway.accepts(),
            "{flavor:?}: new connections are refused"
        );
        let ready = gateway.admin_get("/readyz");
        assert_eq!(ready.status, 503, "{flavor:?}: {ready:?}");
        assert!(
            ready.body.contains("shutting down"),
            "{flavor:?}: {ready:?}"
        );

        upstream.release_held();
        assert_eq!(held.join().expect("the client thread"), 200, "{flavor:?}");
        let status = gateway.wait_exit();
        assert_eq!(status.code(), Some(0), "{flavor:?}: {status:?}");
        assert_eq!(leases_in_redis(&redis, LEASE_KEY), 0, "{flavor:?}");
        let log = gateway.log();
        for step in [
            "SIGTERM: stopping",
            "main listener drained",
            "admin listener closed",
            "stopped",
        ] {
            assert!(log.contains(step), "{flavor:?}: no {step:?} in\n{log}");
        }
    });
}

#[test]
fn after_the_drain_time_the_request_is_cut_and_its_lease_still_given_back() {
    let (redis, _upstream, mut gateway, held) =
        one_request_in_flight(Flavor::Redis, &["--drain-seconds", "1"]);
    gateway.signal("TERM");
    // The upstream never answers: the drain time ends it.
    assert_eq!(held.join().expect("the client thread"), 0, "cut");
    let status = gateway.wait_exit();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(leases_in_redis(&redis, LEASE_KEY), 0);
    let log = gateway.log();
    assert!(log.contains("cutting the connections still open"), "{log}");
    assert!(log.contains("every lease given back"), "{log}");
}

#[test]
fn a_second_signal_stops_at_once() {
    let (_redis, _upstream, mut gateway, _held) =
        one_request_in_flight(Flavor::Redis, &["--drain-seconds", "300"]);
    gateway.signal("TERM");
    gateway.wait_log("main listener closed");
    gateway.signal("INT");
    let status = gateway.wait_exit();
    assert_eq!(status.code(), Some(1), "{status:?}");
    gateway.wait_log("SIGINT again: stopping at once");
}

#[test]
fn sigterm_closes_and_drains_the_envoy_listener_too() {
    let yaml = tempfile::tempdir().expect("temp dir");
    fs::write(
        yaml.path().join("api.yaml"),
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
    )
    .expect("write the descriptors");
    let grpc_port = free_port();
    let envoy = format!(
        "[envoy]\nlisten = \"127.0.0.1:{grpc_port}\"\ndescriptors = \"{}\"\n",
        yaml.path().display()
    );
    let redis = ServerConfig::new(Flavor::Redis).start();
    let upstream = Upstream::start();
    let mut gateway = Process::start(&upstream, redis.port(), &envoy, &[], &[]);
    gateway.wait_log("Envoy rate limit service (gRPC)");
    let grpc = ([127, 0, 0, 1], grpc_port).into();
    assert!(TcpStream::connect_timeout(&grpc, Duration::from_secs(2)).is_ok());
    gateway.signal("TERM");
    let status = gateway.wait_exit();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let log = gateway.log();
    for step in [
        "Envoy gRPC listener closed",
        "Envoy gRPC listener drained",
        "stopped",
    ] {
        assert!(log.contains(step), "no {step:?} in\n{log}");
    }
}

/// The JSON lines of the events, each as an object.
fn json_events(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// The one event whose message starts with `start`, asserted to be alone (each is logged
/// once per transition, not per request).
fn only_event<'a>(events: &'a [serde_json::Value], start: &str) -> &'a serde_json::Value {
    let found: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["message"].as_str().is_some_and(|m| m.starts_with(start)))
        .collect();
    assert_eq!(found.len(), 1, "{start:?}: {found:#?}");
    found[0]
}

/// A rule whose policy no one set (every call a module error) and a plain one.
const FIELD_RULES: &str = "[[rule]]\nname = \"strict\"\npath = \"/strict/**\"\n\
    policy = \"gw-never-set\"\n\n[[rule]]\nname = \"plain\"\npath = \"/plain\"\n\
    limits = [\"1000/1h\"]\n";

/// With `--log-format json`, the events about a rule, a key or Redis carry fields a log
/// pipeline selects on: a module error names its rule, its key by hash (never the key,
/// which holds the client's address), the outcome and the failure; the circuit breaker's
/// opening and closing say so and why; a refused reload says `outcome: refused`. The
/// breaker's transitions and the reload are one line each, however many requests came.
#[test]
fn json_events_carry_rule_key_hash_outcome_and_failure_fields() {
    let redis = server_with_policies(Flavor::Redis);
    let upstream = Upstream::start();
    let redis_lines = redis_section_with(
        redis.port(),
        "deadline_ms = 200\nbreaker_failures = 2\nbreaker_open_ms = 300",
    );
    let gateway = Process::start_with(
        &upstream,
        &redis_lines,
        FIELD_RULES,
        &["--log-format", "json"],
        &[],
    );
    let get = |path: &str| send(&agent(), "GET", &gateway.url(path), &[]).status;
    for _ in 0..3 {
        assert_eq!(get("/strict/x"), 503, "on_module_error = closed");
    }

    // Redis stopped: calls time out until the breaker opens; back, a probe closes it.
    let stopped = Stopped::new(redis.pid());
    wait_until(POLL, "the breaker opens", || {
        assert_eq!(get("/plain"), 200, "fail open");
        gateway.log().contains("circuit breaker open")
    });
    for _ in 0..3 {
        assert_eq!(get("/plain"), 200, "skipped by the open breaker");
    }
    stopped.resume();
    wait_until(POLL, "the breaker closes", || {
        assert_eq!(get("/plain"), 200);
        gateway.log().contains("circuit breaker closed")
    });

    // Found by the gateway's poll of the file (every second by default).
    gateway.rewrite("[server\nnot toml");
    gateway.wait_log("refused");

    let events = json_events(&gateway.log());
    // At most one line a second per rule: the first, at least.
    let error = events
        .iter()
        .find(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("rule 'strict'"))
        })
        .unwrap_or_else(|| panic!("no module error: {events:#?}"));
    assert_eq!(error["rule"], "strict", "{error}");
    // printf %s 'rl:{ip:127.0.0.1}:strict' | sha256sum | cut -c1-12
    assert_eq!(error["key_hash"], "f039208376c0", "{error}");
    assert_eq!(error["outcome"], "fail_closed", "{error}");
    assert_eq!(error["failure"], "error", "{error}");
    assert!(!error.to_string().contains("127.0.0.1"), "no key: {error}");

    let node = format!("127.0.0.1:{}", redis.port());
    let opened = only_event(&events, "circuit breaker open");
    assert_eq!(opened["breaker"], "open", "{opened}");
    assert_eq!(opened["failure"], "timeout", "{opened}");
    assert_eq!(opened["level"], "WARN", "{opened}");
    assert_eq!(opened["redis_node"], node.as_str(), "{opened}");
    let closed = only_event(&events, "circuit breaker closed");
    assert_eq!(closed["breaker"], "closed", "{closed}");
    assert_eq!(closed["redis_node"], node.as_str(), "{closed}");

    // One change, one reload, one line.
    let refused = only_event(&events, "rules file");
    assert_eq!(refused["outcome"], "refused", "{refused}");
}

/// With one server (`url`), the heartbeat's lines about Redis name it in `redis_node`:
/// lost (with the failure), back on the same address, and missing the module after the
/// restart (a server started again without `--loadmodule`).
#[test]
fn json_lines_of_a_lost_server_name_the_node() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let node = format!("127.0.0.1:{}", redis.port());
    let upstream = Upstream::start();
    let gateway = Process::start(&upstream, redis.port(), "", &["--log-format", "json"], &[]);
    gateway.wait_log("RL.HIT known");
    let config = redis.shutdown("NOSAVE");
    gateway.wait_log("Redis does not answer");
    let restarted = config.without_module().start();
    gateway.wait_log(NO_MODULE);
    drop(restarted);

    let events = json_events(&gateway.log());
    let lost = only_event(&events, "Redis does not answer");
    assert_eq!(lost["redis_node"], node.as_str(), "{lost}");
    assert!(lost["failure"].is_string(), "{lost}");
    let back = only_event(&events, "Redis answers again");
    assert_eq!(back["redis_node"], node.as_str(), "{back}");
    let missing = only_event(&events, NO_MODULE);
    assert_eq!(missing["redis_node"], node.as_str(), "{missing}");
    assert_eq!(missing["failure"], "no_module", "{missing}");
}
