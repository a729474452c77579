//! TLS for the tests: a CA with a server and a client certificate, made by the `openssl`
//! command (scripts/setup.sh installs it), and a server that serves TLS with them beside
//! its plain port (which the tests keep for setting up and reading what the gateway did).
//!
//! Not every server is built with TLS: Debian's Redis is, and so are the Redis and Valkey
//! that `scripts/newer-servers.sh` builds, but PyPI's Valkey is not. [`each_tls_flavor`]
//! runs a test on the flavours that have it and says which it skipped.

use super::*;
use crate::cluster::{Cluster, NodeSetup};
use crate::sentinel::Sentinels;
use std::collections::BTreeMap;
use std::io::{Read, Write};

/// The certificates of one test, in a temporary directory:
/// - `ca.pem`: the CA that signed the others; `other-ca.pem`: a CA that signed nothing here;
/// - `server.pem`/`server.key`: for `localhost` and `127.0.0.1`;
/// - `named.pem`/`named.key`: for `redis.test` alone (not the address it is reached at);
/// - `client.pem`/`client.key`: a client certificate.
pub struct Pki {
    dir: TempDir,
}

impl Pki {
    /// Makes every certificate; panics with openssl's stderr when it fails.
    pub fn new() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("rl-pki-")
            .tempdir()
            .expect("temp dir");
        let pki = Pki { dir };
        for ca in ["ca", "other-ca"] {
            pki.openssl(&[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=rl-test {ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
            ]);
        }
        pki.leaf("server", "subjectAltName=DNS:localhost,IP:127.0.0.1");
        pki.leaf("named", "subjectAltName=DNS:redis.test");
        pki.leaf("client", "extendedKeyUsage=clientAuth");
        pki
    }

    /// A key and a certificate signed by `ca.pem`, with `extension`.
    fn leaf(&self, name: &str, extension: &str) {
        let ext = format!("{name}.ext");
        std::fs::write(
            self.path(&ext),
            format!("basicConstraints=CA:FALSE\n{extension}\n"),
        )
        .expect("write the extension file");
        self.openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN=rl-test {name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("openssl runs (scripts/setup.sh installs it)");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// A file of the directory, by name (`ca.pem`, `client.key`...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The directory of the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The path as a TOML string's contents.
    pub fn toml_path(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}

/// A server that serves TLS on `tls_port` with `pki`'s certificate `cert` (`server` or
/// `named`), asking clients for a certificate of `ca.pem` when `client_certs` is true.
pub fn tls_server(flavor: Flavor, pki: &Pki, cert: &str, client_certs: bool) -> (Server, u16) {
    let tls_port = free_port();
    let config = tls_args(
        ServerConfig::new(flavor),
        tls_port,
        pki.dir(),
        cert,
        client_certs,
    );
    (config.start(), tls_port)
}

/// Whether `flavor`'s server (as [`Flavor::binary`] finds it) is built with TLS, asked once
/// per test binary: the server is started with a `--tls-port` and no certificate, which a
/// server with TLS refuses for the missing certificate and one without for the missing
/// TLS. Any other outcome panics with what the server said. Redis must have TLS: every
/// Redis the tests run on is built with it, so its absence is a broken set-up, not a skip.
pub fn has_tls(flavor: Flavor) -> bool {
    static REDIS: OnceLock<bool> = OnceLock::new();
    static VALKEY: OnceLock<bool> = OnceLock::new();
    let known = match flavor {
        Flavor::Redis => &REDIS,
        Flavor::Valkey => &VALKEY,
    };
    *known.get_or_init(|| {
        let found = probe_tls(flavor);
        assert!(
            found || flavor != Flavor::Redis,
            "{} is built without TLS: the TLS tests need a Redis built with it (Debian's \
             redis-server is; set REDIS_SERVER to one)",
            flavor.binary().display()
        );
        found
    })
}

/// Starts the server on a TLS port without a certificate and reads why it stopped.
fn probe_tls(flavor: Flavor) -> bool {
    let binary = flavor.binary();
    let mut child = Command::new(&binary)
        .args(["--port", "0", "--bind", "127.0.0.1", "--save", ""])
        .args(["--tls-port", &free_port().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // A server that started after all is killed: the output below then says so.
    let _ = child.kill();
    let _ = child.wait();
    // Its log goes to stdout (no --logfile); stderr holds what comes before the log opens.
    let mut said = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut said);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut said);
    }
    if said.contains("Failed finding TLS support") || said.contains("connection type tls") {
        false
    } else if said.contains("No tls-cert-file configured") {
        true
    } else {
        panic!(
            "cannot tell whether {} has TLS: started with --tls-port and no certificate, \
             it said:\n{said}",
            binary.display()
        )
    }
}

/// Runs `test` once per flavour whose server is built with TLS ([`has_tls`]), in the order
/// of [`FLAVORS`], and writes a `SKIPPED` line to the terminal for each one without (past
/// the test harness's capture, so that a passing run shows it too).
pub fn each_tls_flavor(mut test: impl FnMut(Flavor)) {
    for flavor in FLAVORS {
        if has_tls(flavor) {
            println!("--- on {flavor:?}");
            test(flavor);
        } else {
            let (major, minor) = flavor.version();
            // The test harness names each test's thread after the test.
            let thread = std::thread::current();
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {} on {flavor:?}: {} ({flavor:?} {major}.{minor}) is built without TLS",
                thread.name().unwrap_or("a TLS test"),
                flavor.binary().display()
            );
        }
    }
}

/// The arguments that make a server serve TLS on `tls_port` with the certificate `cert`
/// (`server` or `named`) of the [`Pki`] in `dir`, asking clients for one of `ca.pem` when
/// `client_certs` is true, and speaking TLS to its primary when it is a replica (which
/// then announces its TLS port, so that the sentinels name that one).
fn tls_args(
    config: ServerConfig,
    tls_port: u16,
    dir: &Path,
    cert: &str,
    client_certs: bool,
) -> ServerConfig {
    let file = |name: String| dir.join(name).display().to_string();
    config
        .arg("tls-port", &tls_port.to_string())
        .arg("tls-cert-file", &file(format!("{cert}.pem")))
        .arg("tls-key-file", &file(format!("{cert}.key")))
        .arg("tls-ca-cert-file", &file("ca.pem".into()))
        .arg("tls-auth-clients", if client_certs { "yes" } else { "no" })
        .arg("tls-replication", "yes")
}

/// A cluster whose nodes serve TLS (`pki`'s `server` certificate) beside their plain
/// port, created over TLS with the cluster bus on TLS too (`tls-cluster yes`): the nodes
/// then announce their TLS ports, so `CLUSTER SLOTS` and `MOVED` name them to a client
/// that came over TLS (and the plain ports to one that did not, as testkit's own calls).
pub struct TlsCluster {
    pub cluster: Cluster,
    /// Each node's TLS port, by its plain port.
    tls_ports: BTreeMap<u16, u16>,
}

impl TlsCluster {
    /// `primaries` primaries with `replicas_per_primary` replicas each, over TLS.
    pub fn start(
        flavor: Flavor,
        pki: &Pki,
        primaries: usize,
        replicas_per_primary: usize,
    ) -> TlsCluster {
        let ports = Arc::new(Mutex::new(BTreeMap::new()));
        let seen = ports.clone();
        let dir = pki.dir().to_path_buf();
        let setup = NodeSetup {
            node: Box::new(move |config| {
                let tls_port = free_port();
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                seen.insert(config.port, tls_port);
                let config = tls_args(config, tls_port, &dir, "server", false);
                (config.arg("tls-cluster", "yes"), tls_port)
            }),
            cli_args: vec!["--tls".into(), "--cacert".into(), pki.toml_path("ca.pem")],
        };
        let cluster = Cluster::start_with(flavor, primaries, replicas_per_primary, &setup);
        let tls_ports = ports.lock().unwrap_or_else(|e| e.into_inner()).clone();
        TlsCluster { cluster, tls_ports }
    }

    /// The TLS port of `server`, a node of this cluster.
    pub fn tls_port(&self, server: &Server) -> u16 {
        self.tls_ports[&server.port()]
    }
}

/// A primary and its replica of `flavor`, each serving TLS (`pki`'s `server` certificate)
/// beside its plain port, the replica linked to the primary's TLS port over TLS; each
/// with its TLS port.
pub fn tls_primary_with_replica(flavor: Flavor, pki: &Pki) -> ((Server, u16), (Server, u16)) {
    let primary_tls = free_port();
    let primary = tls_args(
        ServerConfig::new(flavor),
        primary_tls,
        pki.dir(),
        "server",
        false,
    )
    .start();
    let replica_tls = free_port();
    let replica = tls_args(
        ServerConfig::new(flavor),
        replica_tls,
        pki.dir(),
        "server",
        false,
    )
    .arg("replicaof", &format!("127.0.0.1 {primary_tls}"))
    .start();
    wait_for_link(&replica);
    ((primary, primary_tls), (replica, replica_tls))
}

/// Sentinels that serve TLS beside their plain ports (which testkit keeps for itself) and
/// speak TLS to the servers they watch (`tls-replication yes`): started on the primary's
/// TLS port, they name TLS ports.
pub struct TlsSentinels {
    pub sentinels: Sentinels,
    tls_ports: Vec<u16>,
}

impl TlsSentinels {
    /// `count` sentinels watching the primary on `primary_tls_port`, as [`Sentinels::start`].
    pub fn start(flavor: Flavor, pki: &Pki, primary_tls_port: u16, count: usize) -> Self {
        let mut tls_ports = Vec::new();
        let file = |name: &str| pki.toml_path(name);
        let sentinels = Sentinels::start_each(
            flavor,
            primary_tls_port,
            count,
            || {
                let port = free_port();
                tls_ports.push(port);
                format!(
                    "tls-port {port}\ntls-cert-file \"{}\"\ntls-key-file \"{}\"\n\
                     tls-ca-cert-file \"{}\"\ntls-auth-clients no\ntls-replication yes\n",
                    file("server.pem"),
                    file("server.key"),
                    file("ca.pem")
                )
            },
            None,
        );
        TlsSentinels {
            sentinels,
            tls_ports,
        }
    }

    /// The TOML array of the sentinels' TLS `127.0.0.1:port`, as `[redis] sentinels`.
    pub fn toml_list(&self) -> String {
        let quoted: Vec<String> = self
            .tls_ports
            .iter()
            .map(|p| format!("\"127.0.0.1:{p}\""))
            .collect();
        format!("[{}]", quoted.join(", "))
    }
}
