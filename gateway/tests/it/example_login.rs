//! The login rule of the shipped example (`gateway/rules.example.toml`), run as shipped:
//! one budget per client for every method and every path under `/auth`. The example once
//! taught `methods = ["POST"]` with `per_endpoint = true`, which left PUT, PATCH and every
//! other method to `[default]` (a method-agnostic login handler checked passwords for
//! them all) and gave `/auth/login.json`, `/auth/login.f1` ... (Rails' `(.:format)`) a
//! budget each.

use testkit::gateway::raw_http;
use testkit::gateway::*;

/// The example's sections after `[server]` and `[redis]`, which the harness writes itself.
fn example_rules() -> String {
    let text = std::fs::read_to_string(workspace_root().join("gateway/rules.example.toml"))
        .expect("the example config");
    let start = text
        .find("\n[headers]")
        .expect("the example has a [headers] section after [server] and [redis]");
    text[start..].to_owned()
}

#[test]
fn the_example_login_rule_is_one_budget_across_methods_and_format_suffixes() {
    let rules = example_rules();
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, &rules);
        // Six wrong passwords, each by another method or format suffix: the rule's 5 per
        // 15 minutes, then 429.
        let attempts: [(&[u8], &[u8]); 6] = [
            (b"POST", b"/auth/login?status=401"),
            (b"PUT", b"/auth/login?status=401"),
            (b"PATCH", b"/auth/login.json?status=401"),
            (b"GET", b"/auth/login.f0?status=401"),
            (b"DELETE", b"/auth/login.f19?status=403"),
            (b"OPTIONS", b"/auth/login.f7?status=401"),
        ];
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            Some(&upstream),
            attempts,
            |(method, target)| raw_http::request(gateway.port, method, target, b"").status,
            Spent {
                statuses: &[401, 401, 401, 401, 403, 429],
                served: Some(5),
                pattern: "rl:*",
                keys: &["rl:{ip:127.0.0.1}:login"],
            },
        );
    });
}
