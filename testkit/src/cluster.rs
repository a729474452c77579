//! A Redis Cluster (or a Valkey cluster) on loopback with the module loaded on every node:
//! `primaries` primaries with `replicas_per_primary` replicas each, created with
//! `redis-cli --cluster create ... --cluster-yes` (Valkey's own `valkey-cli` when it sits
//! beside `valkey-server`), waited on until every node reports `cluster_state:ok`, every node
//! sees the same slot owners and every replica's link is up. Every node is a [`Server`], so
//! dropping the cluster kills them all.
//!
//! On Redis (7.0) the module is loaded with `policies-in-rdb yes`, without which
//! `RL.POLICY SET` is refused there; Valkey needs nothing.

use super::{Flavor, Server, ServerConfig};
use redis::Connection;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `cluster-node-timeout`: small, so that a stopped primary is marked failed quickly.
pub const NODE_TIMEOUT_MS: u64 = 2_000;

/// How long the cluster may take to form or to settle after a failover.
const CONVERGE_LIMIT: Duration = Duration::from_secs(30);

/// One line of `CLUSTER NODES`, as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub id: String,
    pub port: u16,
    /// `master` among the flags.
    pub primary: bool,
    /// The primary's id, for a replica.
    pub primary_id: Option<String>,
    /// `fail` or `fail?` among the flags.
    pub failing: bool,
    /// The slot ranges it serves, inclusive (migrating and importing markers left out).
    pub slots: Vec<(u16, u16)>,
}

/// How a cluster's nodes are started and met, beyond what every cluster node gets.
pub struct NodeSetup {
    /// Adds a node's own arguments to its config; returns it with the port the cluster is
    /// created on (the node's plain port, or the port its clients must use).
    pub node: Box<dyn Fn(ServerConfig) -> (ServerConfig, u16)>,
    /// The command-line client's arguments before `--cluster create` (`--tls ...`).
    pub cli_args: Vec<String>,
}

impl NodeSetup {
    /// Nothing more: the cluster is created on the plain ports.
    pub fn plain() -> NodeSetup {
        NodeSetup {
            node: Box::new(|config| {
                let port = config.port;
                (config, port)
            }),
            cli_args: Vec::new(),
        }
    }
}

/// A running cluster; its nodes are killed when it is dropped.
pub struct Cluster {
    pub flavor: Flavor,
    /// The nodes still running, in the order they were started.
    servers: Vec<Server>,
}

/// The command-line client to drive the cluster with: `valkey-cli` beside `valkey-server`
/// when there is one, else Redis's `redis-cli` (on the PATH), which works with both.
pub fn cli_binary(flavor: Flavor) -> PathBuf {
    let beside = match flavor {
        Flavor::Redis => flavor.binary().with_file_name("redis-cli"),
        Flavor::Valkey => flavor.binary().with_file_name("valkey-cli"),
    };
    let has_folder = beside
        .parent()
        .is_some_and(|folder| !folder.as_os_str().is_empty());
    if has_folder && beside.exists() {
        beside
    } else {
        "redis-cli".into()
    }
}

/// Runs the command-line client with `args`, panicking unless it exits with 0.
pub fn run_cli(flavor: Flavor, args: &[String]) -> Output {
    let binary = cli_binary(flavor);
    let output = Command::new(&binary)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    assert!(
        output.status.success(),
        "{} {args:?} failed ({}):\n{}\n{}",
        binary.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Parses `CLUSTER NODES`.
pub fn parse_cluster_nodes(text: &str) -> Vec<NodeView> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(fields.len() >= 8, "CLUSTER NODES line {line:?}");
            // 127.0.0.1:30001@40001 or 127.0.0.1:30001@40001,hostname
            let address = fields[1].split(['@', ',']).next().unwrap_or("");
            let port = address
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("a port in {line:?}"));
            let flags: Vec<&str> = fields[2].split(',').collect();
            let slots = fields[8..]
                .iter()
                .filter(|range| !range.starts_with('['))
                .map(|range| {
                    let (first, last) = range.split_once('-').unwrap_or((range, range));
                    let parse = |s: &str| -> u16 {
                        s.parse()
                            .unwrap_or_else(|_| panic!("slot {s:?} in {line:?}"))
                    };
                    (parse(first), parse(last))
                })
                .collect();
            NodeView {
                id: fields[0].to_string(),
                port,
                primary: flags.contains(&"master"),
                primary_id: (fields[3] != "-").then(|| fields[3].to_string()),
                failing: flags.contains(&"fail") || flags.contains(&"fail?"),
                slots,
            }
        })
        .collect()
}

impl Cluster {
    /// Starts `primaries * (1 + replicas_per_primary)` nodes, creates the cluster and waits
    /// until it is whole.
    pub fn start(flavor: Flavor, primaries: usize, replicas_per_primary: usize) -> Cluster {
        Cluster::start_with(flavor, primaries, replicas_per_primary, &NodeSetup::plain())
    }

    /// [`Cluster::start`] with the nodes started and met as `setup` says.
    pub fn start_with(
        flavor: Flavor,
        primaries: usize,
        replicas_per_primary: usize,
        setup: &NodeSetup,
    ) -> Cluster {
        assert!(
            primaries >= 3,
            "redis-cli --cluster create needs 3 primaries"
        );
        let count = primaries * (1 + replicas_per_primary);
        let mut meet_at = Vec::new();
        let servers: Vec<Server> = (0..count)
            .map(|_| {
                let config = ServerConfig::new(flavor);
                let nodes_file = config.dir().join(format!("nodes-{}.conf", config.port));
                let config = config
                    .arg("cluster-enabled", "yes")
                    .arg(
                        "cluster-config-file",
                        nodes_file.to_str().expect("UTF-8 path"),
                    )
                    .arg("cluster-node-timeout", &NODE_TIMEOUT_MS.to_string());
                let config = match flavor {
                    Flavor::Redis => config.module_arg("policies-in-rdb").module_arg("yes"),
                    Flavor::Valkey => config,
                };
                let (config, port) = (setup.node)(config);
                meet_at.push(port);
                config.start()
            })
            .collect();
        let mut args = setup.cli_args.clone();
        args.extend(["--cluster".into(), "create".into()]);
        args.extend(meet_at.iter().map(|port| format!("127.0.0.1:{port}")));
        args.extend([
            "--cluster-replicas".into(),
            replicas_per_primary.to_string(),
            "--cluster-yes".into(),
        ]);
        run_cli(flavor, &args);
        let cluster = Cluster { flavor, servers };
        cluster.wait_converged();
        let topology = cluster.topology();
        let shards = topology.iter().filter(|n| !n.slots.is_empty()).count();
        let replicas = topology.iter().filter(|n| !n.primary).count();
        assert_eq!(
            (shards, replicas),
            (primaries, primaries * replicas_per_primary),
            "{flavor:?} cluster layout: {topology:?}"
        );
        cluster
    }

    /// The nodes still running.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// The running node on `port`.
    pub fn server(&self, port: u16) -> &Server {
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no running node on port {port}"))
    }

    /// `CLUSTER NODES` as `server` sees it.
    pub fn topology_seen_by(server: &Server) -> Vec<NodeView> {
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut server.conn())
            .expect("CLUSTER NODES");
        parse_cluster_nodes(&text)
    }

    /// The topology as the first running node sees it (after [`Cluster::wait_converged`],
    /// every running node sees the same).
    pub fn topology(&self) -> Vec<NodeView> {
        Self::topology_seen_by(&self.servers[0])
    }

    /// The primaries as a gateway's `[redis] cluster` list: `"redis://127.0.0.1:p", ...`.
    pub fn gateway_seeds(&self) -> String {
        let seeds: Vec<String> = self
            .primaries()
            .iter()
            .map(|s| format!("\"redis://127.0.0.1:{}\"", s.port()))
            .collect();
        seeds.join(", ")
    }

    /// The running primaries that serve slots, in port order.
    pub fn primaries(&self) -> Vec<&Server> {
        let mut ports: Vec<u16> = self
            .topology()
            .into_iter()
            .filter(|n| n.primary && !n.slots.is_empty() && !n.failing)
            .map(|n| n.port)
            .collect();
        ports.sort_unstable();
        ports.into_iter().map(|p| self.server(p)).collect()
    }

    /// The running replicas of `primary`.
    pub fn replicas_of(&self, primary: &Server) -> Vec<&Server> {
        let topology = self.topology();
        let id = &topology
            .iter()
            .find(|n| n.port == primary.port())
            .expect("the primary in CLUSTER NODES")
            .id;
        topology
            .iter()
            .filter(|n| n.primary_id.as_ref() == Some(id) && !n.failing)
            .map(|n| self.server(n.port))
            .collect()
    }

    /// The one replica of `primary`.
    pub fn replica_of(&self, primary: &Server) -> &Server {
        let replicas = self.replicas_of(primary);
        assert_eq!(replicas.len(), 1, "replicas of {}", primary.port());
        replicas[0]
    }

    /// `CLUSTER KEYSLOT key`, asked of any node.
    pub fn keyslot(&self, key: impl redis::ToRedisArgs) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.servers[0].conn())
            .expect("CLUSTER KEYSLOT")
    }

    /// The port of the primary that serves `slot`.
    pub fn slot_owner_port(&self, slot: u16) -> u16 {
        self.topology()
            .into_iter()
            .find(|n| {
                n.primary
                    && n.slots
                        .iter()
                        .any(|&(first, last)| first <= slot && slot <= last)
            })
            .unwrap_or_else(|| panic!("no owner of slot {slot}"))
            .port
    }

    /// The primary that serves `key`'s slot.
    pub fn owner_of(&self, key: impl redis::ToRedisArgs) -> &Server {
        let slot = self.keyslot(key);
        self.server(self.slot_owner_port(slot))
    }

    /// A hash tag (without braces) whose slot `primary` serves, the first of `prefix0`,
    /// `prefix1`, ... that fits.
    pub fn tag_on(&self, primary: &Server, prefix: &str) -> String {
        let topology = self.topology();
        let ranges = &topology
            .iter()
            .find(|n| n.port == primary.port())
            .expect("the primary in CLUSTER NODES")
            .slots;
        (0..10_000)
            .map(|i| format!("{prefix}{i}"))
            .find(|tag| {
                let slot = self.keyslot(tag.as_str());
                ranges.iter().any(|&(a, b)| a <= slot && slot <= b)
            })
            .unwrap_or_else(|| panic!("no tag {prefix}N on {}", primary.port()))
    }

    /// A connection of the `redis` crate's cluster client, seeded with every running node.
    pub fn client(&self) -> redis::cluster::ClusterConnection {
        let nodes: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}/", s.port()))
            .collect();
        redis::cluster::ClusterClient::builder(nodes)
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(10))
            .build()
            .expect("cluster client")
            .get_connection()
            .expect("cluster connection")
    }

    /// `redis-cli --cluster call <a node> <args...> --cluster-only-masters` (valkey-cli
    /// takes that spelling too, besides its `--cluster-only-primaries`): how a keyless
    /// command such as `RL.POLICY SET` reaches every primary; replicas get it through
    /// replication. Returns the client's output.
    pub fn call_on_primaries(&self, args: &[&str]) -> String {
        self.call(args, Some("--cluster-only-masters"))
    }

    /// `redis-cli --cluster call <a node> <args...> [option]`, on every node without an
    /// option. The client exits with 0 even when nodes answer errors: read the output.
    pub fn call(&self, args: &[&str], option: Option<&str>) -> String {
        let mut cli_args: Vec<String> = vec![
            "--cluster".into(),
            "call".into(),
            format!("127.0.0.1:{}", self.servers[0].port()),
        ];
        cli_args.extend(args.iter().map(|a| a.to_string()));
        cli_args.extend(option.map(str::to_string));
        let output = run_cli(self.flavor, &cli_args);
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The policies some primary lacks, as (primary's port, policy name): every name that
    /// `RL.POLICY LIST` shows on one primary must be on all of them, and `RL.POLICY GET`
    /// must define it alike everywhere (a differing definition is reported as
    /// `name (differs)`).
    pub fn policies_missing(&self) -> Vec<(u16, String)> {
        let mut definitions: BTreeMap<u16, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        for primary in self.primaries() {
            let mut con = primary.conn();
            let names: Vec<String> = redis::cmd("RL.POLICY")
                .arg("LIST")
                .query(&mut con)
                .expect("RL.POLICY LIST");
            let defined = names
                .into_iter()
                .map(|name| {
                    let definition: Vec<String> = redis::cmd("RL.POLICY")
                        .arg("GET")
                        .arg(&name)
                        .query(&mut con)
                        .expect("RL.POLICY GET");
                    (name, definition)
                })
                .collect();
            definitions.insert(primary.port(), defined);
        }
        let all: BTreeSet<&String> = definitions.values().flat_map(|d| d.keys()).collect();
        let mut missing = Vec::new();
        for name in all {
            // The definition most primaries agree on counts as the intended one.
            let mut votes: BTreeMap<&Vec<String>, usize> = BTreeMap::new();
            for defined in definitions.values() {
                if let Some(definition) = defined.get(name) {
                    *votes.entry(definition).or_default() += 1;
                }
            }
            let intended = votes
                .iter()
                .max_by_key(|(_, count)| **count)
                .map(|(definition, _)| *definition);
            for (port, defined) in &definitions {
                match defined.get(name) {
                    None => missing.push((*port, name.clone())),
                    Some(definition) if Some(definition) != intended => {
                        missing.push((*port, format!("{name} (differs)")))
                    }
                    Some(_) => {}
                }
            }
        }
        missing
    }

    /// SIGKILLs the node on `port` (no chance to send anything more).
    pub fn kill(&mut self, port: u16) {
        let at = self
            .servers
            .iter()
            .position(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no running node on port {port}"));
        drop(self.servers.remove(at));
    }

    /// Waits until every running node reports `cluster_state:ok`, all running nodes see the
    /// same slot owners (each of them running) and the same primary for every running
    /// replica, and every running replica's link to its primary is up.
    pub fn wait_converged(&self) {
        let deadline = Instant::now() + CONVERGE_LIMIT;
        loop {
            match self.not_converged() {
                None => return,
                Some(reason) => assert!(
                    Instant::now() < deadline,
                    "{:?} cluster did not converge: {reason}",
                    self.flavor
                ),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Why the cluster is not converged yet, `None` when it is.
    fn not_converged(&self) -> Option<String> {
        let running: BTreeSet<u16> = self.servers.iter().map(Server::port).collect();
        let mut first_view: Option<(u16, String)> = None;
        for server in &self.servers {
            let state = cluster_info_field(server, "cluster_state");
            if state.as_deref() != Some("ok") {
                return Some(format!("{} has cluster_state {state:?}", server.port()));
            }
            let view = Self::topology_seen_by(server);
            let port_of = |id: &str| view.iter().find(|n| n.id == id).map(|n| n.port);
            let mut summary = String::new();
            let mut owners: Vec<(u16, u16, u16)> = view
                .iter()
                .filter(|n| n.primary)
                .flat_map(|n| n.slots.iter().map(move |&(a, b)| (a, b, n.port)))
                .collect();
            owners.sort_unstable();
            for (first, last, port) in &owners {
                if !running.contains(port) {
                    return Some(format!(
                        "{} sees the stopped node {port} serve slots",
                        server.port()
                    ));
                }
                summary.push_str(&format!("{first}-{last}@{port} "));
            }
            let mut replicas: Vec<(u16, Option<u16>)> = view
                .iter()
                .filter(|n| !n.primary && running.contains(&n.port))
                .map(|n| (n.port, n.primary_id.as_deref().and_then(port_of)))
                .collect();
            replicas.sort_unstable();
            summary.push_str(&format!("replicas {replicas:?}"));
            match &first_view {
                None => first_view = Some((server.port(), summary)),
                Some((port, seen)) if *seen != summary => {
                    return Some(format!(
                        "{port} sees {seen}, {} sees {summary}",
                        server.port()
                    ))
                }
                Some(_) => {}
            }
            if server.info_field("replication", "role").as_deref() == Some("slave") {
                let link = server.info_field("replication", "master_link_status");
                if link.as_deref() != Some("up") {
                    return Some(format!("replica {} has link {link:?}", server.port()));
                }
            }
        }
        None
    }
}

/// One field of `CLUSTER INFO`, e.g. `cluster_state`.
pub fn cluster_info_field(server: &Server, field: &str) -> Option<String> {
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut server.conn())
        .expect("CLUSTER INFO");
    info.lines().find_map(|line| {
        line.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

/// `INFO replication` role of `server`: `master` or `slave`.
pub fn role(server: &Server) -> String {
    server
        .info_field("replication", "role")
        .expect("role in INFO replication")
}

/// A plain connection to `port` on loopback, e.g. the node a `MOVED` names.
pub fn connect(port: u16) -> Connection {
    let con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .expect("client")
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("connect");
    con.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    con
}
