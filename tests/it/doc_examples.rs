//! The README's and the book's examples, run as a reader would run them: every
//! ```` ```redis-cli ```` transcript through `redis-cli` against Redis 7.0 and Valkey 8.1 with
//! the module loaded as `make run` loads it, and every ```` ```python ```` block with the
//! checkout's redis-py. Every block must say by its info string whether it runs; the
//! gateway's TOML and YAML blocks are checked by `gateway/tests/doc_configs.rs`.
//! CONTRIBUTING.md ("Every example is run") is the convention these tests read.
use std::collections::BTreeMap;
use std::process::Command;
use testkit::doc_blocks::{all_blocks, blocks, pages, Block};
use testkit::*;

/// Languages that a documentation test runs (here) or checks (the gateway's test).
const RUN: [&str; 4] = ["redis-cli", "python", "toml", "yaml"];
/// Languages only shown: output, syntax, diagrams, shell commands, other programs' files.
const SHOWN: [&str; 7] = ["text", "sh", "nginx", "js", "go", "java", "http"];
/// Output lines naming one of these show a number that depends on the clock.
const CLOCK_MARKS: [&str; 4] = ["reset_after_ms", "retry_after_ms", "ttl_ms", "(varies)"];

/// Every block carries a known info string, so that none is silently left unrun.
#[test]
fn every_block_says_whether_it_runs() {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut unlabelled = Vec::new();
    for block in all_blocks() {
        let language = block.language();
        let runs = RUN.contains(&language) && !block.norun();
        if !runs && !SHOWN.contains(&language) && !block.norun() {
            unlabelled.push(format!("{}: info string {:?}", block.place(), block.info));
        }
        let kind = if runs { "run" } else { "shown" };
        *counts.entry(format!("{kind} {language}")).or_default() += 1;
    }
    println!("documentation code blocks: {counts:?}");
    assert!(
        unlabelled.is_empty(),
        "code blocks without a known info string (see CONTRIBUTING.md):\n{}",
        unlabelled.join("\n")
    );
}

/// Every transcript's commands answer what the page prints, on both servers.
#[test]
fn transcripts_answer_as_written() {
    let mut failures = Vec::new();
    let mut commands = 0;
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor)
            .module_arg("policies-in-rdb")
            .module_arg("yes")
            .start();
        // The Functions library's page calls it: FLUSHALL between pages keeps it.
        server.load_functions();
        for page in pages() {
            let transcripts: Vec<Block> = blocks(&page)
                .into_iter()
                .filter(|block| block.language() == "redis-cli" && !block.norun())
                .collect();
            if transcripts.is_empty() {
                continue;
            }
            empty_the_server(&server);
            // The pages' fixed windows are a minute long or more: a page run whole
            // within one minute keeps the counts it prints.
            stay_clear_of_window_edges(&server, 60_000, 5_000);
            for block in &transcripts {
                if block.fresh() {
                    empty_the_server(&server);
                }
                for step in steps(block) {
                    commands += 1;
                    if let Some(failure) = step.run(&server) {
                        failures.push(format!("{flavor:?} {}: {failure}", block.place()));
                    }
                }
            }
        }
    });
    println!("{commands} documented commands run (both servers together)");
    assert!(commands > 0, "no redis-cli transcript found");
    assert!(
        failures.is_empty(),
        "{} of {commands} documented commands answer otherwise:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every Python block runs to its end (its asserts hold) against both servers.
#[test]
fn python_blocks_run() {
    let python = workspace_root().join(".venv/bin/python3");
    assert!(
        python.exists(),
        "run `make setup` first: it installs redis-py into .venv"
    );
    let snippets: Vec<Block> = all_blocks()
        .into_iter()
        .filter(|block| block.language() == "python" && !block.norun())
        .collect();
    assert!(!snippets.is_empty(), "no python block found");
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        server.load_functions();
        for block in &snippets {
            let code = block.text();
            assert!(
                code.contains("port=6379"),
                "{}: a python block connects with port=6379, which the test replaces",
                block.place()
            );
            empty_the_server(&server);
            let code = code.replace("port=6379", &format!("port={}", server.port()));
            let output = Command::new(&python)
                .args(["-c", &code])
                .output()
                .expect("python runs");
            assert!(
                output.status.success(),
                "{flavor:?} {}: {}",
                block.place(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    });
}

/// No keys, no policies, counters at zero: a page starts as on a fresh `make run`.
fn empty_the_server(server: &Server) {
    let mut con = server.conn();
    redis::cmd("FLUSHALL").exec(&mut con).expect("FLUSHALL");
    let names: Vec<String> = redis::cmd("RL.POLICY")
        .arg("LIST")
        .query(&mut con)
        .expect("RL.POLICY LIST");
    for name in names {
        redis::cmd("RL.POLICY")
            .arg("DEL")
            .arg(&name)
            .exec(&mut con)
            .expect("RL.POLICY DEL");
    }
    redis::cmd("RL.STATS")
        .arg("RESET")
        .exec(&mut con)
        .expect("RL.STATS RESET");
}

/// One `$ redis-cli ...` line of a transcript and the lines printed after it.
struct Step {
    command: String,
    args: Vec<String>,
    expected: Vec<String>,
}

fn steps(block: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in &block.lines {
        if let Some(rest) = line.strip_prefix("$ redis-cli") {
            steps.push(Step {
                command: line.clone(),
                args: without_comment(rest)
                    .split_whitespace()
                    .map(String::from)
                    .collect(),
                expected: Vec::new(),
            });
        } else {
            let step = steps.last_mut().unwrap_or_else(|| {
                panic!("{}: output before any `$ redis-cli` line", block.place())
            });
            step.expected.push(line.clone());
        }
    }
    steps
}

impl Step {
    /// Runs the command; what differs from the page, if anything.
    fn run(&self, server: &Server) -> Option<String> {
        let cli = std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into());
        let output = Command::new(&cli)
            .args(["--no-raw", "-p", &server.port().to_string()])
            .args(&self.args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cli}: {e}"));
        let printed: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| line.trim_end().to_string())
            .collect();
        if self.expected.is_empty() {
            let refused = printed.first().is_some_and(|l| l.starts_with("(error)"));
            return refused.then(|| format!("`{}` answered {printed:?}", self.command));
        }
        let same = printed.len() == self.expected.len()
            && self
                .expected
                .iter()
                .zip(&printed)
                .all(|(e, p)| matches(e, p));
        (!same).then(|| {
            format!(
                "`{}`\n  the page shows {:?}\n  the server says {printed:?}",
                self.command, self.expected
            )
        })
    }
}

/// Whether a printed line is the page's line: the same text without the page's comment,
/// numbers and generated ids masked on a line the page marks as clock-dependent.
fn matches(expected: &str, printed: &str) -> bool {
    let shown = without_comment(expected);
    if CLOCK_MARKS.iter().any(|mark| expected.contains(mark)) {
        masked(shown) == masked(printed)
    } else {
        shown == printed
    }
}

/// A line without its trailing comment (two spaces or more, then `# `).
fn without_comment(line: &str) -> &str {
    let mut from = 0;
    while let Some(at) = line[from..].find("  #") {
        let hash = from + at + 2;
        let after = &line[hash + 1..];
        if after.is_empty() || after.starts_with(' ') {
            return line[..hash].trim_end();
        }
        from = hash;
    }
    line.trim_end()
}

/// Every run of digits as `N`, every quoted 32-hex-digit id as `"ID"`.
fn masked(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        let id = rest.len() >= 34
            && rest.starts_with('"')
            && rest.as_bytes()[33] == b'"'
            && rest[1..33].bytes().all(|b| b.is_ascii_hexdigit());
        if id {
            out.push_str("\"ID\"");
            rest = &rest[34..];
        } else if c.is_ascii_digit()
            || (c == '-' && rest[1..].starts_with(|d: char| d.is_ascii_digit()))
        {
            out.push('N');
            rest = rest[1..].trim_start_matches(|d: char| d.is_ascii_digit());
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

#[test]
fn masking_keeps_the_text_and_hides_the_clock() {
    assert_eq!(
        without_comment("4) (integer) 42117    # reset_after_ms"),
        "4) (integer) 42117"
    );
    assert_eq!(
        without_comment("1# allowed => (integer) 1"),
        "1# allowed => (integer) 1"
    );
    assert_eq!(without_comment("# ratelimit_stats"), "# ratelimit_stats");
    assert!(matches(
        "4) (integer) 42117    # reset_after_ms",
        "4) (integer) 7"
    ));
    assert!(matches("6) (integer) -1  # (varies)", "6) (integer) 250"));
    assert!(matches(
        "4) \"39de2d245d3363e79dc4be9c242a4c17\"   # (varies): a generated id",
        "4) \"8d6a0ccc3da09da7bcb17e1e7fd4b10e\""
    ));
    assert!(!matches("3) (integer) 4", "3) (integer) 3"));
    assert!(!matches(
        "4# reset_after_ms => (integer) 1",
        "4# retry_after_ms => (integer) 1"
    ));
}
