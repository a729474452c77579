//! Target `config`: the gateway's TOML loader, `config::parse` (the whole file) and
//! `config::parse_rules` (the rules as stored in Redis), in both modes. Beside no panic:
//! every rule it accepts must make module calls the module accepts (its RL.HIT arguments
//! parse with the module's parser under the most lenient configs), and must make a key
//! and match requests without panicking.

use hyper::header::HeaderMap;
use ratelimit_core::args::{parse_limits, parse_policy_call, Settings};
use ratelimit_core::duration::LARGEST_WINDOW_MS;
use ratelimit_core::limiter::AlgorithmKind;
use rl_gateway::fuzzing::{parse, parse_rules, Limit, Mode, RequestFacts, Rule, RuleSet};
use std::net::{IpAddr, Ipv4Addr};

/// The module's configs at their most lenient: what no `CONFIG SET` can widen.
const LENIENT: Settings = Settings {
    default_algorithm: AlgorithmKind::Fixed,
    max_window_ms: LARGEST_WINDOW_MS,
    max_log_limit: i64::MAX,
};

fn check_rule(rule: &Rule) {
    let args: Vec<&[u8]> = rule.call_args.iter().map(|a| a.as_bytes()).collect();
    match &rule.limit {
        Limit::Unlimited => assert!(args.is_empty(), "{:?}", rule.call_args),
        Limit::Tiers { .. } => {
            let parsed = parse_limits(args.iter().copied(), &LENIENT);
            assert!(parsed.is_ok(), "{:?}: {parsed:?}", rule.call_args);
        }
        Limit::Policy { .. } => {
            let parsed = parse_policy_call(args.iter().copied());
            assert!(
                matches!(parsed, Some(Ok(_))),
                "{:?}: {parsed:?}",
                rule.call_args
            );
        }
    }
    let headers = HeaderMap::new();
    let facts = RequestFacts {
        method: "GET",
        path: "/a/b",
        headers: &headers,
        client_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    let key = rule.key("rl:", &facts);
    assert!(key.starts_with("rl:{"), "{key:?}");
}

fn check_rules(rules: &RuleSet) {
    for rule in rules.rules.iter().chain(&rules.default) {
        check_rule(rule);
    }
    for (method, path) in [("GET", "/"), ("POST", "/a/b"), ("DELETE", "/x/y/z")] {
        rules.find(method, path);
    }
}

pub fn fuzz(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = parse(text) {
        check_rules(&config.rules);
    }
    for mode in [Mode::Proxy, Mode::Check] {
        if let Ok(rules) = parse_rules(text, mode) {
            check_rules(&rules);
        }
    }
}
