//! The Kubernetes manifests of `deploy/kubernetes/`, as far as a machine without a cluster
//! can try them: every object validated against Kubernetes' own API schemas (the PyPI
//! package kubernetes-validate, strict: an unknown field fails), and what the containers
//! would run, run here for real: Redis started with the manifest's own command line (its
//! ACL user made from the Secret's password, the default user off) and its readiness probe,
//! then the gateway with the ConfigMap's file, the Secret in `REDIS_PASSWORD` as the
//! Deployment passes it, its probes' paths answering 200 and a request decided through
//! Redis. Not tried here: the scheduling, the Services' DNS names (`redis` becomes the
//! test server's address), the images themselves (the containers test builds and runs them)
//! and the kubelet's probes.

use std::process::Command;
use testkit::gateway::*;
use testkit::*;

const GATEWAY: &str = include_str!("../../../deploy/kubernetes/rl-gateway.yaml");
const REDIS: &str = include_str!("../../../deploy/kubernetes/redis.yaml");
const PASSWORD: &str = "k8s-Secret-pass";

/// The objects of a manifest file, in order.
fn objects(text: &str) -> Vec<serde_yaml_ng::Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|document| serde::Deserialize::deserialize(document).expect("a YAML object"))
        .collect()
}

/// The object of `kind` in `text`.
fn object(text: &str, kind: &str) -> serde_yaml_ng::Value {
    objects(text)
        .into_iter()
        .find(|o| o["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} in the manifest"))
}

/// A string field, panicking with its path when missing.
fn string<'v>(value: &'v serde_yaml_ng::Value, what: &str) -> &'v str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string"))
}

#[test]
fn every_object_is_valid_for_kubernetes() {
    let validate = workspace_root().join(".venv/bin/kubernetes-validate");
    assert!(
        validate.exists(),
        "run `make setup`: it installs kubernetes-validate into .venv"
    );
    let dir = workspace_root().join("deploy/kubernetes");
    for file in ["rl-gateway.yaml", "redis.yaml"] {
        let output = Command::new(&validate)
            .arg("--strict")
            .arg(dir.join(file))
            .output()
            .expect("kubernetes-validate runs");
        let said = String::from_utf8_lossy(&output.stdout).to_string()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{file}:\n{said}");
        let passed = said.matches(" passed for resource ").count();
        assert_eq!(
            passed,
            objects(&std::fs::read_to_string(dir.join(file)).expect("read")).len(),
            "{said}"
        );
    }
}

/// The container command of the Redis Deployment, for `sh -c`: its configuration file
/// replaced by one that loads this checkout's module on `port`.
fn redis_command(conf: &std::path::Path) -> String {
    let deployment = object(REDIS, "Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["command"][0].as_str(), Some("sh"));
    let script = string(&container["args"][0], "the Redis container's args");
    assert!(script.contains("/etc/redis/ratelimit.conf"), "{script}");
    script.replace("/etc/redis/ratelimit.conf", &conf.display().to_string())
}

#[test]
fn redis_and_the_gateway_run_as_the_manifests_say() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let conf = dir.path().join("ratelimit.conf");
    let redis_conf = format!(
        "port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\ndir {}\nloadmodule {}\n",
        dir.path().display(),
        module_path().display()
    );
    std::fs::write(&conf, redis_conf).expect("write the Redis configuration");
    // `exec` in the command: the shell becomes redis-server, which the guard stops.
    let _redis = Killed(
        Command::new("sh")
            .args(["-c", &redis_command(&conf)])
            .env("REDIS_PASSWORD", PASSWORD)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server starts"),
    );

    // Its readiness probe, as the kubelet would run it (on this port).
    let deployment = object(REDIS, "Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let probe = string(
        &container["readinessProbe"]["exec"]["command"][2],
        "the probe",
    );
    let probe = probe.replace("redis-cli ", &format!("redis-cli -p {port} "));
    wait_until(
        std::time::Duration::from_secs(20),
        "Redis's readiness probe passes",
        || {
            Command::new("sh")
                .args(["-c", &probe])
                .env("REDIS_PASSWORD", PASSWORD)
                .status()
                .is_ok_and(|s| s.success())
        },
    );
    // The default user is off: a client without the password is refused.
    let anonymous = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "PING"])
        .output()
        .expect("redis-cli runs");
    let said = String::from_utf8_lossy(&anonymous.stdout);
    assert!(!said.contains("PONG"), "the default user answers: {said}");

    let gateway = start_gateway(port);
    for path in probe_paths() {
        let resp = gateway.admin_get(&path);
        assert_eq!(resp.status, 200, "GET {path}: {resp:?}");
    }
    let resp = gateway.send("GET", "/api/orders", &[("X-Api-Key", "k1")]);
    assert_eq!(resp.status, 200, "{resp:?}\n{}", gateway.log());
    assert_eq!(gateway.metrics().decisions("api", "allowed"), 1.0);
}

/// A process killed (and reaped) when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The paths of the gateway Deployment's readiness and liveness probes.
fn probe_paths() -> Vec<String> {
    let deployment = object(GATEWAY, "Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    ["readinessProbe", "livenessProbe"]
        .iter()
        .map(|probe| {
            assert_eq!(container[*probe]["httpGet"]["port"].as_str(), Some("admin"));
            string(&container[*probe]["httpGet"]["path"], probe).to_owned()
        })
        .collect()
}

/// The gateway with the ConfigMap's file (its listeners on free ports, `redis:6379` the
/// test server) and the Secret's password in `REDIS_PASSWORD`, as the Deployment gives it.
fn start_gateway(redis_port: u16) -> Gateway {
    let config_map = object(GATEWAY, "ConfigMap");
    let file = string(&config_map["data"]["config.toml"], "config.toml");
    let (server, rest) = file.split_once("[redis]").expect("a [redis] section");
    let server_lines: String = server
        .lines()
        .filter(|l| {
            !l.starts_with("[server]") && !l.starts_with("listen") && !l.starts_with("admin_listen")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let rest = format!("[redis]{rest}").replace(
        "redis://redis:6379",
        &format!("redis://127.0.0.1:{redis_port}"),
    );
    let deployment = object(GATEWAY, "Deployment");
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"][0];
    assert_eq!(env["name"].as_str(), Some("REDIS_PASSWORD"));
    assert!(rest.contains("password_env = \"REDIS_PASSWORD\""), "{rest}");
    let gateway = Gateway::start_with_env(&server_lines, &rest, &[("REDIS_PASSWORD", PASSWORD)]);
    wait_until(
        std::time::Duration::from_secs(30),
        "/readyz answers 200",
        || gateway.admin_get("/readyz").status == 200,
    );
    gateway
}
