//! The images as artefacts: the gateway's has no shell and no program but rl-gateway, runs
//! as user 10001, becomes healthy by its own `rl-gateway healthcheck` and finds the
//! system's CA roots for an HTTPS upstream; the Valkey image runs Valkey with the module and
//! the compose demo on it; the sizes of them all.

use super::{
    assert_healthcheck_passes, home_until_429, run, run_ok, wait_healthy, Project, START_LIMIT,
};
use std::path::Path;
use std::time::Instant;

/// Rules with an HTTPS upstream and no CA file of their own: the gateway trusts the
/// system's roots, and says which roots it took as it starts (no connection is made; the
/// names do not resolve, which only makes requests answer 502).
const HTTPS_UPSTREAM_RULES: &str = r#"
[server]
listen = "0.0.0.0:8080"
admin_listen = "0.0.0.0:9090"
mode = "proxy"
upstream = "https://upstream.invalid"

[redis]
url = "redis://redis.invalid:6379"

[default]
limits = ["5/1m"]
"#;

/// What the gateway logs when it found the system's roots (Debian's CA bundle in the
/// image); without them it would say "Mozilla's roots (the system has none)".
const SYSTEM_ROOTS: &str =
    "its certificate verified as upstream.invalid against the system's roots";

/// The user the gateway image runs as, numerically (Kubernetes' runAsNonRoot checks it).
const GATEWAY_USER: &str = "10001:10001";

/// What the gateway needs at run time, which its image must hold.
const GATEWAY_FILES: &[&str] = &[
    "usr/local/bin/rl-gateway",
    "lib64/ld-linux-x86-64.so.2",
    "lib/x86_64-linux-gnu/libc.so.6",
    "lib/x86_64-linux-gnu/libm.so.6",
    "lib/x86_64-linux-gnu/libgcc_s.so.1",
    "etc/ssl/certs/ca-certificates.crt",
    "etc/passwd",
    "etc/group",
    "etc/rl-gateway/config.toml",
];

/// Program names whose presence would mean a shell or a package manager came along.
const NOT_IN_GATEWAY: &[&str] = &[
    "sh", "bash", "dash", "busybox", "apt", "apt-get", "dpkg", "ldd", "env",
];

/// Waits until Docker itself reports every container of `service` healthy (its image's
/// HEALTHCHECK having passed), within START_LIMIT; an unhealthy report fails at once.
pub(super) fn turns_healthy(project: &Project, service: &str) {
    let ids = project.compose_ok(&["ps", "-q", service]);
    for id in ids.lines() {
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let status = run_ok(
                "docker",
                &["inspect", "-f", "{{.State.Health.Status}}", id],
                &[],
            );
            match status.trim() {
                "healthy" => break,
                "starting" if Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(250));
                }
                other => {
                    let log = run_ok(
                        "docker",
                        &["inspect", "-f", "{{json .State.Health}}", id],
                        &[],
                    );
                    panic!("{service} {id}: health {other:?}: {log}");
                }
            }
        }
        // The process runs as the image's user, not as root (no user namespace here, so the
        // host sees the container's uid).
        let top = run_ok("docker", &["top", id, "-o", "pid,uid"], &[]);
        let uids: Vec<&str> = top
            .lines()
            .skip(1)
            .filter_map(|line| line.split_whitespace().nth(1))
            .collect();
        assert_eq!(uids, ["10001"], "{service}: processes' uids:\n{top}");
    }
}

/// Deletes a created (or running) container when dropped.
struct Created(String);

impl Drop for Created {
    fn drop(&mut self) {
        let _ = run("docker", &["rm", "-f", &self.0], &[]);
    }
}

/// The gateway image: user 10001, no shell to run, and its file system holding what the
/// binary needs and no other program.
pub(super) fn gateway_image_is_shell_less(tag: &str) {
    let image = format!("rl-gateway:{tag}");
    let user = run_ok(
        "docker",
        &["image", "inspect", "-f", "{{.Config.User}}", &image],
        &[],
    );
    assert_eq!(user.trim(), GATEWAY_USER, "{image}'s user");

    let shell = run(
        "docker",
        &[
            "run",
            "--rm",
            "--entrypoint",
            "/bin/sh",
            &image,
            "-c",
            "true",
        ],
        &[],
    );
    let said = String::from_utf8_lossy(&shell.stderr);
    assert!(!shell.status.success(), "{image} ran /bin/sh");
    assert!(
        said.contains("/bin/sh") && said.contains("no such file"),
        "{image}: why /bin/sh did not run: {said}"
    );

    let id = run_ok("docker", &["create", &image], &[]).trim().to_owned();
    let _created = Created(id.clone());
    let dir = tempfile::tempdir().expect("a temporary folder");
    let tar = dir.path().join("gateway.tar");
    let tar = tar.to_str().expect("a UTF-8 path");
    run_ok("docker", &["export", "-o", tar, &id], &[]);
    let listing = run_ok("tar", &["-tf", tar], &[]);
    let entries: Vec<&str> = listing
        .lines()
        .map(|line| line.trim_start_matches("./").trim_end_matches('/'))
        .collect();
    for file in GATEWAY_FILES {
        assert!(entries.contains(file), "{image} lacks {file}:\n{listing}");
    }
    for entry in &entries {
        let name = entry.rsplit('/').next().unwrap_or(entry);
        assert!(
            !NOT_IN_GATEWAY.contains(&name),
            "{image} holds {entry}:\n{listing}"
        );
        let in_bin = entry.contains("bin/") && !entry.ends_with("bin");
        assert!(
            !in_bin || *entry == "usr/local/bin/rl-gateway",
            "{image} holds a program besides rl-gateway: {entry}"
        );
    }
    eprintln!(
        "containers: {image} holds {} entries, rl-gateway the only program",
        entries.len()
    );
}

/// The gateway image, its rules naming an HTTPS upstream: the gateway takes the system's
/// roots, i.e. the image's CA bundle is where rustls-native-certs looks for it.
pub(super) fn gateway_image_finds_the_ca_bundle(tag: &str) {
    let config = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(config.path().join("config.toml"), HTTPS_UPSTREAM_RULES).expect("write");
    readable(config.path());
    let mount = format!("{}:/etc/rl-gateway:ro", config.path().display());
    let image = format!("rl-gateway:{tag}");
    let id = run_ok("docker", &["run", "-d", "-v", &mount, &image], &[])
        .trim()
        .to_owned();
    let _running = Created(id.clone());
    let deadline = Instant::now() + START_LIMIT;
    loop {
        let logs = run("docker", &["logs", &id], &[]);
        let said = String::from_utf8_lossy(&logs.stderr).into_owned()
            + &String::from_utf8_lossy(&logs.stdout);
        if said.contains(SYSTEM_ROOTS) {
            return;
        }
        assert!(
            Instant::now() < deadline && !said.contains("roots"),
            "{image}: the gateway did not take the system's roots:\n{said}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// The gateway runs as an unprivileged user in its container: it must read the mount.
fn readable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let set = |path: &Path, mode| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    set(dir, 0o755);
    set(&dir.join("config.toml"), 0o644);
}

/// The demo on Valkey (compose.valkey.yaml): the server is Valkey, the module is loaded,
/// RL.HIT decides in it, and the gateway in front of it answers 200s then a 429.
pub(super) fn valkey_demo(compose: &[&'static str]) {
    let project = Project::up_with(compose, &["compose.valkey.yaml"], "valkey", None, 1);
    let ids = project.compose_ok(&["ps", "-q", "redis"]);
    let id = ids.lines().next().expect("the redis service's container");
    let cli = |args: &[&str]| {
        let mut full = vec!["exec", id, "valkey-cli"];
        full.extend(args);
        run_ok("docker", &full, &[])
    };
    let info = cli(&["INFO", "server"]);
    assert!(info.contains("valkey_version:"), "not Valkey:\n{info}");
    let modules = cli(&["MODULE", "LIST"]);
    assert!(
        modules.lines().any(|line| line.trim() == "ratelimit"),
        "MODULE LIST: {modules}"
    );
    // valkey-cli without a terminal prints an array's elements a line each: `allowed` first.
    let allowed: Vec<String> = (0..3)
        .map(|_| {
            let reply = cli(&["RL.HIT", "containers:valkey", "2", "1h"]);
            reply.lines().next().unwrap_or("").trim().to_owned()
        })
        .collect();
    assert_eq!(allowed, ["1", "1", "0"], "RL.HIT with a limit of 2");

    let http = project.gateway_address(1, 8080);
    let admin = project.gateway_address(1, 9090);
    wait_healthy(&admin);
    home_until_429(&http, &admin);
    assert_healthcheck_passes(&project, "redis");
}

/// Prints each image's size, as `docker image ls` counts it (its layers and its base's).
/// The gateway's must be smaller than the Debian base alone: nothing of it was copied.
pub(super) fn print_sizes(tag: &str) {
    let size = |image: &str| -> u64 {
        let said = run_ok(
            "docker",
            &["image", "inspect", "-f", "{{.Size}}", image],
            &[],
        );
        said.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{image}'s size {said:?}: {e}"))
    };
    let mut line = String::from("containers: image sizes");
    for image in [
        "debian:bookworm-slim".to_owned(),
        "debian:trixie-slim".to_owned(),
        format!("redis-ratelimit:{tag}"),
        format!("valkey-ratelimit:{tag}"),
        format!("rl-gateway:{tag}"),
        format!("rl-gateway-demo-upstream:{tag}"),
    ] {
        line.push_str(&format!(
            ", {image} {:.1} MB",
            size(&image) as f64 / 1_000_000.0
        ));
    }
    eprintln!("{line}");
    let gateway = size(&format!("rl-gateway:{tag}"));
    let base = size("debian:bookworm-slim");
    assert!(
        gateway < base,
        "the gateway image ({gateway} bytes) is not smaller than Debian's base ({base})"
    );
}
