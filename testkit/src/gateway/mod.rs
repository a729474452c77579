//! Shared harness of the gateway's integration tests: real processes on free loopback ports,
//! each killed when its handle is dropped.
//!
//! - Redis / Valkey with the module: the crate's root, re-exported here.
//! - [`Upstream`]: the `demo-upstream` binary, which echoes each request (method, path and
//!   query on the first line of the body, then one `name: value` line per request header)
//!   and counts what it served (`GET /__requests`).
//! - [`Gateway`]: the `rl-gateway` binary, run with a TOML file written into its own
//!   temporary directory, stderr and stdout going to a log file there.
//!
//! HTTP goes through ureq 2; [`Resp`] is every answer, whatever its status, with helpers
//! that parse `RateLimit-Policy` and `RateLimit` as RFC 8941 Lists (sfv).
pub mod crowd;
pub mod envoy;
pub mod raw_http;
mod spent;

use crate as redis_support;

#[allow(unused_imports)]
pub use spent::{assert_spent, Spent};

#[allow(unused_imports)]
pub use redis_support::{
    each_flavor, free_port, primary_with_replica, wait_until, workspace_root, Flavor, Server,
    ServerConfig, FLAVORS,
};

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// How long a process may take to come up (a debug build on a busy 2-core machine).
pub const START_LIMIT: Duration = Duration::from_secs(30);

/// The path of the gateway binary Cargo built for these tests.
pub fn gateway_binary() -> PathBuf {
    built_binary("rl-gateway")
}

/// The path of the demo upstream binary Cargo built for these tests.
pub fn upstream_binary() -> PathBuf {
    built_binary("demo-upstream")
}

/// A binary of rl-gateway that Cargo built before it ran the gateway's integration tests:
/// `CARGO_BIN_EXE_<name>` when Cargo set it at run time, else the one beside the `deps/`
/// directory the running test binary is in (`target/debug/deps/it-…`), where Cargo puts
/// a package's binaries. (`env!("CARGO_BIN_EXE_…")` only works in the package's own tests.)
fn built_binary(name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(format!("CARGO_BIN_EXE_{name}")) {
        return PathBuf::from(path);
    }
    let test_binary = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test_binary
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| {
            panic!(
                "{} is not in <target>/<profile>/deps",
                test_binary.display()
            )
        });
    let path = profile_dir.join(name);
    assert!(
        path.exists(),
        "{} missing: build rl-gateway's binaries",
        path.display()
    );
    path
}

/// Sends `kill -<signal> <pid>` (`STOP`, `CONT`, `HUP`, `TERM`...), which must succeed.
pub fn signal(pid: u32, signal: &str) {
    assert!(pid != 0, "no process to send SIG{signal} to");
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// Keeps a process stopped (SIGSTOP) and continues it (SIGCONT) when dropped, also when
/// the test panics, so that nothing is left frozen.
pub struct Stopped {
    pid: u32,
    resumed: bool,
}

impl Stopped {
    pub fn new(pid: u32) -> Stopped {
        signal(pid, "STOP");
        Stopped {
            pid,
            resumed: false,
        }
    }

    pub fn resume(mut self) {
        self.cont();
    }

    fn cont(&mut self) {
        if !self.resumed {
            self.resumed = true;
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(self.pid.to_string())
                .status();
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.cont();
    }
}

// ---------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------

/// An HTTP client with generous timeouts that never follows redirects.
pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .redirects(0)
        .build()
}

/// One HTTP answer, whatever its status.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    /// Every header line, names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Sends `method url` with `headers`; a 4xx or 5xx is an answer like any other, only a
/// transport failure panics.
pub fn send(agent: &ureq::Agent, method: &str, url: &str, headers: &[(&str, &str)]) -> Resp {
    let mut request = agent.request(method, url);
    for (name, value) in headers {
        request = request.set(name, value);
    }
    let response = match request.call() {
        Ok(response) => response,
        Err(ureq::Error::Status(_, response)) => response,
        Err(err) => panic!("{method} {url}: {err}"),
    };
    let status = response.status();
    let mut names = response.headers_names();
    names.dedup();
    let mut seen = Vec::new();
    let mut headers = Vec::new();
    for name in names {
        if seen.contains(&name) {
            continue;
        }
        for value in response.all(&name) {
            headers.push((name.clone(), value.to_string()));
        }
        seen.push(name);
    }
    let mut body = String::new();
    response
        .into_reader()
        .read_to_string(&mut body)
        .unwrap_or_else(|e| panic!("{method} {url}: reading the body: {e}"));
    Resp {
        status,
        headers,
        body,
    }
}

/// Sends `GET path` over a fresh TCP connection with the raw header lines `headers` (each
/// ending in CRLF; bytes ureq would refuse, such as obs-text, are fine) and
/// `Connection: close`, and returns the status code of the answer.
pub fn raw_get(port: u16, path: &str, headers: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n").into_bytes();
    request.extend_from_slice(headers);
    request.extend_from_slice(b"Connection: close\r\n\r\n");
    stream.write_all(&request).expect("send the request");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read the answer");
    let text = String::from_utf8_lossy(&answer);
    let status_line = text.lines().next().unwrap_or("");
    status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("GET {path}: not an HTTP answer: {text:?}"))
}

impl Resp {
    /// Every value of the header `name` (any case), in order.
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The header `name`, its lines joined with ", " (as a structured-field List may be
    /// split), `None` when absent.
    pub fn header(&self, name: &str) -> Option<String> {
        let values = self.header_values(name);
        (!values.is_empty()).then(|| values.join(", "))
    }

    pub fn has(&self, name: &str) -> bool {
        !self.header_values(name).is_empty()
    }

    /// Whether the answer carries either of the RateLimit headers.
    pub fn has_ratelimit_headers(&self) -> bool {
        self.has("ratelimit") || self.has("ratelimit-policy")
    }

    /// `RateLimit-Policy`, parsed; panics when absent or malformed.
    pub fn policy(&self) -> Vec<PolicyTier> {
        let value = self
            .header("ratelimit-policy")
            .unwrap_or_else(|| panic!("no RateLimit-Policy header in {self:?}"));
        parse_policy(&value)
    }

    /// `RateLimit`, parsed; panics when absent or malformed.
    pub fn limits(&self) -> Vec<LimitTier> {
        let value = self
            .header("ratelimit")
            .unwrap_or_else(|| panic!("no RateLimit header in {self:?}"));
        parse_ratelimit(&value)
    }

    /// The `r` of the only tier of `RateLimit`.
    pub fn remaining(&self) -> i64 {
        let tiers = self.limits();
        assert_eq!(tiers.len(), 1, "one tier expected: {self:?}");
        tiers[0].r
    }

    /// `Retry-After` as whole seconds: digits only (no date, no fraction), at least 1.
    pub fn retry_after(&self) -> u64 {
        let values = self.header_values("retry-after");
        assert_eq!(values.len(), 1, "exactly one Retry-After: {self:?}");
        let value = values[0];
        assert!(
            !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()),
            "Retry-After is not a whole number of seconds: {value:?}"
        );
        let seconds: u64 = value.parse().expect("Retry-After fits in u64");
        assert!(seconds >= 1, "Retry-After is at least 1: {value:?}");
        seconds
    }

    /// The value of request header `name` as the demo upstream echoed it in its body
    /// (one `name: value` line per header after the request line).
    pub fn upstream_saw_header(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        self.body.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            (n.trim() == name).then(|| v.trim().to_string())
        })
    }

    /// The request line the demo upstream echoed (`METHOD PATH?QUERY`).
    pub fn upstream_request_line(&self) -> &str {
        self.body.lines().next().unwrap_or("")
    }

    /// The fail-open reason the upstream was told about (`X-RateLimit-Fail-Open`).
    pub fn fail_open_reason(&self) -> Option<String> {
        self.upstream_saw_header("x-ratelimit-fail-open")
    }
}

/// One item of `RateLimit-Policy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyTier {
    pub name: String,
    pub q: i64,
    pub w: Option<i64>,
}

/// One item of `RateLimit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitTier {
    pub name: String,
    pub r: i64,
    pub t: i64,
}

/// Parses a structured-field List whose items are Strings with Integer parameters only
/// (no inner lists), as `(name, [(param, value)])`.
fn parse_named_items(header: &str, value: &str) -> Vec<(String, Vec<(String, i64)>)> {
    let list = sfv::Parser::parse_list(value.as_bytes())
        .unwrap_or_else(|e| panic!("{header}: {value:?} is not a structured-field List: {e}"));
    assert!(!list.is_empty(), "{header}: empty List {value:?}");
    list.into_iter()
        .map(|entry| {
            let item = match entry {
                sfv::ListEntry::Item(item) => item,
                sfv::ListEntry::InnerList(inner) => {
                    panic!("{header}: inner list {inner:?} in {value:?}")
                }
            };
            let name = match item.bare_item {
                sfv::BareItem::String(name) => name,
                other => panic!("{header}: item {other:?} is not a String in {value:?}"),
            };
            let params = item
                .params
                .into_iter()
                .map(|(key, bare)| match bare {
                    sfv::BareItem::Integer(n) => (key, n),
                    other => {
                        panic!("{header}: parameter {key}={other:?} is not an Integer in {value:?}")
                    }
                })
                .collect();
            (name, params)
        })
        .collect()
}

fn param(params: &[(String, i64)], key: &str) -> Option<i64> {
    params.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// Parses `RateLimit-Policy`: items `"name";q=<limit>[;w=<seconds>]`.
pub fn parse_policy(value: &str) -> Vec<PolicyTier> {
    parse_named_items("RateLimit-Policy", value)
        .into_iter()
        .map(|(name, params)| {
            let q = param(&params, "q")
                .unwrap_or_else(|| panic!("RateLimit-Policy: no q for {name:?} in {value:?}"));
            PolicyTier {
                q,
                w: param(&params, "w"),
                name,
            }
        })
        .collect()
}

/// Parses `RateLimit`: items `"name";r=<remaining>;t=<seconds>`.
pub fn parse_ratelimit(value: &str) -> Vec<LimitTier> {
    parse_named_items("RateLimit", value)
        .into_iter()
        .map(|(name, params)| {
            let r = param(&params, "r")
                .unwrap_or_else(|| panic!("RateLimit: no r for {name:?} in {value:?}"));
            let t = param(&params, "t")
                .unwrap_or_else(|| panic!("RateLimit: no t for {name:?} in {value:?}"));
            LimitTier { name, r, t }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------

/// A scrape of the Prometheus text format.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub text: String,
}

/// One sample: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Metrics {
    pub fn samples(&self) -> Vec<Sample> {
        self.text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| {
                parse_sample(line)
                    .unwrap_or_else(|| panic!("not a Prometheus sample line: {line:?}"))
            })
            .collect()
    }

    /// The sum of the samples named `name` whose labels include every pair of `labels`;
    /// `None` when there is none.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matching: Vec<f64> = self
            .samples()
            .into_iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
            })
            .map(|s| s.value)
            .collect();
        (!matching.is_empty()).then(|| matching.iter().sum())
    }

    /// A counter: as [`Metrics::value`], a missing series counting as 0.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels).unwrap_or(0.0)
    }

    /// `rl_gateway_decisions_total{rule, outcome}`.
    pub fn decisions(&self, rule: &str, outcome: &str) -> f64 {
        self.counter(
            "rl_gateway_decisions_total",
            &[("rule", rule), ("outcome", outcome)],
        )
    }

    /// Asserts `rl_gateway_decisions_total` for each `(rule, outcome, count)`; a failure
    /// names `what` and shows the whole scrape.
    pub fn assert_decisions(&self, what: &str, expected: &[(&str, &str, f64)]) {
        for &(rule, outcome, count) in expected {
            assert_eq!(
                self.decisions(rule, outcome),
                count,
                "{what}: {rule} {outcome}:\n{}",
                self.text
            );
        }
    }

    /// `rl_gateway_fail_open_total{reason}`.
    pub fn fail_open(&self, reason: &str) -> f64 {
        self.counter("rl_gateway_fail_open_total", &[("reason", reason)])
    }

    /// `rl_gateway_rule_reloads_total{result}`.
    pub fn reloads(&self, result: &str) -> f64 {
        self.counter("rl_gateway_rule_reloads_total", &[("result", result)])
    }
}

fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        let mut end = None;
        loop {
            while chars.peek().is_some_and(|(_, c)| *c == ',' || *c == ' ') {
                chars.next();
            }
            match chars.peek() {
                Some((i, '}')) => {
                    end = Some(*i);
                    break;
                }
                None => break,
                _ => {}
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return None;
            }
            let mut value = String::new();
            loop {
                match chars.next()?.1 {
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.push((key.trim().to_string(), value));
        }
        rest = &after[end? + 1..];
    }
    let value_text = rest.split_whitespace().next()?;
    let value = match value_text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        text => text.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

// ---------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------

fn kill_and_wait(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(lines).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// The demo upstream, killed on drop.
pub struct Upstream {
    pub port: u16,
    child: Child,
    agent: ureq::Agent,
    _dir: TempDir,
    log: PathBuf,
}

impl Upstream {
    /// Starts one on a free port. A port found free can be taken before the upstream binds
    /// it (by a client socket's ephemeral port, or another process): then another is tried.
    pub fn start() -> Upstream {
        let mut tries = 0;
        loop {
            match Upstream::try_start() {
                Ok(upstream) => return upstream,
                Err(log) if log.contains("Address already in use") && tries < 5 => tries += 1,
                Err(log) => panic!("{log}"),
            }
        }
    }

    fn try_start() -> Result<Upstream, String> {
        let dir = tempfile::Builder::new()
            .prefix("rl-upstream-")
            .tempdir()
            .expect("temp dir");
        let log = dir.path().join("upstream.log");
        let port = free_port();
        let log_file = File::create(&log).expect("upstream log");
        let child = Command::new(upstream_binary())
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log handle"))
            .stderr(log_file)
            .spawn()
            .expect("demo-upstream starts");
        let mut upstream = Upstream {
            port,
            child,
            agent: agent(),
            _dir: dir,
            log,
        };
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if let Ok(response) = upstream
                .agent
                .get(&format!("http://127.0.0.1:{port}/__requests"))
                .timeout(Duration::from_secs(2))
                .call()
            {
                if response.status() == 200 {
                    break;
                }
            }
            let exited = upstream.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                return Err(format!(
                    "demo-upstream on port {port} did not start ({exited:?}); log:\n{}",
                    tail(&upstream.log, 30)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(upstream)
    }

    /// `upstream = "http://127.0.0.1:<port>"`, a line for `[server]`.
    pub fn server_line(&self) -> String {
        format!("upstream = \"http://127.0.0.1:{}\"\n", self.port)
    }

    /// Lets every request held with `hold=1` (that came before this call) be answered.
    pub fn release_held(&self) {
        let url = format!("http://127.0.0.1:{}/__release", self.port);
        let resp = send(&self.agent, "GET", &url, &[]);
        assert_eq!(resp.status, 200, "{url}: {resp:?}");
    }

    /// How many requests it served (its own `/__requests` calls not counted).
    pub fn requests(&self) -> u64 {
        let url = format!("http://127.0.0.1:{}/__requests", self.port);
        let resp = send(&self.agent, "GET", &url, &[]);
        assert_eq!(resp.status, 200, "{url}: {resp:?}");
        resp.body
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{url} answered {:?}: {e}", resp.body))
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        kill_and_wait(&mut self.child);
    }
}

/// `[redis]` with `url` pointing at `port` and a deadline (1 s) that a debug build on a
/// busy machine always meets, then the `extra` lines (which may override none of these,
/// TOML refusing duplicate keys: use [`redis_section_with`] for another deadline).
pub fn redis_section(port: u16, extra: &str) -> String {
    format!("[redis]\nurl = \"redis://127.0.0.1:{port}\"\ndeadline_ms = 1000\n{extra}\n")
}

/// `[redis]` with `url` pointing at `port` and exactly the `extra` lines.
pub fn redis_section_with(port: u16, extra: &str) -> String {
    format!("[redis]\nurl = \"redis://127.0.0.1:{port}\"\n{extra}\n")
}

/// A server of `flavor` with the module, the demo upstream, and a gateway in front of it
/// whose file is `[server]` with the upstream, `[redis]` pointing at that server, then `rest`.
pub fn stack(flavor: Flavor, rest: &str) -> (Server, Upstream, Gateway) {
    stack_on(ServerConfig::new(flavor).start(), rest)
}

/// [`stack`] on a server already started.
pub fn stack_on(redis: Server, rest: &str) -> (Server, Upstream, Gateway) {
    let upstream = Upstream::start();
    let gateway = Gateway::in_front_of(&upstream, &redis, rest);
    (redis, upstream, gateway)
}

/// The gateway, killed on drop. Its config file is `[server]` with `listen` and
/// `admin_listen` on free ports plus the caller's lines, then the caller's other sections.
pub struct Gateway {
    pub port: u16,
    pub admin_port: u16,
    dir: TempDir,
    config_path: PathBuf,
    log_path: PathBuf,
    server_lines: String,
    child: Option<Child>,
    pub agent: ureq::Agent,
}

impl Gateway {
    /// Starts `rl-gateway --config <file>` and waits until `/healthz` answers 200 on the
    /// admin listener and the main listener accepts connections.
    pub fn start(server_lines: &str, rest: &str) -> Gateway {
        Gateway::start_listening("127.0.0.1", server_lines, rest)
    }

    /// A gateway in front of `upstream` deciding with `redis`: `[server]` with the
    /// upstream, `[redis]` pointing at `redis` (see [`redis_section`]), then `rest`.
    pub fn in_front_of(upstream: &Upstream, redis: &Server, rest: &str) -> Gateway {
        Gateway::start(
            &upstream.server_line(),
            &format!("{}{rest}", redis_section(redis.port(), "")),
        )
    }

    /// As [`Gateway::start`], the main listener on `host` (e.g. `[::]`, which takes IPv6
    /// and, dual-stack, 127.0.0.1 too) instead of 127.0.0.1.
    pub fn start_listening(host: &str, server_lines: &str, rest: &str) -> Gateway {
        Gateway::launch(host, server_lines, rest, None)
    }

    /// As [`Gateway::start`], the process starting with its open-file soft limit at
    /// `soft` (set between fork and exec, so this process's own limit never changes and
    /// the tests running beside it are not touched).
    pub fn start_with_open_file_soft_limit(soft: u64, server_lines: &str, rest: &str) -> Gateway {
        Gateway::launch("127.0.0.1", server_lines, rest, Some(soft))
    }

    fn launch(host: &str, server_lines: &str, rest: &str, soft_nofile: Option<u64>) -> Gateway {
        let dir = tempfile::Builder::new()
            .prefix("rl-gateway-")
            .tempdir()
            .expect("temp dir");
        let port = free_port();
        let admin_port = free_port();
        let server_lines = format!(
            "listen = \"{host}:{port}\"\nadmin_listen = \"127.0.0.1:{admin_port}\"\n{server_lines}"
        );
        let config_path = dir.path().join("rules.toml");
        let log_path = dir.path().join("gateway.log");
        let mut gateway = Gateway {
            port,
            admin_port,
            config_path,
            log_path,
            server_lines,
            child: None,
            agent: agent(),
            dir,
        };
        gateway.write_file(&gateway.compose(rest));
        let log = File::create(&gateway.log_path).expect("gateway log");
        let mut command = Command::new(gateway_binary());
        command
            .arg("--config")
            .arg(&gateway.config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log);
        if let Some(soft) = soft_nofile {
            lower_open_file_soft_limit(&mut command, soft);
        }
        gateway.child = Some(command.spawn().expect("rl-gateway starts"));
        gateway.wait_ready();
        gateway
    }

    fn compose(&self, rest: &str) -> String {
        format!("[server]\n{}\n{rest}\n", self.server_lines)
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_LIMIT;
        let health = self.admin_url("/healthz");
        loop {
            let healthy = self
                .agent
                .get(&health)
                .timeout(Duration::from_secs(2))
                .call()
                .is_ok_and(|r| r.status() == 200);
            if healthy
                && TcpStream::connect_timeout(
                    &([127, 0, 0, 1], self.port).into(),
                    Duration::from_secs(2),
                )
                .is_ok()
            {
                return;
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                panic!(
                    "rl-gateway did not come up ({exited:?}); config:\n{}\nlog:\n{}",
                    fs::read_to_string(&self.config_path).unwrap_or_default(),
                    tail(&self.log_path, 40)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    /// `method path` on the main listener with `headers`.
    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
        send(&self.agent, method, &self.url(path), headers)
    }

    pub fn get(&self, path: &str) -> Resp {
        self.send("GET", path, &[])
    }

    pub fn post(&self, path: &str) -> Resp {
        self.send("POST", path, &[])
    }

    /// `GET path` on the admin listener.
    pub fn admin_get(&self, path: &str) -> Resp {
        send(&self.agent, "GET", &self.admin_url(path), &[])
    }

    pub fn metrics(&self) -> Metrics {
        let resp = self.admin_get("/metrics");
        assert_eq!(resp.status, 200, "GET /metrics: {resp:?}");
        Metrics { text: resp.body }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    pub fn signal(&self, name: &str) {
        signal(self.pid(), name);
    }

    /// Everything the gateway logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// How many log lines contain `needle`.
    pub fn log_lines_with(&self, needle: &str) -> usize {
        self.log().lines().filter(|l| l.contains(needle)).count()
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Rewrites the config file with the same `[server]` lines and `rest` after them.
    pub fn rewrite(&self, rest: &str) {
        self.write_file(&self.compose(rest));
    }

    /// Replaces the config file with exactly `text` (e.g. one that does not parse).
    pub fn write_raw(&self, text: &str) {
        self.write_file(text);
    }

    /// Writes the file atomically (a sibling file renamed over it), with a modification
    /// time later than the old file's, so that a poller neither reads half a file nor
    /// misses the change when both writes fall within one timestamp tick.
    fn write_file(&self, text: &str) {
        let old_mtime = fs::metadata(&self.config_path)
            .and_then(|m| m.modified())
            .ok();
        let tmp = self.dir.path().join("rules.toml.new");
        let mut file = File::create(&tmp).expect("create the new config");
        file.write_all(text.as_bytes()).expect("write the config");
        file.sync_all().expect("sync the config");
        let mtime = file.metadata().and_then(|m| m.modified()).ok();
        if let (Some(old), Some(new)) = (old_mtime, mtime) {
            if new <= old {
                file.set_modified(old + Duration::from_secs(1))
                    .expect("set the config's mtime");
            }
        }
        drop(file);
        fs::rename(&tmp, &self.config_path).expect("rename the config into place");
    }

    /// Sends SIGTERM and waits (up to 20 s) for the process to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal("TERM");
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                kill_and_wait(&mut child);
                panic!(
                    "rl-gateway did not exit within 20 s of SIGTERM; log:\n{}",
                    tail(&self.log_path, 40)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_wait(&mut child);
        }
        if std::thread::panicking() {
            eprintln!(
                "--- rl-gateway log ({}) ---\n{}\n---",
                self.log_path.display(),
                tail(&self.log_path, 60)
            );
        }
    }
}

/// Makes `command`'s process start with its open-file soft limit at `soft`, its hard limit
/// unchanged.
fn lower_open_file_soft_limit(command: &mut Command, soft: u64) {
    use std::os::unix::process::CommandExt;
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).expect("getrlimit");
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: it makes one setrlimit(2) call and allocates
    // nothing.
    unsafe {
        command.pre_exec(move || rlimit::setrlimit(rlimit::Resource::NOFILE, soft, hard));
    }
}

/// Runs `rl-gateway --check-config <path>` to completion.
pub fn check_config(path: &Path) -> Output {
    Command::new(gateway_binary())
        .arg("--check-config")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .expect("rl-gateway --check-config runs")
}

// ---------------------------------------------------------------------------------------
// Redis helpers
// ---------------------------------------------------------------------------------------

/// The key names matching `pattern` (`KEYS`), sorted.
pub fn keys(server: &Server, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut server.conn())
        .expect("KEYS");
    // The gateways' heartbeat (`<key_prefix>gateways`) is not a budget.
    keys.retain(|key| !key.ends_with("gateways") || key.contains('{'));
    keys.sort();
    keys
}

/// `RL.PEEK key <spec>`: what a hit would answer now, nothing counted.
pub fn peek(server: &Server, key: &str, spec: &str) -> redis_support::Reply {
    redis_support::rl(&mut server.conn(), "RL.PEEK", key.as_bytes(), spec)
}

/// `RL.HIT` calls the server has run so far (0 before the first).
pub fn hit_calls(server: &Server) -> i64 {
    server.command_calls("RL.HIT").unwrap_or(0)
}

/// A server of `flavor` with the module, able to hold named policies (Redis 7.0 needs
/// `policies-in-rdb yes` for `RL.POLICY SET`).
pub fn server_with_policies(flavor: Flavor) -> Server {
    let config = ServerConfig::new(flavor);
    let config = match flavor {
        Flavor::Redis => config.module_arg("policies-in-rdb").module_arg("yes"),
        Flavor::Valkey => config,
    };
    config.start()
}

/// Times one call.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

/// `rl_gateway_lease_releases_total{cause}`: lease releases started for `cause`.
pub fn release_cause(gateway: &Gateway, cause: &str) -> f64 {
    gateway
        .metrics()
        .counter("rl_gateway_lease_releases_total", &[("cause", cause)])
}

/// The gauge `rl_gateway_leases_held`: leases the gateway holds now.
pub fn leases_held(gateway: &Gateway) -> f64 {
    gateway
        .metrics()
        .value("rl_gateway_leases_held", &[])
        .expect("the gauge is always there")
}

/// Sends `GET path` on its own thread, reading only the head; the answer's status (0
/// when the connection broke).
pub fn in_flight(gateway: &Gateway, path: &str) -> std::thread::JoinHandle<u16> {
    let url = gateway.url(path);
    let agent = gateway.agent.clone();
    std::thread::spawn(move || match agent.get(&url).call() {
        Ok(resp) => resp.status(),
        Err(ureq::Error::Status(status, _)) => status,
        Err(_) => 0,
    })
}
