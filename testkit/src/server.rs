//! One server process ([`ServerConfig`], [`Server`]): started with the module, waited for,
//! read through INFO, restarted on its RDB or AOF, killed on drop; and a primary with its
//! replica.

use super::*;

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

/// The value of `field` in the text of an `INFO` reply.
fn info_line(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|line| {
        line.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
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
        info_line(&info, field)
    }

    /// Like [`Server::info_field`], but `None` also when the server closed the connection
    /// or would not answer: for polling a server that a sentinel is reconfiguring (it
    /// kills the old primary's clients as it turns it into a replica).
    pub fn try_info_field(&self, section: &str, field: &str) -> Option<String> {
        let mut con = self.try_connect().ok()?;
        let info: String = redis::cmd("INFO").arg(section).query(&mut con).ok()?;
        info_line(&info, field)
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
