//! Redis Sentinel for the tests: sentinel processes (`redis-server --sentinel`, or
//! `valkey-server --sentinel`) watching a primary, each with its own config file (which a
//! sentinel rewrites as it learns), killed on drop.

use super::*;

/// The sentinels of one primary, monitored under [`Sentinels::MASTER_NAME`].
pub struct Sentinels {
    ports: Vec<u16>,
    /// The sentinels' own password (`requirepass`), if any.
    password: Option<String>,
    children: Vec<Child>,
    _dir: TempDir,
}

impl Sentinels {
    /// The name the primary is monitored under.
    pub const MASTER_NAME: &'static str = "mymaster";

    /// `count` sentinels of `flavor` watching the primary on `primary_port`, a quorum of
    /// two, a primary taken for down after one second without answers. `extra` lines go
    /// into each sentinel's file (`requirepass`, `sentinel auth-pass ...`).
    pub fn start(flavor: Flavor, primary_port: u16, count: usize, extra: &str) -> Sentinels {
        Sentinels::start_with_password(flavor, primary_port, count, extra, None)
    }

    /// [`Sentinels::start`], the sentinels asking their clients for `password`
    /// (`requirepass`) when given.
    pub fn start_with_password(
        flavor: Flavor,
        primary_port: u16,
        count: usize,
        extra: &str,
        password: Option<&str>,
    ) -> Sentinels {
        Sentinels::start_each(flavor, primary_port, count, || extra.to_string(), password)
    }

    /// [`Sentinels::start_with_password`], each sentinel's extra lines made by `extra`
    /// (called once per sentinel, in order: a port of its own, say).
    pub fn start_each(
        flavor: Flavor,
        primary_port: u16,
        count: usize,
        mut extra: impl FnMut() -> String,
        password: Option<&str>,
    ) -> Sentinels {
        let dir = tempfile::Builder::new()
            .prefix("rl-sentinel-")
            .tempdir()
            .expect("temp dir");
        let name = Self::MASTER_NAME;
        let mut sentinels = Sentinels {
            ports: Vec::new(),
            password: password.map(str::to_string),
            children: Vec::new(),
            _dir: dir,
        };
        for i in 0..count {
            let port = free_port();
            let file = sentinels._dir.path().join(format!("sentinel-{i}.conf"));
            let log = sentinels._dir.path().join(format!("sentinel-{i}.log"));
            let text = format!(
                "port {port}\nbind 127.0.0.1\nlogfile \"{}\"\n\
                 sentinel monitor {name} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 10000\n{}\n{}",
                log.display(),
                extra(),
                password.map_or(String::new(), |p| format!("requirepass \"{p}\"\n"))
            );
            std::fs::write(&file, text).expect("write the sentinel's file");
            let child = Command::new(flavor.binary())
                .arg(&file)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start a sentinel: {e}"));
            sentinels.ports.push(port);
            sentinels.children.push(child);
        }
        for i in 0..count {
            wait_until(Duration::from_secs(20), "a sentinel answers", || {
                sentinels.try_conn(i).is_ok()
            });
        }
        sentinels
    }

    /// `127.0.0.1:port` of each sentinel, as `[redis] sentinels` takes them.
    pub fn addresses(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// The TOML array of [`Sentinels::addresses`].
    pub fn toml_list(&self) -> String {
        let quoted: Vec<String> = self
            .addresses()
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect();
        format!("[{}]", quoted.join(", "))
    }

    fn try_conn(&self, i: usize) -> redis::RedisResult<Connection> {
        let auth = self
            .password
            .as_ref()
            .map_or(String::new(), |p| format!(":{p}@"));
        let mut con = redis::Client::open(format!("redis://{auth}127.0.0.1:{}/", self.ports[i]))?
            .get_connection_with_timeout(Duration::from_secs(2))?;
        redis::cmd("PING").query::<String>(&mut con)?;
        Ok(con)
    }

    /// A connection to sentinel `i`.
    pub fn conn(&self, i: usize) -> Connection {
        self.try_conn(i).expect("connect to a sentinel")
    }

    /// The port of the primary sentinel `i` names now.
    pub fn primary_port(&self, i: usize) -> u16 {
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(Self::MASTER_NAME)
            .query(&mut self.conn(i))
            .expect("SENTINEL GET-MASTER-ADDR-BY-NAME");
        port
    }

    /// Waits until sentinel 0 knows a replica, then has it fail over (`SENTINEL FAILOVER`,
    /// asked again while it answers that no replica is fit yet), and waits until every
    /// sentinel names a primary other than `old_port`.
    pub fn failover(&self, old_port: u16) {
        wait_until(
            Duration::from_secs(30),
            "SENTINEL FAILOVER accepted",
            || {
                redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(Self::MASTER_NAME)
                    .query::<String>(&mut self.conn(0))
                    .is_ok()
            },
        );
        wait_until(
            Duration::from_secs(60),
            "every sentinel names the new primary",
            || (0..self.ports.len()).all(|i| self.primary_port(i) != old_port),
        );
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
