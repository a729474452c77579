//! The container images and the compose demo, built and run as a user would: `make images`
//! (release binaries, the Debian base made by debootstrap when its tag is missing, then the
//! Dockerfiles under docker/), then compose.yaml's project on its own private networks.
//!
//! - The demo: requests through the gateway reach the upstream until a 429 with the
//!   rate-limit fields; the metrics count it; with the Redis container stopped, the
//!   `login` rule (on_redis_failure = "closed") answers 503 and the default rule a local limit.
//! - Two hosts: two gateway containers with one Redis container enforce one budget, the
//!   allowed requests of both together being the limit.
//! - The images themselves ([`images`]): the gateway's holds no shell and no program but
//!   rl-gateway, runs as user 10001, turns healthy by its own `healthcheck` and takes the
//!   system's CA roots from its bundle; the Valkey image loads the module and serves the
//!   demo through compose.valkey.yaml; their sizes are printed.
//!
//! Skipped, with a message, only where the `docker` command is absent; an engine that does
//! not answer, or no Compose, fails. Every project is taken down when its guard drops, also
//! when an assertion fails (its containers' logs are printed first).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod images;

/// The images' tag built by this test, so that a running `make demo-compose` (on `latest`)
/// keeps its images.
const TAG: &str = "containers-test";

/// How long containers may take to answer /healthz (a cold engine on a busy 2-core machine).
const START_LIMIT: Duration = Duration::from_secs(90);

/// The limit of the shared rule in the two-gateway check.
const SHARED_LIMIT: usize = 6;

fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").exists())
        .unwrap_or(manifest)
        .to_path_buf()
}

fn run(program: &str, args: &[&str], env: &[(&str, &OsStr)]) -> Output {
    let mut command = Command::new(program);
    command.args(args).current_dir(workspace_root());
    for (name, value) in env {
        command.env(name, value);
    }
    command
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?} did not run: {e}"))
}

fn run_ok(program: &str, args: &[&str], env: &[(&str, &OsStr)]) -> String {
    let output = run(program, args, env);
    assert!(
        output.status.success(),
        "{program} {args:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// How to call Compose here: the docker plugin (v2) or the standalone docker-compose. None,
/// with the reason printed, when there is no `docker` command at all.
fn compose_or_skip() -> Option<Vec<&'static str>> {
    if Command::new("docker").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no `docker` command, so the container images cannot be tested here");
        return None;
    }
    run_ok(
        "docker",
        &["version", "--format", "{{.Server.Version}}"],
        &[],
    );
    let answers = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if answers("docker", &["compose", "version"]) {
        Some(vec!["docker", "compose"])
    } else if answers("docker-compose", &["version"]) {
        Some(vec!["docker-compose"])
    } else {
        panic!("docker is here but Compose is not: install docker-compose or the compose plugin")
    }
}

/// `make images`, tagged [`TAG`]: the release build, the base images and the four images
/// (cached after the first time).
///
/// Without the variables Cargo gives a test binary (`CARGO_PKG_*`, `CARGO_MANIFEST_DIR`,
/// `OUT_DIR`...): build scripts that watch them (ring's does) would see another value than
/// in a `make images` from a shell, and the release build would start over each time one
/// follows the other.
fn build_images() {
    let mut command = Command::new("make");
    command
        .args(["--no-print-directory", "images"])
        .current_dir(workspace_root())
        .env("IMAGE_TAG", TAG);
    let from_cargo_test = |name: &str| {
        name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_MANIFEST_LINKS",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
            ]
            .contains(&name)
    };
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(from_cargo_test) {
            command.env_remove(name);
        }
    }
    let output = command.output().expect("make runs");
    assert!(
        output.status.success(),
        "make images failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One compose project of compose.yaml (and the files given after it) with its gateway
/// ports published on free loopback ports; `down` (containers, networks, volumes) when
/// dropped.
struct Project {
    compose: Vec<&'static str>,
    files: Vec<&'static str>,
    name: String,
    env: Vec<(&'static str, std::ffi::OsString)>,
}

impl Project {
    fn up(compose: &[&'static str], suffix: &str, config: Option<&Path>, gateways: u32) -> Self {
        Project::up_with(compose, &[], suffix, config, gateways)
    }

    /// As [`Project::up`], with `overrides` given after compose.yaml (`-f` each).
    fn up_with(
        compose: &[&'static str],
        overrides: &[&'static str],
        suffix: &str,
        config: Option<&Path>,
        gateways: u32,
    ) -> Self {
        // Every variable compose.yaml reads is set, so that the caller's own do not count.
        let config = config.map_or_else(|| "./docker/rl-gateway/config".into(), Into::into);
        let env = vec![
            ("RL_IMAGE_TAG", TAG.into()),
            ("RL_DEMO_HTTP", "127.0.0.1:".into()),
            ("RL_DEMO_ADMIN", "127.0.0.1:".into()),
            ("RL_DEMO_CONFIG", config),
        ];
        let mut files = vec!["compose.yaml"];
        files.extend(overrides);
        let project = Project {
            compose: compose.to_vec(),
            files,
            name: format!("rltest-{}-{suffix}", std::process::id()),
            env,
        };
        let scale = format!("gateway={gateways}");
        project.compose_ok(&["up", "-d", "--scale", &scale]);
        project
    }

    fn compose(&self, args: &[&str]) -> Output {
        let mut full: Vec<&str> = self.compose[1..].to_vec();
        full.extend(["-p", &self.name]);
        for file in &self.files {
            full.extend(["-f", file]);
        }
        full.extend(args);
        let env: Vec<(&str, &OsStr)> = self.env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
        run(self.compose[0], &full, &env)
    }

    fn compose_ok(&self, args: &[&str]) -> String {
        let output = self.compose(args);
        assert!(
            output.status.success(),
            "compose {args:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The host address of the `index`th gateway's (1-based) published `port`.
    fn gateway_address(&self, index: u32, port: u16) -> String {
        let index = index.to_string();
        let port = port.to_string();
        let out = self.compose_ok(&["port", "--index", &index, "gateway", &port]);
        let address = out.trim().to_owned();
        assert!(
            address.starts_with("127.0.0.1:"),
            "published on {address:?}"
        );
        address
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.compose(&["logs", "--no-color", "--tail", "40"]);
            eprintln!("{}", String::from_utf8_lossy(&logs.stdout));
        }
        let down = self.compose(&["down", "--volumes", "--remove-orphans", "--timeout", "2"]);
        if !down.status.success() {
            eprintln!(
                "compose down of {} failed: {}",
                self.name,
                String::from_utf8_lossy(&down.stderr)
            );
        }
    }
}

/// An answer: status, header fields (lower-case names) and body.
struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

fn request(method: &str, url: &str) -> Answer {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    let response = match agent.request(method, url).call() {
        Ok(response) => response,
        Err(ureq::Error::Status(_, response)) => response,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = response.status();
    let headers = response
        .headers_names()
        .into_iter()
        .filter_map(|name| {
            let value = response.header(&name)?.to_owned();
            Some((name.to_ascii_lowercase(), value))
        })
        .collect();
    let body = response.into_string().unwrap_or_default();
    Answer {
        status,
        headers,
        body,
    }
}

/// Waits until the admin listener at `admin` answers /healthz with 200, a bound on how long
/// containers take to start rather than a timed assertion.
fn wait_healthy(admin: &str) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(2))
        .build();
    let deadline = Instant::now() + START_LIMIT;
    let url = format!("http://{admin}/healthz");
    while !agent.get(&url).call().is_ok_and(|r| r.status() == 200) {
        assert!(Instant::now() < deadline, "{url} never answered 200");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs the image's own HEALTHCHECK command inside each running container of `service`,
/// as Docker would (without waiting for Docker's first interval): it must succeed.
fn assert_healthcheck_passes(project: &Project, service: &str) {
    let ids = project.compose_ok(&["ps", "-q", service]);
    for id in ids.lines() {
        let test = run_ok(
            "docker",
            &["inspect", "-f", "{{json .Config.Healthcheck.Test}}", id],
            &[],
        );
        let command: Vec<String> = test
            .trim()
            .strip_prefix(r#"["CMD","#)
            .and_then(|rest| rest.strip_suffix(']'))
            .unwrap_or_else(|| panic!("{service}: no exec-form HEALTHCHECK: {test}"))
            .split(',')
            .map(|word| word.trim_matches('"').to_owned())
            .collect();
        let mut args = vec!["exec", id];
        args.extend(command.iter().map(String::as_str));
        run_ok("docker", &args, &[]);
    }
}

/// The value of the metric line `name{labels}` in Prometheus text, 0 when absent.
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn assert_rate_limit_fields(answer: &Answer, what: &str) {
    for field in ["ratelimit-policy", "ratelimit"] {
        assert!(
            answer.headers.contains_key(field),
            "{what}: no {field} field in {:?}",
            answer.headers
        );
    }
}

/// Requests to `/home` through the demo's gateway at `http` until the first 429 (the
/// default rule: 5 a minute), checked as the demo promises: a 200 from the upstream first,
/// the rate-limit fields on both, Retry-After on the 429, which the metrics at `admin`
/// count.
fn home_until_429(http: &str, admin: &str) {
    // The default rule allows 5 per minute; a fixed window that turns over during the loop
    // allows 5 more at most, so a 429 comes within 11 requests.
    let mut answers: Vec<Answer> = Vec::new();
    while !matches!(answers.last(), Some(a) if a.status == 429) {
        let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
        assert!(
            statuses.len() < 11,
            "no 429 within 11 requests: {statuses:?}"
        );
        answers.push(request("GET", &format!("http://{http}/home")));
    }
    let first = &answers[0];
    assert_eq!(first.status, 200, "first request: {}", first.body);
    assert!(
        first.body.starts_with("GET /home"),
        "upstream's echo: {}",
        first.body
    );
    assert_rate_limit_fields(first, "200");
    let denied = answers.last().expect("a 429");
    assert_rate_limit_fields(denied, "429");
    assert!(
        denied.headers.contains_key("retry-after"),
        "429 without Retry-After"
    );
    let metrics = request("GET", &format!("http://{admin}/metrics")).body;
    let series = r#"rl_gateway_decisions_total{rule="default",outcome="denied"}"#;
    assert!(
        metric(&metrics, series) >= 1.0,
        "{series} not counted:\n{metrics}"
    );
}

/// The demo as compose.yaml runs it: 200s through to the upstream, then a 429, counted in
/// the metrics; Redis stopped: `login` closes (503), the default rule's local limit decides.
fn demo_through_gateway(compose: &[&'static str]) {
    let project = Project::up(compose, "demo", None, 1);
    let http = project.gateway_address(1, 8080);
    let admin = project.gateway_address(1, 9090);
    wait_healthy(&admin);
    home_until_429(&http, &admin);
    images::turns_healthy(&project, "gateway");
    assert_healthcheck_passes(&project, "gateway");
    assert_healthcheck_passes(&project, "redis");

    project.compose_ok(&["stop", "--timeout", "5", "redis"]);
    let login = request("POST", &format!("http://{http}/auth/login?status=401"));
    assert_eq!(
        login.status, 503,
        "login with Redis stopped: {}",
        login.body
    );
    // Another endpoint: /home's denial is still in the deny cache, which answers first.
    let other = request("GET", &format!("http://{http}/products"));
    assert_eq!(other.status, 200, "the local limit allows: {}", other.body);
    let metrics = request("GET", &format!("http://{admin}/metrics")).body;
    let closed = r#"rl_gateway_decisions_total{rule="login",outcome="fail_closed"}"#;
    assert!(
        metric(&metrics, closed) >= 1.0,
        "{closed} not counted:\n{metrics}"
    );
    let local = r#"rl_gateway_decisions_total{rule="default",outcome="local_allowed"}"#;
    assert!(
        metric(&metrics, local) >= 1.0,
        "{local} not counted:\n{metrics}"
    );
}

/// The rules of the two-gateway check: one budget for every client, a token bucket that
/// refills one request per 10 minutes (none within the test), and no local decision
/// (a failure answers 503, which the check counts apart).
const SHARED_RULES: &str = r#"
[server]
listen = "0.0.0.0:8080"
admin_listen = "0.0.0.0:9090"
mode = "proxy"
upstream = "http://upstream:9000"
trusted_proxies = []

[redis]
url = "redis://redis:6379"
deadline_ms = 1000

[default]
key = "global"
limits = ["6/1h"]
algorithm = "token"
on_redis_failure = "closed"
"#;

/// Two gateway containers, one Redis container: requests sent to both in turn are allowed
/// SHARED_LIMIT times in all, not SHARED_LIMIT times each.
fn two_gateways_share_one_budget(compose: &[&'static str]) {
    let config = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(config.path().join("config.toml"), SHARED_RULES).expect("write the rules");
    // The gateway runs as an unprivileged user in its container: it must read the mount.
    let readable = |path: &Path, mode| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    readable(config.path(), 0o755);
    readable(&config.path().join("config.toml"), 0o644);

    let project = Project::up(compose, "shared", Some(config.path()), 2);
    let ids = project.compose_ok(&["ps", "-q", "gateway"]);
    assert_eq!(ids.lines().count(), 2, "two gateway containers: {ids}");
    let gateways: Vec<String> = (1..=2).map(|i| project.gateway_address(i, 8080)).collect();
    for i in 1..=2 {
        wait_healthy(&project.gateway_address(i, 9090));
    }

    let mut allowed = [0usize; 2];
    let mut denied = 0;
    for round in 0..2 * SHARED_LIMIT + 2 {
        let which = round % 2;
        let answer = request("GET", &format!("http://{}/shared", gateways[which]));
        match answer.status {
            200 => allowed[which] += 1,
            429 => denied += 1,
            other => panic!("gateway {which}: {other} {}", answer.body),
        }
    }
    assert_eq!(
        allowed.iter().sum::<usize>(),
        SHARED_LIMIT,
        "allowed per gateway {allowed:?}: one budget of {SHARED_LIMIT} in all"
    );
    assert!(
        allowed.iter().all(|&n| n > 0),
        "both gateways allowed some: {allowed:?}"
    );
    assert_eq!(denied, SHARED_LIMIT + 2);
}

#[test]
fn images_and_compose_demo() {
    let Some(compose) = compose_or_skip() else {
        return;
    };
    let started = Instant::now();
    build_images();
    let built = started.elapsed();
    let config = run_ok(
        "docker",
        &[
            "run",
            "--rm",
            &format!("rl-gateway:{TAG}"),
            "--check-config",
            "/etc/rl-gateway/config.toml",
        ],
        &[],
    );
    assert!(config.contains("valid"), "the image's rules: {config}");
    let demo_started = Instant::now();
    demo_through_gateway(&compose);
    let demo = demo_started.elapsed();
    two_gateways_share_one_budget(&compose);
    images::gateway_image_is_shell_less(TAG);
    images::gateway_image_finds_the_ca_bundle(TAG);
    images::valkey_demo(&compose);
    images::print_sizes(TAG);
    eprintln!(
        "containers: images built in {:.1} s, demo {:.1} s, the rest {:.1} s, whole test {:.1} s",
        built.as_secs_f64(),
        demo.as_secs_f64(),
        (started.elapsed() - built - demo).as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
