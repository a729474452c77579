//! The demo upstream and the gateway as processes on free ports, killed on drop.

use super::*;

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
        Gateway::launch(host, server_lines, rest, None, &[])
    }

    /// As [`Gateway::start`], the process given the environment variables `env` too
    /// (`[redis] password_env`).
    pub fn start_with_env(server_lines: &str, rest: &str, env: &[(&str, &str)]) -> Gateway {
        Gateway::launch("127.0.0.1", server_lines, rest, None, env)
    }

    /// As [`Gateway::start`], the process starting with its open-file soft limit at
    /// `soft` (set between fork and exec, so this process's own limit never changes and
    /// the tests running beside it are not touched).
    pub fn start_with_open_file_soft_limit(soft: u64, server_lines: &str, rest: &str) -> Gateway {
        Gateway::launch("127.0.0.1", server_lines, rest, Some(soft), &[])
    }

    fn launch(
        host: &str,
        server_lines: &str,
        rest: &str,
        soft_nofile: Option<u64>,
        env: &[(&str, &str)],
    ) -> Gateway {
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
            .envs(env.iter().copied())
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

    /// Waits (up to `limit`) until `/readyz` says that Redis does not answer: a probe of
    /// Redis has failed. `what` names the case in the panic.
    pub fn wait_redis_unreachable(&self, limit: Duration, what: &str) {
        wait_until(
            limit,
            &format!("{what}: /readyz says Redis does not answer"),
            || self.admin_get("/readyz").body.contains("does not answer"),
        );
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
