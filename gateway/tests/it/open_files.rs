//! The gateway raises its own open-file soft limit to the hard limit at start: the usual
//! soft limit, 1024, would cap it far below `max_connections`. The gateway is started with
//! its soft limit lowered to 1024 (this process's own limit, which the tests running beside
//! it share, never changes).

use rlimit::Resource;
use testkit::gateway::*;

/// The soft and hard `Max open files` of process `pid`, from /proc.
fn open_file_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("/proc limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect();
    assert!(numbers.len() >= 2, "{line}");
    (numbers[0], numbers[1])
}

#[test]
fn the_gateway_raises_its_open_file_soft_limit_to_the_hard_limit() {
    let (_, hard) = rlimit::getrlimit(Resource::NOFILE).expect("getrlimit");
    if hard <= 1024 {
        eprintln!("SKIPPED: the hard open-file limit ({hard}) leaves nothing to raise");
        return;
    }
    let gateway = Gateway::start_with_open_file_soft_limit(
        1024,
        "upstream = \"http://127.0.0.1:1\"\n",
        &format!(
            "{}[default]\nlimits = [\"5/1m\"]\n",
            redis_section(free_port(), "")
        ),
    );
    assert_eq!(open_file_limits(gateway.pid()), (hard, hard));
}
