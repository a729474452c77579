//! The book's "Named policies" section (docs/src/concepts/policies.md), word for word, on the server `make run` serves, on
//! Redis 7.0 and Valkey 8.1. `scripts/run.sh` itself starts the server (its overrides
//! PORT, RUN_DIR and REDIS_SERVER give it a free port, a temporary directory and the server
//! binary; everything else is as `make run` has it), the section's code block is read from
//! README.md, and each of its lines goes through `redis-cli` as a newcomer types it. The
//! replies must be what the section says. Then the server is stopped the way Ctrl-C stops
//! `make run` (SIGINT: it saves its RDB) and started the same way again: the policies are
//! still there.

use testkit::*;

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The README's words this test follows.
const SECTION: &str = "## Named policies";
/// The table row whose example reply `RL.POLICY GET` of the first policy must give.
const GET_ROW: &str = "| `RL.POLICY GET name` |";

/// Builds the release module, as `make run` does before it starts the server.
fn build_like_make_run() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "--release",
                "--lib",
                "-p",
                "redis-ratelimit",
            ])
            .current_dir(workspace_root())
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the release module failed");
    });
}

/// A server started by `scripts/run.sh`, killed when dropped.
struct MakeRun {
    flavor: Flavor,
    port: u16,
    dir: Arc<TempDir>,
    child: Option<Child>,
}

impl MakeRun {
    /// Runs `scripts/run.sh` on `port` with `dir` as its data directory, until it answers.
    fn start(flavor: Flavor, dir: Arc<TempDir>, port: u16) -> MakeRun {
        build_like_make_run();
        let output = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("run.out"))
            .expect("the script's output file");
        let errors = output.try_clone().expect("the output file, again");
        let child = Command::new(workspace_root().join("scripts/run.sh"))
            .env("PORT", port.to_string())
            .env("RUN_DIR", dir.path())
            .env("REDIS_SERVER", flavor.binary())
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors)
            .spawn()
            .expect("scripts/run.sh starts");
        let mut server = MakeRun {
            flavor,
            port,
            dir,
            child: Some(child),
        };
        server.wait_ready();
        server
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("run.out")).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = format!("redis://127.0.0.1:{}/", self.port);
        loop {
            let pong = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
                .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
            if pong.is_ok() {
                return;
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "{:?}: scripts/run.sh on port {} did not serve ({exited:?}); its output:\n{}",
                self.flavor,
                self.port,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What `redis-cli` prints for `line` typed at its prompt (the `--no-raw` format a
    /// terminal shows), one entry per printed line.
    fn redis_cli(&self, line: &str) -> Vec<String> {
        let mut cli = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "--no-raw"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("redis-cli runs");
        let mut stdin = cli.stdin.take().expect("redis-cli's stdin");
        writeln!(stdin, "{line}").expect("write to redis-cli");
        drop(stdin);
        let done = cli.wait_with_output().expect("redis-cli finishes");
        assert!(done.status.success(), "redis-cli `{line}`: {done:?}");
        String::from_utf8_lossy(&done.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    /// Stops the server as Ctrl-C stops `make run`: SIGINT, on which it saves and exits 0.
    /// Returns its directory for the next start.
    fn ctrl_c(mut self) -> Arc<TempDir> {
        let mut child = self.child.take().expect("the server runs");
        let status = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -INT");
        let deadline = Instant::now() + Duration::from_secs(30);
        let exit = loop {
            if let Some(exit) = child.try_wait().expect("the server's status") {
                break exit;
            }
            assert!(
                Instant::now() < deadline,
                "{:?} ignored SIGINT",
                self.flavor
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            exit.success(),
            "{:?} after SIGINT: {exit:?}; output:\n{}",
            self.flavor,
            self.output()
        );
        assert!(
            self.dir.path().join("dump.rdb").exists(),
            "{:?} saved no RDB on SIGINT; output:\n{}",
            self.flavor,
            self.output()
        );
        Arc::clone(&self.dir)
    }
}

impl Drop for MakeRun {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The book's section `SECTION` (the Named policies page), up to the next section.
fn readme_section() -> String {
    testkit::docs::doc_section("docs/src/concepts/policies.md", SECTION)
}

/// The lines of the section's first code block: what a newcomer types.
fn readme_commands() -> Vec<String> {
    let section = readme_section();
    let mut blocks = section.split("\n```");
    let block = blocks
        .nth(1)
        .unwrap_or_else(|| panic!("`{SECTION}` has no code block"));
    let commands: Vec<String> = block
        .lines()
        .skip(1) // the rest of the opening fence's line
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    assert!(
        commands.iter().any(|c| c.starts_with("RL.POLICY SET ")),
        "`{SECTION}`'s code block defines no policy: {commands:?}"
    );
    commands
}

/// The example reply of `RL.POLICY GET` in the section's table (`e.g. `...``), as words.
fn readme_get_example() -> Vec<String> {
    let section = readme_section();
    let row = section
        .lines()
        .find(|l| l.starts_with(GET_ROW))
        .unwrap_or_else(|| panic!("`{SECTION}` has no row `{GET_ROW}`"));
    let example = row
        .split_once("e.g. `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(example, _)| example)
        .unwrap_or_else(|| panic!("no example reply in {row}"));
    words(example)
}

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(String::from).collect()
}

/// The items of a reply as `redis-cli` prints it: `1) (integer) 5` is `5`, `1) "5"` is
/// `5`, `OK` is `OK`.
fn items(printed: &[String]) -> Vec<String> {
    printed
        .iter()
        .map(|line| {
            let item = match line.split_once(") ") {
                Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) => rest,
                _ => line.as_str(),
            };
            let item = item.strip_prefix("(integer) ").unwrap_or(item);
            item.strip_prefix('"')
                .and_then(|i| i.strip_suffix('"'))
                .unwrap_or(item)
                .to_string()
        })
        .collect()
}

/// A decision's five integers.
fn decision(line: &str, printed: &[String]) -> [i64; 5] {
    let numbers: Vec<i64> = items(printed)
        .iter()
        .map(|i| {
            i.parse()
                .unwrap_or_else(|_| panic!("`{line}`: {printed:?}"))
        })
        .collect();
    numbers
        .try_into()
        .unwrap_or_else(|_| panic!("`{line}` answered {printed:?}, not five integers"))
}

/// A policy defined by the README, and the first key it hit with it.
struct Defined {
    name: String,
    limit: i64,
    key: Option<String>,
}

/// Types the README's lines into `redis-cli` and checks each reply: `OK` for a definition;
/// for a hit or a refund on a key, allowed, the policy's limit, the remaining count of
/// what the key used so far, no retry. Returns the policies in the order defined.
fn follow_the_readme(server: &MakeRun) -> Vec<Defined> {
    let flavor = server.flavor;
    let mut defined: Vec<Defined> = Vec::new();
    let mut used: HashMap<String, i64> = HashMap::new();
    for line in readme_commands() {
        let printed = server.redis_cli(&line);
        assert!(
            printed.first().is_some_and(|l| !l.starts_with("(error)")),
            "{flavor:?}: the README's `{line}` answered {printed:?}"
        );
        let tokens: Vec<&str> = line.split_whitespace().collect();
        match tokens.as_slice() {
            ["RL.POLICY", "SET", name, limit, ..] => {
                assert_eq!(printed, ["OK"], "{flavor:?}: `{line}`");
                let limit = limit.parse().expect("a policy's first limit");
                defined.retain(|d| d.name != *name);
                defined.push(Defined {
                    name: name.to_string(),
                    limit,
                    key: None,
                });
            }
            [command @ ("RL.HIT" | "RL.REFUND"), key, "POLICY", name] => {
                let policy = defined
                    .iter_mut()
                    .find(|d| d.name == *name)
                    .unwrap_or_else(|| panic!("`{line}` names a policy the README never set"));
                policy.key.get_or_insert_with(|| key.to_string());
                let used = used.entry(key.to_string()).or_default();
                *used = if *command == "RL.HIT" {
                    *used + 1
                } else {
                    (*used - 1).max(0)
                };
                let [allowed, limit, remaining, _reset, retry] = decision(&line, &printed);
                assert_eq!(
                    (allowed, limit, remaining, retry),
                    (1, policy.limit, policy.limit - *used, 0),
                    "{flavor:?}: `{line}` answered {printed:?}"
                );
            }
            _ => panic!("the README's `{line}`: this test does not know its reply; teach it"),
        }
    }
    defined
}

/// Every policy as `RL.POLICY LIST` and `RL.POLICY GET` show it through `redis-cli`.
fn policies(server: &MakeRun) -> Vec<(String, Vec<String>)> {
    items(&server.redis_cli("RL.POLICY LIST"))
        .into_iter()
        .map(|name| {
            let definition = items(&server.redis_cli(&format!("RL.POLICY GET {name}")));
            (name, definition)
        })
        .collect()
}

/// Waits out the last 10 s of a minute, so that the README's per-minute policy keeps its
/// count for the whole test.
fn stay_clear_of_the_minute_edge(server: &MakeRun) {
    let printed = items(&server.redis_cli("TIME"));
    let seconds: i64 = printed[0].parse().expect("TIME's seconds");
    let into_minute = seconds.rem_euclid(60);
    if into_minute >= 50 {
        std::thread::sleep(Duration::from_secs((61 - into_minute) as u64));
    }
}

/// The README's section, line by line, on `make run`'s server: every reply as it says, the
/// example reply of `RL.POLICY GET` too, and the first policy's key allowed exactly its
/// limit, then denied.
#[test]
fn the_readme_policies_work_on_make_runs_server() {
    each_flavor(|flavor| {
        let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
        let server = MakeRun::start(flavor, dir, free_port());
        stay_clear_of_the_minute_edge(&server);
        let defined = follow_the_readme(&server);

        let mut names: Vec<&str> = defined.iter().map(|d| d.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            items(&server.redis_cli("RL.POLICY LIST")),
            names,
            "{flavor:?}"
        );
        let first = &defined[0];
        let get = items(&server.redis_cli(&format!("RL.POLICY GET {}", first.name)));
        assert_eq!(
            get,
            readme_get_example(),
            "{flavor:?}: RL.POLICY GET {}",
            first.name
        );

        // "5 allowed per minute, then denied", on the key the README hit.
        let key = first
            .key
            .as_deref()
            .expect("the README hits its first policy");
        let call = format!("RL.HIT {key} POLICY {}", first.name);
        let mut allowed = 1; // the README's own hit
        loop {
            let [ok, ..] = decision(&call, &server.redis_cli(&call));
            if ok == 0 {
                break;
            }
            allowed += 1;
            assert!(
                allowed <= first.limit,
                "{flavor:?}: more than the limit allowed"
            );
        }
        assert_eq!(allowed, first.limit, "{flavor:?}");
    });
}

/// Policies defined on `make run`'s server as the README does survive Ctrl-C and
/// `make run` again, on Redis 7.0 (where that needs `policies-in-rdb yes`) and Valkey.
#[test]
fn policies_survive_ctrl_c_and_make_run_again() {
    each_flavor(|flavor| {
        let port = free_port();
        let server = MakeRun::start(
            flavor,
            Arc::new(tempfile::tempdir().expect("temp dir")),
            port,
        );
        let defined = follow_the_readme(&server);
        let before = policies(&server);
        assert_eq!(before.len(), defined.len(), "{flavor:?}: {before:?}");

        let dir = server.ctrl_c();
        let again = MakeRun::start(flavor, dir, port);
        assert_eq!(policies(&again), before, "{flavor:?} after a restart");
        for policy in &defined {
            let call = format!("RL.HIT rl:after-restart POLICY {}", policy.name);
            let [allowed, limit, ..] = decision(&call, &again.redis_cli(&call));
            assert_eq!((allowed, limit), (1, policy.limit), "{flavor:?}: `{call}`");
        }
    });
}
