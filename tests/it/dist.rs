//! What users install without Rust: the release archive (`make dist`) and the Debian
//! packages (`make deb`), each built, unpacked and run here as a user would; and the
//! version `MODULE LIST` shows.
//!
//! The archive and package tests build release artefacts (minutes on a small machine when
//! target/release is stale), so they are `#[ignore]`d in `make integration` and run by
//! `make package-test`. Each fails when its artefact is broken: a file missing or corrupt,
//! a module that does not load or answer, a config the shipped gateway refuses.
use testkit::*;

use redis::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The scripts share dist/SHA256SUMS: one build at a time.
static DIST: Mutex<()> = Mutex::new(());

const TRIPLE: &str = "x86_64-linux-gnu";

/// `MODULE LIST`'s `ver` for a version `major.minor.patch` (see src/version.rs).
fn packed_version(version: &str) -> i64 {
    let parts: Vec<i64> = version
        .split('.')
        .map(|part| part.parse().expect("a numeric version part"))
        .collect();
    assert_eq!(parts.len(), 3, "{version}");
    parts[0] * 10_000 + parts[1] * 100 + parts[2]
}

/// The `ver` of the module named `ratelimit` in `MODULE LIST`.
fn listed_version(server: &Server) -> i64 {
    let modules: Vec<Value> = redis::cmd("MODULE")
        .arg("LIST")
        .query(&mut server.conn())
        .expect("MODULE LIST");
    for module in modules {
        let fields: Vec<Value> = match module {
            Value::Array(fields) => fields,
            other => panic!("MODULE LIST entry {other:?}"),
        };
        let field = |name: &str| {
            fields
                .chunks(2)
                .find(|pair| matches!(&pair[0], Value::BulkString(b) if b == name.as_bytes()))
                .map(|pair| pair[1].clone())
        };
        if field("name") == Some(Value::BulkString(b"ratelimit".to_vec())) {
            match field("ver") {
                Some(Value::Int(version)) => return version,
                other => panic!("ver is {other:?}"),
            }
        }
    }
    panic!("ratelimit is not in MODULE LIST");
}

/// Runs a command, panics with its output unless it succeeds, and returns its stdout.
fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs one of the dist scripts from the checkout (it builds what is stale) and returns
/// the artefacts it printed, one per line.
fn build_with(script: &str) -> Vec<PathBuf> {
    let root = workspace_root();
    let out = run(Command::new(root.join("scripts").join(script)).current_dir(root));
    out.lines().map(|line| root.join(line.trim())).collect()
}

/// `sha256sum -c` of dist/SHA256SUMS, for the artefacts there only (the other script's
/// may not have been built).
fn check_dist_sums() {
    let dist = workspace_root().join("dist");
    run(Command::new("sha256sum")
        .args(["--check", "--strict", "--ignore-missing", "SHA256SUMS"])
        .current_dir(&dist));
}

/// RL.HIT answers the README's quick start, and MODULE LIST shows Cargo's version, with
/// `module` loaded by path on every server flavour.
fn quick_start_with(module: &Path) {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor)
            .without_module()
            .arg("loadmodule", &module.to_string_lossy())
            .start();
        let first = hit(&mut server.conn(), "rl:login:alice", &["5", "1m"]);
        assert!(first.allowed, "{flavor:?}: {first:?}");
        assert_eq!((first.limit, first.remaining), (5, 4), "{flavor:?}");
        assert_eq!(
            listed_version(&server),
            packed_version(env!("CARGO_PKG_VERSION")),
            "{flavor:?}"
        );
    });
}

/// `rl-gateway --check-config` accepts `config`.
fn config_passes(gateway: &Path, config: &Path) {
    let out = run(Command::new(gateway).arg("--check-config").arg(config));
    assert!(out.contains("valid"), "{}: {out}", config.display());
}

#[test]
fn module_list_shows_the_cargo_version() {
    let server = ServerConfig::new(Flavor::Redis).start();
    assert_eq!(
        listed_version(&server),
        packed_version(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(packed_version("0.1.0"), 100);
    assert_eq!(packed_version("1.2.3"), 10_203);
}

#[test]
#[ignore = "builds release artefacts: make package-test"]
fn the_archive_unpacks_and_runs_the_quick_start() {
    let _one = DIST.lock().unwrap_or_else(|e| e.into_inner());
    let name = format!("redis-ratelimit-{}-{TRIPLE}", env!("CARGO_PKG_VERSION"));
    let archive = workspace_root().join(format!("dist/{name}.tar.gz"));
    assert_eq!(build_with("dist.sh"), vec![archive.clone()]);
    check_dist_sums();

    let unpacked = tempfile::tempdir().expect("temp dir");
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(unpacked.path()));
    let root = unpacked.path().join(&name);
    run(Command::new("sha256sum")
        .args(["--check", "--strict", "--quiet", "SHA256SUMS"])
        .current_dir(&root));
    for file in [
        "libredis_ratelimit.so",
        "rl-gateway",
        "README.md",
        "LICENSE",
        "CHANGELOG.md",
        "examples/rules.example.toml",
        "examples/nginx.example.conf",
        "examples/envoy/rules.toml",
        "examples/envoy/envoy.yaml",
        "examples/envoy/ratelimit/api.yaml",
    ] {
        assert!(root.join(file).is_file(), "{file} is not in {name}");
    }
    // Where the README's links point.
    assert!(
        root.join("docs/src/SUMMARY.md").is_file(),
        "the book's sources"
    );
    assert!(
        !root.join("demo-upstream").exists(),
        "only what users run ships"
    );

    quick_start_with(&root.join("libredis_ratelimit.so"));
    let gateway = root.join("rl-gateway");
    config_passes(&gateway, &root.join("examples/rules.example.toml"));
    config_passes(&gateway, &root.join("examples/envoy/rules.toml"));
}

/// The package's files as `dpkg-deb --contents` lists them: paths without the leading ".".
fn contents(deb: &Path) -> Vec<String> {
    run(Command::new("dpkg-deb").arg("--contents").arg(deb))
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(|path| path.trim_start_matches('.').to_string())
        .collect()
}

/// One field of the package's control file.
fn control_field(deb: &Path, field: &str) -> String {
    run(Command::new("dpkg-deb").arg("--field").arg(deb).arg(field))
        .trim()
        .to_string()
}

/// The package's files and control fields: `paths` are in it, the version is Cargo's, the
/// libc it needs is named, the files of /etc are conffiles.
fn check_package(deb: &Path, package: &str, paths: &[&str], conffiles: &[&str]) {
    let info = run(Command::new("dpkg-deb").arg("--info").arg(deb));
    assert_eq!(control_field(deb, "Package"), package, "{info}");
    assert_eq!(control_field(deb, "Version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(control_field(deb, "Architecture"), "amd64");
    assert!(
        control_field(deb, "Depends").contains("libc6 (>= 2."),
        "{info}"
    );
    let listed = contents(deb);
    for path in paths {
        assert!(listed.iter().any(|p| p == path), "{path} not in {listed:?}");
    }
    assert!(
        !listed.iter().any(|p| p.contains("demo-upstream")),
        "{listed:?}"
    );
    let control = tempfile::tempdir().expect("temp dir");
    run(Command::new("dpkg-deb")
        .arg("--control")
        .arg(deb)
        .arg(control.path()));
    let listed_conffiles =
        std::fs::read_to_string(control.path().join("conffiles")).unwrap_or_default();
    assert_eq!(
        listed_conffiles.lines().collect::<Vec<_>>(),
        conffiles,
        "{package}"
    );
    for script in ["postinst", "prerm", "postrm"] {
        let path = control.path().join(script);
        if path.exists() {
            run(Command::new("sh").arg("-n").arg(&path));
        }
    }
}

/// The single uncommented `loadmodule` path of the packaged snippet.
fn snippet_module_path(snippet: &str) -> String {
    let lines: Vec<&str> = snippet
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("loadmodule "))
        .collect();
    assert_eq!(lines.len(), 1, "one active loadmodule line:\n{snippet}");
    lines[0]["loadmodule ".len()..].trim().to_string()
}

/// The unit's `Key=` value (the first one).
fn unit_value<'a>(unit: &'a str, key: &str) -> &'a str {
    unit.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in the unit"))
}

/// Runs the unit's command line (`/usr/bin/rl-gateway --check-config /etc/...`) against
/// the files extracted under `root`.
fn run_unit_command(root: &Path, command: &str) -> String {
    let words: Vec<String> = command
        .split_whitespace()
        .map(|word| match word.strip_prefix('/') {
            Some(absolute) => root.join(absolute).to_string_lossy().into_owned(),
            None => word.to_string(),
        })
        .collect();
    run(Command::new(&words[0]).args(&words[1..]))
}

/// A stand-in for the API behind the gateway: answers every request `200 ok`, for as long
/// as the test process lives.
fn start_upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
    let port = listener.local_addr().expect("upstream address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    port
}

/// The status code of `GET path` on `port`, or None while nothing answers there.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    reply.split_whitespace().nth(1)?.parse().ok()
}

/// A gateway process, killed when dropped.
struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `text` with `from` replaced by `to`, which must be there (the example changed if not).
fn replaced(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "the example rules no longer hold {from}"
    );
    text.replace(from, to)
}

/// Starts the packaged gateway as its unit does, with the packaged rules moved to free ports,
/// and sends requests through it: the example's default rule allows 5 a minute per client
/// and path, so the sixth `GET /home` is 429, and the upstream answered the others.
fn gateway_serves_through(root: &Path, exec_start: &str, redis_port: u16) {
    let rules = std::fs::read_to_string(root.join("etc/rl-gateway/rules.toml")).expect("rules");
    let (listen, admin) = (free_port(), free_port());
    let rules = replaced(&rules, "127.0.0.1:8080", &format!("127.0.0.1:{listen}"));
    let rules = replaced(&rules, "127.0.0.1:9090", &format!("127.0.0.1:{admin}"));
    let upstream = format!("http://127.0.0.1:{}", start_upstream());
    let rules = replaced(&rules, "http://127.0.0.1:9000", &upstream);
    let redis = format!("redis://127.0.0.1:{redis_port}");
    let rules = replaced(&rules, "redis://127.0.0.1:6379", &redis);
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("rules.toml");
    std::fs::write(&config, rules).expect("write the rules");

    let command = exec_start.replace("/etc/rl-gateway/rules.toml", &config.to_string_lossy());
    let words: Vec<&str> = command.split_whitespace().collect();
    let binary = root.join(words[0].trim_start_matches('/'));
    let child = Command::new(binary)
        .args(&words[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the packaged rl-gateway starts");
    let _gateway = Gateway(child);
    // A deadline for the start only: the gateway may take its time, never forever.
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_status(admin, "/healthz") != Some(200) {
        assert!(
            Instant::now() < deadline,
            "the gateway never became healthy"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let statuses: Vec<Option<u16>> = (0..6).map(|_| http_status(listen, "/home")).collect();
    let mut expected = vec![Some(200); 5];
    expected.push(Some(429));
    assert_eq!(statuses, expected);
}

#[test]
#[ignore = "builds release artefacts: make package-test"]
fn the_debian_packages_install_and_the_module_loads() {
    let _one = DIST.lock().unwrap_or_else(|e| e.into_inner());
    let version = env!("CARGO_PKG_VERSION");
    let module_deb = workspace_root().join(format!("dist/redis-ratelimit_{version}_amd64.deb"));
    let gateway_deb = workspace_root().join(format!("dist/rl-gateway_{version}_amd64.deb"));
    assert_eq!(
        build_with("dist-deb.sh"),
        vec![module_deb.clone(), gateway_deb.clone()]
    );
    check_dist_sums();

    check_package(
        &module_deb,
        "redis-ratelimit",
        &[
            "/usr/lib/redis/modules/libredis_ratelimit.so",
            "/etc/redis/ratelimit.conf",
            "/usr/share/doc/redis-ratelimit/copyright",
        ],
        &["/etc/redis/ratelimit.conf"],
    );
    check_package(
        &gateway_deb,
        "rl-gateway",
        &[
            "/usr/bin/rl-gateway",
            "/etc/rl-gateway/rules.toml",
            "/lib/systemd/system/rl-gateway.service",
            "/usr/share/doc/rl-gateway/rules.example.toml",
            "/usr/share/doc/rl-gateway/copyright",
        ],
        &["/etc/rl-gateway/rules.toml"],
    );

    // Installed by dpkg itself into a scratch root, its maintainer scripts run (without
    // chroot: they see DPKG_ROOT and leave this machine's users and systemd alone).
    let scratch = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(scratch.path().join("var/lib/dpkg/info")).expect("dpkg dir");
    std::fs::write(scratch.path().join("var/lib/dpkg/status"), "").expect("dpkg status");
    // libc6 and libgcc-s1 are this machine's, not in the scratch root's database.
    dpkg_in(
        scratch.path(),
        &["--force-depends", "--install"],
        &[&module_deb, &gateway_deb],
    );
    let root = scratch.path();
    let snippet =
        std::fs::read_to_string(root.join("etc/redis/ratelimit.conf")).expect("the snippet");
    let module = snippet_module_path(&snippet);
    assert_eq!(module, "/usr/lib/redis/modules/libredis_ratelimit.so");
    quick_start_with(&root.join(module.trim_start_matches('/')));

    let unit = std::fs::read_to_string(root.join("lib/systemd/system/rl-gateway.service"))
        .expect("the unit");
    assert_eq!(unit_value(&unit, "User"), "rl-gateway");
    assert_eq!(
        unit_value(&unit, "ExecStart"),
        "/usr/bin/rl-gateway --config /etc/rl-gateway/rules.toml"
    );
    let checked = run_unit_command(root, unit_value(&unit, "ExecStartPre"));
    assert!(checked.contains("valid"), "{checked}");

    let module_path = root.join(module.trim_start_matches('/'));
    let server = ServerConfig::new(Flavor::Redis)
        .without_module()
        .arg("loadmodule", &module_path.to_string_lossy())
        .start();
    gateway_serves_through(root, unit_value(&unit, "ExecStart"), server.port());
    drop(server);
    removed_cleanly(root);
}

/// Runs dpkg on the packages under `root`, as root or not.
fn dpkg_in(root: &Path, action: &[&str], packages: &[&Path]) -> String {
    let root_option = format!("--root={}", root.display());
    run(Command::new("dpkg")
        .args([
            root_option.as_str(),
            "--force-script-chrootless",
            "--force-not-root",
        ])
        .args(action)
        .args(packages))
}

/// The files left under `root` outside dpkg's own database.
fn files_left(root: &Path) -> Vec<String> {
    let out = run(Command::new("find")
        .arg(".")
        .args(["-type", "f", "-not", "-path", "./var/lib/dpkg/*"])
        .current_dir(root));
    let mut files: Vec<String> = out.lines().map(str::to_string).collect();
    files.sort();
    files
}

/// `dpkg --remove` keeps the conffiles only; `--purge` leaves nothing of either package.
fn removed_cleanly(root: &Path) {
    let packages = ["rl-gateway", "redis-ratelimit"].map(Path::new);
    dpkg_in(root, &["--remove"], &packages);
    assert_eq!(
        files_left(root),
        ["./etc/redis/ratelimit.conf", "./etc/rl-gateway/rules.toml"]
    );
    dpkg_in(root, &["--purge"], &packages);
    assert_eq!(files_left(root), Vec::<String>::new());
    assert!(
        !root.join("etc/rl-gateway").exists(),
        "purge removes the folder"
    );
}
