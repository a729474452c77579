//! The Envoy service asked by a client nobody here wrote: Python grpcio with the Envoy
//! protocol package from PyPI (xds-protos), which `scripts/setup.sh --valkey` installs into
//! `.venv` (tests/envoy_client.py is the client). envoyproxy/ratelimit's README example 2
//! unchanged; all or nothing; a look; shadow mode. (xds-protos 1.85's protocol predates
//! `is_negative_hits`: refunds are tested with envoy-types' client, tests/envoy_service.rs.)

use std::process::Command;
use testkit::gateway::envoy::*;
use testkit::gateway::*;

const EXAMPLE_2: &str = r#"
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
  - key: shadowed
    shadow_mode: true
    rate_limit:
      unit: day
      requests_per_unit: 1
"#;

/// Runs the Python client: one output line per call.
fn python(port: u16, domain: &str, calls: &[&str]) -> Vec<String> {
    let python = workspace_root().join(".venv/bin/python3");
    let script = workspace_root().join("gateway/tests/envoy_client.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(port.to_string())
        .arg(domain)
        .args(calls)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/setup.sh --valkey installs it)",
                python.display()
            )
        });
    assert!(
        out.status.success(),
        "the Python client failed (scripts/setup.sh --valkey installs grpcio and xds-protos): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_python_grpcio_client_with_xds_protos() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let envoy = EnvoyGateway::on(&redis, &[("messaging.yaml", EXAMPLE_2)]);
    let both = "message_type=marketing,to_number=1+to_number=1";
    let mut calls = vec![both; 6];
    calls.extend([
        "to_number=1@0",
        "to_number=1@3",
        "to_number=1@0",
        "shadowed=x",
        "shadowed=x",
        "shadowed=x",
        "nothing=here",
    ]);
    let lines = python(envoy.grpc_port, "messaging", &calls);
    let expected = [
        "OK OK:4:5 OK:99:100 retry=-",
        "OK OK:3:5 OK:98:100 retry=-",
        "OK OK:2:5 OK:97:100 retry=-",
        "OK OK:1:5 OK:96:100 retry=-",
        "OK OK:0:5 OK:95:100 retry=-",
    ];
    assert_eq!(lines[..5], expected, "{lines:#?}");
    let denied = &lines[5];
    assert!(
        denied.starts_with("OVER_LIMIT OVER_LIMIT:0:5 OK:95:100 retry="),
        "{denied}"
    );
    assert!(
        !denied.ends_with("retry=-"),
        "Retry-After on OVER_LIMIT: {denied}"
    );
    assert_eq!(lines[6], "OK OK:95:100 retry=-", "a look counts nothing");
    assert_eq!(
        lines[7], "OK OK:92:100 retry=-",
        "hits_addend 3 counts three"
    );
    assert_eq!(lines[8], "OK OK:92:100 retry=-");
    for line in &lines[9..12] {
        assert!(line.starts_with("OK OK:"), "shadow never denies: {line}");
    }
    assert_eq!(lines[12], "OK OK:0 retry=-", "no rule: OK, not limited");
    let invalid = python(envoy.grpc_port, "", &["a=b"]);
    assert_eq!(invalid, ["ERROR INVALID_ARGUMENT"]);
}
