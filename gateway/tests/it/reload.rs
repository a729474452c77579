//! Rules reload on SIGHUP and when the file's modification time changes; a file that does
//! not parse, or names an unknown algorithm, is refused (logged with `refused`, counted in
//! `rl_gateway_rule_reloads_total{result="refused"}`) and the old rules stay.
//! `--check-config` says whether a file is valid without starting anything.

use std::time::Duration;
use testkit::gateway::*;

fn rules(limit: u32) -> String {
    format!(
        r#"
[[rule]]
name = "api"
path = "/**"
limits = ["{limit}/1h"]
algorithm = "log"
"#
    )
}

const UNKNOWN_ALGORITHM: &str = r#"
[[rule]]
name = "api"
path = "/**"
limits = ["3/1h"]
algorithm = "quantum"
"#;

const SYNTAX_ERROR: &str = r#"
[[rule]
name = "api"
path = "/**"
limits = ["3/1h"
"#;

const RELOAD_LIMIT: Duration = Duration::from_secs(20);

struct Setup {
    redis: Server,
    _upstream: Upstream,
    gateway: Gateway,
}

impl Setup {
    fn start(flavor: Flavor, reload_interval_ms: u64) -> Setup {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateway = Gateway::start(
            &format!(
                "{}reload_interval_ms = {reload_interval_ms}\n",
                upstream.server_line()
            ),
            &format!("{}{}", redis_section(redis.port(), ""), rules(1000)),
        );
        Setup {
            redis,
            _upstream: upstream,
            gateway,
        }
    }

    /// The rules file with `rules` after the `[redis]` section.
    fn rewrite(&self, rules: &str) {
        self.gateway
            .rewrite(&format!("{}{rules}", redis_section(self.redis.port(), "")));
    }

    /// The `q` the gateway announces now.
    fn q(&self) -> i64 {
        let resp = self.gateway.get("/thing");
        assert!(
            resp.status == 200 || resp.status == 429,
            "unexpected answer: {resp:?}"
        );
        let policy = resp.policy();
        assert_eq!(policy.len(), 1, "{resp:?}");
        policy[0].q
    }

    fn wait_for_q(&self, q: i64, what: &str) {
        wait_until(RELOAD_LIMIT, what, || self.q() == q);
    }

    fn refused(&self) -> f64 {
        self.gateway.metrics().reloads("refused")
    }

    /// The refused reloads counted and logged so far.
    fn refusals(&self) -> (f64, usize) {
        (self.refused(), self.gateway.log_lines_with("refused"))
    }

    /// Waits until one more refused reload was counted and logged, then checks that the
    /// rules in force still announce `q`.
    fn wait_refused(&self, before: (f64, usize), q: i64, what: &str) {
        wait_until(RELOAD_LIMIT, what, || self.refused() > before.0);
        wait_until(
            RELOAD_LIMIT,
            &format!("{what}: a `refused` log line"),
            || self.gateway.log_lines_with("refused") > before.1,
        );
        assert_eq!(self.q(), q, "{what}: the old rules stay");
    }
}

#[test]
fn sighup_reloads_the_rules_and_refuses_bad_files() {
    each_flavor(|flavor| {
        let setup = Setup::start(flavor, 0);
        assert_eq!(setup.q(), 1000, "{flavor:?}");
        assert_eq!(setup.gateway.metrics().reloads("ok"), 0.0, "{flavor:?}");

        setup.rewrite(&rules(700));
        setup.gateway.signal("HUP");
        setup.wait_for_q(700, &format!("{flavor:?}: the new limit after SIGHUP"));
        wait_until(RELOAD_LIMIT, "a `reloaded` log line", || {
            setup.gateway.log_lines_with("reloaded") >= 1
        });
        assert!(
            setup.gateway.metrics().reloads("ok") >= 1.0,
            "{flavor:?}:\n{}",
            setup.gateway.metrics().text
        );

        let before = setup.refusals();
        setup.rewrite(SYNTAX_ERROR);
        setup.gateway.signal("HUP");
        setup.wait_refused(before, 700, &format!("{flavor:?}: a syntax error"));

        let before = setup.refusals();
        setup.rewrite(UNKNOWN_ALGORITHM);
        setup.gateway.signal("HUP");
        setup.wait_refused(before, 700, &format!("{flavor:?}: an unknown algorithm"));
        assert!(setup.refused() >= 2.0, "{flavor:?}");

        // Fixed again: reloads again.
        setup.rewrite(&rules(900));
        setup.gateway.signal("HUP");
        setup.wait_for_q(900, &format!("{flavor:?}: the fixed file"));
    });
}

#[test]
fn a_changed_file_is_picked_up_by_the_mtime_poll() {
    each_flavor(|flavor| {
        let setup = Setup::start(flavor, 100);
        assert_eq!(setup.q(), 1000, "{flavor:?}");

        setup.rewrite(&rules(700));
        setup.wait_for_q(700, &format!("{flavor:?}: the new limit, no signal sent"));
        wait_until(RELOAD_LIMIT, "a `reloaded` log line", || {
            setup.gateway.log_lines_with("reloaded") >= 1
        });

        let before = setup.refusals();
        setup.rewrite(UNKNOWN_ALGORITHM);
        setup.wait_refused(before, 700, &format!("{flavor:?}: an unknown algorithm"));

        let before = setup.refusals();
        setup.gateway.write_raw("this is = = not toml [");
        setup.wait_refused(before, 700, &format!("{flavor:?}: not TOML at all"));

        // [headers] reloads with the rules.
        setup.rewrite(&format!("[headers]\nlegacy = true\n{}", rules(900)));
        setup.wait_for_q(900, &format!("{flavor:?}: the fixed file"));
        let resp = setup.gateway.get("/thing");
        assert_eq!(
            resp.header("x-ratelimit-limit").as_deref(),
            Some("900"),
            "{flavor:?}: legacy headers after the reload: {resp:?}"
        );
    });
}

/// A whole valid config around `rules`.
fn config_text(rules: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:1"
admin_listen = "127.0.0.1:2"
mode = "proxy"
upstream = "http://127.0.0.1:3"

[redis]
url = "redis://127.0.0.1:4"
{rules}
"#
    )
}

#[test]
fn check_config_exits_0_on_a_good_file_and_1_with_a_message_on_a_bad_one() {
    let example = workspace_root().join("gateway/rules.example.toml");
    let out = check_config(&example);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the example config is valid: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let good = dir.path().join("good.toml");
    std::fs::write(&good, config_text(&rules(5))).expect("write");
    let out = check_config(&good);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let bad_rules = [
        ("syntax error", SYNTAX_ERROR),
        ("unknown algorithm", UNKNOWN_ALGORITHM),
        (
            "a window without a known unit",
            "[[rule]]\nname = \"a\"\npath = \"/**\"\nlimits = [\"5/1y\"]\n",
        ),
        (
            "a limit that is not a number",
            "[[rule]]\nname = \"a\"\npath = \"/**\"\nlimits = [\"five/1m\"]\n",
        ),
        (
            "an unknown mode",
            "[[rule]]\nname = \"a\"\npath = \"/**\"\nlimits = [\"5/1m\"]\nmode = \"sideways\"\n",
        ),
        (
            "an unknown on_redis_failure",
            "[[rule]]\nname = \"a\"\npath = \"/**\"\nlimits = [\"5/1m\"]\non_redis_failure = \"maybe\"\n",
        ),
    ];
    for (what, rules) in bad_rules {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, config_text(rules)).expect("write");
        let out = check_config(&path);
        assert_eq!(out.status.code(), Some(1), "{what}: exit code");
        assert!(
            !String::from_utf8_lossy(&out.stderr).trim().is_empty(),
            "{what}: a message on stderr"
        );
    }

    let missing = dir.path().join("missing.toml");
    let out = check_config(&missing);
    assert_eq!(out.status.code(), Some(1), "a missing file");
    assert!(
        !out.stderr.is_empty(),
        "a missing file: a message on stderr"
    );
}

#[test]
fn rules_from_a_redis_key_replace_the_files_until_it_is_deleted() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let key = "rl:gateway:rules";
        let redis_lines = format!("rules_key = \"{key}\"\nrules_refresh_ms = 100");
        let gateway = Gateway::start(
            &upstream.server_line(),
            &format!(
                "{}{}",
                redis_section(redis.port(), &redis_lines),
                rules(1000)
            ),
        );
        let q = || {
            let resp = gateway.get("/thing");
            resp.policy()[0].q
        };
        assert_eq!(q(), 1000, "{flavor:?}: the file's rules");
        let mut con = redis.conn();
        let set = |con: &mut redis::Connection, text: &str| {
            redis::cmd("SET")
                .arg(key)
                .arg(text)
                .exec(con)
                .expect("SET rules");
        };
        set(&mut con, &rules(7));
        wait_until(RELOAD_LIMIT, "the rules from Redis", || q() == 7);
        assert!(gateway.log_lines_with(&format!("from Redis key {key}")) >= 1);

        // A bad document is refused: the Redis rules in force stay.
        let refused = gateway.metrics().reloads("refused");
        set(&mut con, UNKNOWN_ALGORITHM);
        wait_until(RELOAD_LIMIT, "the bad document refused", || {
            gateway.metrics().reloads("refused") > refused
        });
        assert_eq!(q(), 7, "{flavor:?}");
        assert!(gateway.log_lines_with("refused") >= 1, "{}", gateway.log());

        // While the key exists, a change of the file waits.
        gateway.rewrite(&format!(
            "{}{}",
            redis_section(redis.port(), &redis_lines),
            rules(20)
        ));
        gateway.signal("HUP");
        wait_until(RELOAD_LIMIT, "the file checked", || {
            gateway.log_lines_with("stay in force") >= 1
        });
        assert_eq!(q(), 7, "{flavor:?}: the Redis rules stay in force");

        // Deleted: the file's (new) rules come back.
        redis::cmd("DEL").arg(key).exec(&mut con).expect("DEL");
        wait_until(RELOAD_LIMIT, "back to the file's rules", || q() == 20);
    });
}
