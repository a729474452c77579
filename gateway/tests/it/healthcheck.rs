//! `rl-gateway healthcheck`, the probe a shell-less container image runs: against a real
//! gateway that is ready (exit 0 for `/healthz` and `--ready`), one that is alive but not
//! ready because its Redis lacks the module (exit 0 for `/healthz`, 1 for `--ready`, the
//! gateway's reason printed), nothing listening (exit 1, saying it could not connect), and
//! a URL it refuses (a usage error, exit 2, before any connection).

use std::process::{Command, Output, Stdio};
use std::time::Duration;
use testkit::gateway::*;

const POLL: Duration = Duration::from_secs(30);

/// `rl-gateway healthcheck ARGS`, run to completion.
fn healthcheck(args: &[&str]) -> Output {
    Command::new(gateway_binary())
        .arg("healthcheck")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("rl-gateway runs")
}

/// The exit code, stdout and stderr of a run.
fn outcome(output: &Output) -> (Option<i32>, String, String) {
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn admin_url(gateway: &Gateway, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", gateway.admin_port)
}

#[test]
fn a_ready_gateway_passes_both_checks() {
    let (_redis, _upstream, gateway) = stack(Flavor::Redis, "");
    let url = admin_url(&gateway, "/healthz");
    wait_until(POLL, "/readyz answers 200", || {
        gateway.admin_get("/readyz").status == 200
    });

    let (code, stdout, stderr) = outcome(&healthcheck(&["--url", &url]));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(stdout.trim(), format!("{url}: 200 ok"), "{stderr}");

    let (code, stdout, stderr) = outcome(&healthcheck(&["--url", &url, "--ready"]));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let ready = admin_url(&gateway, "/readyz");
    assert_eq!(stdout.trim(), format!("{ready}: 200 ready"), "{stderr}");
}

#[test]
fn alive_but_not_ready_without_the_module() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).without_module().start();
        let upstream = Upstream::start();
        let gateway = Gateway::in_front_of(&upstream, &redis, "");
        wait_until(POLL, "/readyz says no backend is loaded", || {
            gateway
                .admin_get("/readyz")
                .body
                .contains("neither the module")
        });
        let url = admin_url(&gateway, "/healthz");

        let (code, stdout, stderr) = outcome(&healthcheck(&["--url", &url]));
        assert_eq!(code, Some(0), "{flavor:?}: alive: {stdout}{stderr}");

        let (code, stdout, stderr) = outcome(&healthcheck(&["--url", &url, "--ready"]));
        assert_eq!(code, Some(1), "{flavor:?}: not ready: {stdout}{stderr}");
        assert_eq!(stdout, "", "{flavor:?}: failures go to stderr");
        assert_eq!(
            stderr.trim(),
            format!(
                "{}: answered 503 Service Unavailable: not ready: neither the module \
                 (RL.HIT unknown) nor the Functions library ratelimit {} is loaded on the \
                 server",
                admin_url(&gateway, "/readyz"),
                env!("CARGO_PKG_VERSION")
            ),
            "{flavor:?}"
        );
    });
}

#[test]
fn nothing_listening_fails_and_says_so() {
    // A port that was free a moment ago; no gateway is started on it.
    let url = format!("http://127.0.0.1:{}/healthz", free_port());
    let (code, stdout, stderr) = outcome(&healthcheck(&["--url", &url, "--timeout-ms", "5000"]));
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stderr.starts_with(&format!("{url}: cannot connect: ")),
        "{stderr}"
    );
    assert!(stderr.contains("admin_listen"), "names the fix: {stderr}");
}

#[test]
fn a_url_it_cannot_ask_is_a_usage_error() {
    for (url, says) in [
        ("https://127.0.0.1:9090/healthz", "plain http only"),
        ("127.0.0.1:9090", "no scheme"),
    ] {
        let (code, stdout, stderr) = outcome(&healthcheck(&["--url", url]));
        assert_eq!(code, Some(2), "{url}: {stdout}{stderr}");
        assert!(stderr.contains(says), "{url}: {stderr}");
    }
    // The subcommand does not mix with the serving options.
    let mixed = Command::new(gateway_binary())
        .args(["--config", "x.toml", "healthcheck"])
        .output()
        .expect("rl-gateway runs");
    assert_eq!(mixed.status.code(), Some(2), "{mixed:?}");
}
