//! envoyproxy/ratelimit's descriptor fields beyond the README examples, end to end on a
//! real server: two files of one domain merged under `[envoy] merge_domains`, a
//! `share_threshold` pattern whose values share one budget (a wildcard without it keeps
//! one per value), and `value_to_metric` naming the request's value in the metric label.

use testkit::each_flavor;
use testkit::gateway::envoy::*;
use testkit::gateway::*;

const SHARED: &str = "
domain: files
descriptors:
  - key: path
    value: /files/*/raw
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: path
    value: /own/*
    rate_limit: {unit: day, requests_per_unit: 1}
";

/// The same domain: merged with the file above, refused without merge_domains.
const MORE: &str = "
domain: files
descriptors:
  - key: route
    value_to_metric: true
    rate_limit: {unit: day, requests_per_unit: 10}
";

fn ask(envoy: &mut EnvoyGateway, key: &str, value: &str) -> Code {
    overall(&envoy.ask(request("files", vec![desc(&[(key, value)])])))
}

#[test]
fn merged_files_shared_patterns_and_values_in_metrics() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let mut envoy = EnvoyGateway::start_with(
            &redis_section(redis.port(), ""),
            "merge_domains = true",
            &[("a.yaml", SHARED), ("b.yaml", MORE)],
        );
        // Three different values, one budget of 3: the fourth value is over.
        for value in ["/files/a/raw", "/files/b/raw", "/files/c/d/raw"] {
            assert_eq!(ask(&mut envoy, "path", value), Code::Ok, "{value}");
        }
        assert_eq!(ask(&mut envoy, "path", "/files/e/raw"), Code::OverLimit);
        // `/own/*` has no share_threshold: one budget of 1 per value.
        for value in ["/own/a", "/own/b"] {
            assert_eq!(ask(&mut envoy, "path", value), Code::Ok, "{value}");
        }
        assert_eq!(ask(&mut envoy, "path", "/own/a"), Code::OverLimit);
        // The second file's descriptor, with the request's value in its label.
        assert_eq!(ask(&mut envoy, "route", "checkout"), Code::Ok);
        let metrics = envoy.gateway.metrics();
        assert_eq!(
            metrics.decisions("files.route_checkout", "allowed"),
            1.0,
            "{}",
            metrics.text
        );
    });
}

/// `--check-config` loads the descriptors as a start does: merged or refused.
#[test]
fn check_config_merges_or_refuses_one_domain_in_two_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), SHARED).unwrap();
    std::fs::write(dir.path().join("b.yaml"), MORE).unwrap();
    let toml = dir.path().join("gateway.toml");
    let check = |merge: bool| {
        std::fs::write(
            &toml,
            format!(
                "[server]\nlisten = \"127.0.0.1:1\"\nmode = \"check\"\n[envoy]\nlisten = \"127.0.0.1:2\"\ndescriptors = \".\"\nmerge_domains = {merge}\n"
            ),
        )
        .unwrap();
        std::process::Command::new(gateway_binary())
            .arg("--check-config")
            .arg(&toml)
            .output()
            .unwrap()
    };
    let out = check(false);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("b.yaml: domain 'files' is already loaded from"),
        "{text}"
    );
    let out = check(true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
