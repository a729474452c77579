//! The README's Python example runs as documented against a real server.
use std::path::Path;
use std::process::Command;
use testkit::*;

#[test]
fn the_python_example_allows_five_logins_then_denies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".venv/bin/python3");
    assert!(
        python.exists(),
        "run `make setup` first: it installs redis-py into .venv"
    );
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let output = Command::new(&python)
            .arg(root.join("examples/python_client.py"))
            .arg(server.port().to_string())
            .output()
            .expect("python runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{flavor:?}: {output:?}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 6, "{flavor:?}: {stdout}");
        assert_eq!(lines[0], "alice: allowed, 4 of 5 left");
        assert_eq!(lines[4], "alice: allowed, 0 of 5 left");
        assert!(lines[5].starts_with("alice: denied, retry in "), "{stdout}");
    });
}
