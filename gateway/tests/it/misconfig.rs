//! A misconfiguration never becomes "no limit". What the module would refuse (a window
//! above 366 days, here) is refused by `--check-config` and by a reload, so the rules in
//! force stay; and an error reply at run time (a policy deleted in Redis) answers 503 by
//! default (`on_module_error = "closed"`), is counted in `rl_gateway_module_errors_total`
//! and logged at most once per rule per second; `on_module_error = "open"` lets it through.

use std::time::{Duration, Instant};
use testkit::gateway::*;

/// The module refuses windows above 366 d (`ratelimit.max-window-ms`).
const TOO_LONG: &str = "[default]\nlimits = [\"5/400d\"]\n";
/// What the module says about it.
const REASON: &str = "window must be at most 366d";

#[test]
fn check_config_refuses_a_window_the_module_would_refuse() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.toml");
    let head = "[server]\nlisten = \"127.0.0.1:1\"\nupstream = \"http://127.0.0.1:2\"\n";
    std::fs::write(&path, format!("{head}{TOO_LONG}")).expect("write the rules");
    let output = check_config(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "5/400d passed: {stderr}");
    assert!(stderr.contains(REASON), "{stderr}");

    std::fs::write(&path, format!("{head}[default]\nlimits = [\"5/366d\"]\n")).expect("write");
    let output = check_config(&path);
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn a_reload_to_a_window_the_module_would_refuse_keeps_the_old_limit() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, "[default]\nlimits = [\"5/1h\"]\n");
        assert_eq!(gateway.get("/a").status, 200, "{flavor:?}");
        let refused = gateway.metrics().reloads("refused");
        gateway.rewrite(&format!("{}{TOO_LONG}", redis_section(redis.port(), "")));
        gateway.signal("HUP");
        wait_until(Duration::from_secs(30), "the reload is refused", || {
            gateway.metrics().reloads("refused") > refused
        });
        assert!(gateway.log_lines_with(REASON) >= 1, "{}", gateway.log());
        let statuses: Vec<u16> = (0..7).map(|_| gateway.get("/a").status).collect();
        assert_eq!(
            statuses,
            [200, 200, 200, 200, 429, 429, 429],
            "{flavor:?}: the limit of 5 still holds"
        );
        assert_eq!(upstream.requests(), 5, "{flavor:?}");
    });
}

const POLICY_RULES: &str = r#"
[[rule]]
name = "strict"
path = "/strict/**"
policy = "gw-strict"

[[rule]]
name = "lenient"
path = "/lenient/**"
policy = "gw-lenient"
on_module_error = "open"
"#;

#[test]
fn a_policy_deleted_in_redis_closes_the_route_by_default_and_is_counted_and_logged() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack_on(server_with_policies(flavor), POLICY_RULES);
        for name in ["gw-strict", "gw-lenient"] {
            redis::cmd("RL.POLICY")
                .arg("SET")
                .arg(name)
                .arg("5")
                .arg("1h")
                .exec(&mut redis.conn())
                .expect("RL.POLICY SET");
        }
        for path in ["/strict/x", "/lenient/x"] {
            let resp = gateway.get(path);
            assert_eq!(resp.status, 200, "{flavor:?} {path}: {resp:?}");
            assert_eq!(resp.remaining(), 4, "{flavor:?} {path}: {resp:?}");
        }
        for name in ["gw-strict", "gw-lenient"] {
            redis::cmd("RL.POLICY")
                .arg("DEL")
                .arg(name)
                .exec(&mut redis.conn())
                .expect("RL.POLICY DEL");
        }
        let forwarded = upstream.requests();

        let started = Instant::now();
        const TRIES: usize = 20;
        for i in 0..TRIES {
            let resp = gateway.get("/strict/x");
            assert_eq!(resp.status, 503, "{flavor:?} strict {i}: {resp:?}");
            assert!(!resp.has_ratelimit_headers(), "{flavor:?}: {resp:?}");
        }
        let took = started.elapsed();
        assert_eq!(
            upstream.requests(),
            forwarded,
            "{flavor:?}: nothing reached the API"
        );
        for i in 0..3 {
            let resp = gateway.get("/lenient/x");
            assert_eq!(resp.status, 200, "{flavor:?} lenient {i}: {resp:?}");
            assert_eq!(
                resp.fail_open_reason().as_deref(),
                Some("error"),
                "{resp:?}"
            );
        }

        let metrics = gateway.metrics();
        let module_errors =
            |rule| metrics.counter("rl_gateway_module_errors_total", &[("rule", rule)]);
        assert_eq!(module_errors("strict"), TRIES as f64, "{}", metrics.text);
        assert_eq!(module_errors("lenient"), 3.0, "{}", metrics.text);
        assert_eq!(metrics.decisions("strict", "fail_closed"), TRIES as f64);
        assert_eq!(metrics.decisions("lenient", "fail_open"), 3.0);
        assert_eq!(metrics.fail_open("error"), 3.0, "{}", metrics.text);

        // Logged, but at most one line per rule per second (plus one for a partial second
        // at each end of the run).
        let lines = gateway.log_lines_with("rule 'strict': RL.HIT answered an error");
        let most = took.as_secs() as usize + 2;
        assert!(
            (1..=most).contains(&lines),
            "{flavor:?}: {lines} lines for {TRIES} errors in {took:?}:\n{}",
            gateway.log()
        );
        assert!(lines < TRIES, "{flavor:?}: rate-limited: {}", gateway.log());
        assert!(
            gateway.log_lines_with("rule 'lenient': RL.HIT answered an error") >= 1,
            "{}",
            gateway.log()
        );
    });
}

/// `--check-config` on `rest` after the `[server]` lines: whether it passed, and stderr.
fn checked(rest: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.toml");
    let head = "[server]\nlisten = \"127.0.0.1:1\"\nupstream = \"http://127.0.0.1:2\"\n";
    std::fs::write(&path, format!("{head}{rest}")).expect("write the file");
    let output = check_config(&path);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.success(), stderr)
}

/// A file with neither `[redis]` nor a rule would limit nothing: refused, not valid.
#[test]
fn check_config_refuses_a_file_that_limits_nothing() {
    let (passed, stderr) = checked("");
    assert!(!passed, "a file of [server] alone passed");
    assert!(stderr.contains("neither [redis] nor any rule"), "{stderr}");
    let (passed, stderr) = checked("[redis]\nurl = \"redis://127.0.0.1:6379\"\n");
    assert!(passed, "[redis] alone (rules from Redis, say): {stderr}");
    let (passed, stderr) = checked("[default]\nlimits = [\"5/1m\"]\n");
    assert!(passed, "a rule alone: {stderr}");
}

/// A refused rule is named by its `name`, and by its place in the file.
#[test]
fn check_config_names_a_refused_rule_by_its_name() {
    let (passed, stderr) =
        checked("[[rule]]\nname = \"login\"\npath = \"/login\"\nlimits = [\"5\"]\n");
    assert!(!passed);
    assert!(
        stderr.contains("[[rule]] 'login' (number 1): limit '5'"),
        "{stderr}"
    );
    let (passed, stderr) = checked("[[rule]]\npath = \"/login\"\nlimits = [\"5/1m\"]\n");
    assert!(!passed);
    assert!(
        stderr.contains("[[rule]] number 1: needs a name"),
        "{stderr}"
    );
}
