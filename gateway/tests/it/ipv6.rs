//! `key = "ip"` counts an IPv6 client by its /64 (`[client_ip] ipv6_prefix`, default 64):
//! two addresses of one /64 share one budget, another /64 has its own, and
//! `ipv6_prefix = 128` counts each address apart again.
//!
//! Real IPv6 sources need addresses of our own: the test makes a network namespace
//! (`ip netns add`), puts fd00::1, fd00::2 (one /64) and fd00:0:0:1::1 (the next /64) on
//! its loopback, moves its own thread into it (setns), and starts Redis, the upstream and
//! the gateway from there, so that they all run inside; its clients bind to the source
//! address they speak for. The namespace is deleted when the test ends, also on failure.
//! Where namespaces cannot be made (not root, no iproute2) it says so and skips.

use nix::sched::{setns, CloneFlags};
use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;
use testkit::gateway::*;

/// A network namespace, deleted on drop; the thread that entered it goes back home first.
struct Namespace {
    name: String,
    home: Option<File>,
}

impl Namespace {
    /// Makes the namespace with `addresses` on its loopback; `None`, saying why, where
    /// namespaces cannot be made here.
    fn create(addresses: &[&str]) -> Option<Namespace> {
        let name = format!("rl-gw-ipv6-{}", std::process::id());
        match Command::new("ip").args(["netns", "add", &name]).output() {
            Ok(output) if output.status.success() => {}
            Ok(output) => {
                eprintln!(
                    "SKIPPED: cannot make a network namespace (root is needed): {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                );
                return None;
            }
            Err(error) => {
                eprintln!("SKIPPED: no `ip` command (install iproute2): {error}");
                return None;
            }
        }
        let namespace = Namespace { name, home: None };
        namespace.ip(&["link", "set", "lo", "up"]);
        for address in addresses {
            // nodad: usable at once, without duplicate address detection.
            namespace.ip(&["addr", "add", address, "dev", "lo", "nodad"]);
        }
        Some(namespace)
    }

    fn ip(&self, args: &[&str]) {
        let output = Command::new("ip")
            .arg("-n")
            .arg(&self.name)
            .args(args)
            .output()
            .expect("ip runs");
        assert!(
            output.status.success(),
            "ip -n {} {args:?}: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Moves the calling thread into the namespace: what it starts from now on runs there.
    /// The error says why it cannot (a sandbox that forbids setns, say).
    fn enter(&mut self) -> Result<(), String> {
        let home = File::open("/proc/thread-self/ns/net")
            .map_err(|e| format!("this thread's namespace: {e}"))?;
        let target = File::open(format!("/run/netns/{}", self.name))
            .map_err(|e| format!("the namespace {}: {e}", self.name))?;
        setns(&target, CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns: {e}"))?;
        self.home = Some(home);
        Ok(())
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            let _ = setns(&home, CloneFlags::CLONE_NEWNET);
        }
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

const SAME_64: [&str; 2] = ["fd00::1", "fd00::2"];
const OTHER_64: &str = "fd00:0:0:1::1";

const RULES: &str = r#"
[[rule]]
name = "api"
path = "/**"
key = "ip"
limits = ["3/1h"]
algorithm = "log"
"#;

/// `GET /thing` from `source` to the gateway at [fd00::1]:`port`: the status and the
/// remaining budget the RateLimit header announces.
fn get_from(source: &str, port: u16) -> (u16, Option<i64>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // Bound to the source first, then connected; the exchange itself is plain blocking I/O.
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v6().expect("an IPv6 socket");
        let from: SocketAddr = format!("[{source}]:0").parse().expect("source address");
        socket.bind(from).expect("bind the source address");
        let to: SocketAddr = format!("[{}]:{port}", SAME_64[0]).parse().expect("address");
        socket.connect(to).await.expect("connect to the gateway")
    });
    let mut stream = stream.into_std().expect("a std stream");
    stream.set_nonblocking(false).expect("blocking");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("read timeout");
    let request = format!(
        "GET /thing HTTP/1.1\r\nHost: [{}]:{port}\r\nConnection: close\r\n\r\n",
        SAME_64[0]
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    let remaining = answer.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("ratelimit")
            .then(|| parse_ratelimit(value.trim())[0].r)
    });
    (status, remaining)
}

#[test]
fn two_addresses_of_one_ipv6_64_share_a_budget() {
    // Built before entering the namespace, where cargo has no network.
    let _ = testkit::module_path();
    let addresses = [
        format!("{}/64", SAME_64[0]),
        format!("{}/64", SAME_64[1]),
        format!("{OTHER_64}/64"),
    ];
    let addresses: Vec<&str> = addresses.iter().map(String::as_str).collect();
    let Some(mut namespace) = Namespace::create(&addresses) else {
        return;
    };
    if let Err(error) = namespace.enter() {
        eprintln!("SKIPPED: cannot enter the network namespace: {error}");
        return;
    }
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let rest = format!("{}{RULES}", redis_section(redis.port(), ""));
        let gateway = Gateway::start_listening("[::]", &upstream.server_line(), &rest);
        let port = gateway.port;
        let answers: Vec<(u16, Option<i64>)> = [SAME_64[0], SAME_64[1], SAME_64[1], SAME_64[0]]
            .into_iter()
            .map(|source| get_from(source, port))
            .collect();
        assert_eq!(
            answers,
            [
                (200, Some(2)),
                (200, Some(1)),
                (200, Some(0)),
                (429, Some(0))
            ],
            "{flavor:?}: fd00::1 and fd00::2 spend one budget"
        );
        assert_eq!(
            get_from(OTHER_64, port),
            (200, Some(2)),
            "{flavor:?}: another /64"
        );
        assert_eq!(
            keys(&redis, "*"),
            ["rl:{ip:fd00:0:0:1::}:api", "rl:{ip:fd00::}:api"],
            "{flavor:?}: one key per /64"
        );
        drop(gateway);

        // ipv6_prefix = 128: every address on its own again.
        redis::cmd("FLUSHALL")
            .exec(&mut redis.conn())
            .expect("FLUSHALL");
        let exact = format!("{rest}[client_ip]\nipv6_prefix = 128\n");
        let gateway = Gateway::start_listening("[::]", &upstream.server_line(), &exact);
        assert_eq!(
            get_from(SAME_64[0], gateway.port),
            (200, Some(2)),
            "{flavor:?}"
        );
        assert_eq!(
            get_from(SAME_64[1], gateway.port),
            (200, Some(2)),
            "{flavor:?}"
        );
        assert_eq!(
            keys(&redis, "*"),
            ["rl:{ip:fd00::1}:api", "rl:{ip:fd00::2}:api"],
            "{flavor:?}"
        );
    });
}

/// The same through a trusted proxy, which needs no namespace: the client named by
/// X-Forwarded-For is counted by its /64 too, and IPv4 by `ipv4_prefix` when set.
#[test]
fn clients_behind_a_trusted_proxy_are_counted_by_their_network() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateway = Gateway::start(
            &format!(
                "{}trusted_proxies = [\"127.0.0.1/32\"]\n",
                upstream.server_line()
            ),
            &format!(
                "{}[client_ip]\nipv4_prefix = 24\n{RULES}",
                redis_section(redis.port(), "")
            ),
        );
        let from = |client: &str| {
            let resp = gateway.send("GET", "/thing", &[("X-Forwarded-For", client)]);
            (resp.status, resp.has("ratelimit").then(|| resp.remaining()))
        };
        let answers: Vec<(u16, Option<i64>)> = [
            "2001:db8:1:2::1",
            "2001:db8:1:2:ffff:ffff:ffff:ffff",
            "[2001:db8:1:2::77]:4321",
            "2001:db8:1:2::1",
        ]
        .into_iter()
        .map(from)
        .collect();
        assert_eq!(
            answers,
            [
                (200, Some(2)),
                (200, Some(1)),
                (200, Some(0)),
                (429, Some(0))
            ],
            "{flavor:?}: one /64, one budget"
        );
        assert_eq!(from("2001:db8:1:3::1"), (200, Some(2)), "{flavor:?}");
        assert_eq!(from("198.51.100.7"), (200, Some(2)), "{flavor:?}");
        assert_eq!(
            from("198.51.100.200"),
            (200, Some(1)),
            "{flavor:?}: one /24"
        );
        assert_eq!(
            keys(&redis, "*"),
            [
                "rl:{ip:198.51.100.0}:api",
                "rl:{ip:2001:db8:1:2::}:api",
                "rl:{ip:2001:db8:1:3::}:api"
            ],
            "{flavor:?}"
        );
    });
}
