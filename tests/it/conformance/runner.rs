//! Runs the table's scenarios on targets, each a backend on a server (or cluster): the
//! module's commands as written, the library's functions (`RL.HIT key ...` becomes `FCALL
//! rl_hit 1 key ...`, `RL.MHIT numkeys ...` becomes `FCALL rl_mhit numkeys ...`), or both
//! in turn. Each scenario gets fresh keys; each reply is matched against the table with
//! the server's clock read before and after the call; with a replica, the replica must then
//! hold the primary's exact bytes and expiries of every key the scenario named; several
//! targets run each scenario one after the other and must store the same bytes where the
//! state depends on window edges only.

use super::reply::{check, Clock, Got};
use super::state::{same_on_replica, show_stored, stored_state, wait_for_replica};
use super::table::{Expect, Only, Scenario, Step};
use redis::ConnectionLike;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use testkit::{Flavor, Server};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Module,
    Functions,
    /// A server with both: the scenario's RL calls go to the module and the library in
    /// turn, on the same keys, so that each reads what the other wrote.
    InTurn {
        module_first: bool,
    },
}

/// Where the scenarios run.
pub struct Target<'a> {
    pub backend: Backend,
    /// The server, as a failure names it: `Redis 7.0`, `Valkey 8.1 cluster`.
    pub server: String,
    pub con: &'a mut dyn ConnectionLike,
    pub replica: Option<&'a Server>,
    /// The library's functions present on the server (read with FUNCTION LIST).
    pub library: BTreeSet<String>,
    /// Starts every key's hash tag, so that two targets sharing a server never share keys.
    pub tag: String,
    /// Changes every reply before it is matched: how the suite is shown to fail.
    pub mutate: Option<fn(&mut Got)>,
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub passed: Vec<String>,
    pub pending: Vec<String>,
    /// How many scenario runs had their stored bytes compared with the first target's.
    pub compared: usize,
    /// One message per failed scenario, naming everything needed to reproduce it.
    pub failures: Vec<String>,
}

impl Outcome {
    pub fn absorb(&mut self, other: Outcome) {
        self.passed.extend(other.passed);
        self.pending.extend(other.pending);
        self.compared += other.compared;
        self.failures.extend(other.failures);
    }

    /// Prints what passed and what is pending, and fails with every failure.
    pub fn assert_passed(&self) {
        println!(
            "{} scenario runs passed, {} of them with their stored bytes compared",
            self.passed.len(),
            self.compared
        );
        for pending in &self.pending {
            println!("PENDING {pending}");
        }
        assert!(
            self.failures.is_empty(),
            "{} scenario runs failed:\n\n{}",
            self.failures.len(),
            self.failures.join("\n\n")
        );
    }
}

impl Target<'_> {
    fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Module => "module",
            Backend::Functions => "functions",
            Backend::InTurn { module_first: true } => "module and functions in turn",
            Backend::InTurn {
                module_first: false,
            } => "functions and module in turn",
        }
    }
}

/// `Redis 7.0`, `Valkey 8.1`: the flavour and its version.
pub fn server_name(flavor: Flavor) -> String {
    let (major, minor) = flavor.version();
    format!("{flavor:?} {major}.{minor}")
}

/// Runs every scenario on `target`, each on keys of its own.
pub fn run_all(target: &mut Target, scenarios: &[Scenario]) -> Outcome {
    run_side_by_side(std::slice::from_mut(target), scenarios)
}

/// Runs each scenario on every target in turn (each on keys of its own), then, where the
/// scenario's state depends on window edges only (no `~` time, no lease id), compares what
/// the targets stored: the same values and expiries under the same key names.
pub fn run_side_by_side(targets: &mut [Target], scenarios: &[Scenario]) -> Outcome {
    let mut outcome = Outcome::default();
    for (index, scenario) in scenarios.iter().enumerate() {
        // Clear of edges for all the runs together, so that they share their windows.
        stay_clear_of_edges(targets[0].con, &scenario.windows_ms(), 6_000);
        let mut stored = Vec::new();
        for target in targets.iter_mut() {
            let title = format!(
                "scenario {:?} ({}), backend {} on {}",
                scenario.name,
                scenario.file,
                target.backend_name(),
                target.server
            );
            let tag = format!("{}{index}", target.tag);
            if target.backend != Backend::Module && !scenario.pending.is_empty() {
                match target.backend {
                    Backend::Functions => match pending(target, scenario, &tag) {
                        Ok(why) => outcome.pending.push(format!("{title}: {why}")),
                        Err(why) => outcome.failures.push(format!("{title}: {why}")),
                    },
                    _ => outcome
                        .pending
                        .push(format!("{title}: waits for the library's backend")),
                }
                continue;
            }
            match run_scenario(target, scenario, &tag) {
                Ok(keys) => {
                    stored.push((title.clone(), stored_state(target.con, &keys)));
                    outcome.passed.push(title);
                }
                Err(failure) => outcome.failures.push(format!("{title}\n{failure}")),
            }
        }
        // A scenario that documents a difference (an error of the library's own, a step
        // for the module only) has nothing to compare.
        let alike = scenario
            .steps
            .iter()
            .all(|s| s.functions.is_none() && s.only == Only::Both);
        if alike && scenario.clock_free() {
            if let [(first, a), rest @ ..] = stored.as_slice() {
                outcome.compared += rest.len();
                for (other, b) in rest.iter().filter(|(_, b)| b != a) {
                    outcome.failures.push(format!(
                        "{other}\n  stores other bytes than {first}:\n  {}\n  against {}",
                        show_stored(b),
                        show_stored(a)
                    ));
                }
            }
        }
    }
    outcome
}

/// A scenario marked pending on the library: a mark `rl_x` holds while the library lacks
/// that function; any other mark (a feature: `ALGO sliding`) holds while the scenario
/// fails. `Ok` says why it is still pending; `Err` that the mark must go.
fn pending(target: &mut Target, scenario: &Scenario, tag: &str) -> Result<String, String> {
    let (functions, features): (Vec<&String>, Vec<&String>) =
        scenario.pending.iter().partition(|p| p.starts_with("rl_"));
    let missing: Vec<&&String> = functions
        .iter()
        .filter(|f| !target.library.contains(f.as_str()))
        .collect();
    if !missing.is_empty() {
        return Ok(format!("the library lacks {missing:?}"));
    }
    if features.is_empty() {
        return Err(format!(
            "the library offers {functions:?} now: remove the scenario's `pending` mark"
        ));
    }
    match run_scenario(target, scenario, tag) {
        Ok(_) => Err(format!(
            "passes now: remove {features:?} from the scenario's `pending` mark"
        )),
        Err(failure) => {
            let mismatch = failure.lines().last().unwrap_or("").trim().to_string();
            Ok(format!("waits for {features:?} ({mismatch})"))
        }
    }
}

/// The server's clock in ms.
pub fn time_ms(con: &mut dyn ConnectionLike) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con).expect("TIME");
    secs * 1_000 + micros / 1_000
}

/// Waits until no edge of these epoch-aligned windows falls within the next few seconds,
/// so that a scenario's counts are not cut by a new window in its middle.
fn stay_clear_of_edges(con: &mut dyn ConnectionLike, windows_ms: &BTreeSet<i64>, margin_ms: i64) {
    for &window in windows_ms {
        let into = time_ms(con).rem_euclid(window);
        if window > margin_ms && into > window - margin_ms {
            std::thread::sleep(Duration::from_millis((window - into + 20) as u64));
        }
    }
}

/// Runs one scenario's steps; the keys it named, or why it failed.
fn run_scenario(
    target: &mut Target,
    scenario: &Scenario,
    tag: &str,
) -> Result<BTreeSet<Vec<u8>>, String> {
    stay_clear_of_edges(target.con, &scenario.windows_ms(), 3_000);
    let start_ms = time_ms(target.con);
    let mut captures: HashMap<String, Vec<u8>> = HashMap::new();
    let mut keys: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut turn = 0;
    for (n, step) in scenario.steps.iter().enumerate() {
        if let Some(wait_ms) = step.wait_ms {
            std::thread::sleep(Duration::from_millis(wait_ms.unsigned_abs()));
            continue;
        }
        let backend = step_backend(target.backend, step, &mut turn);
        if step.only == Only::Module && backend != Backend::Module {
            continue;
        }
        let words = substitute(&step.call, tag, &captures, &mut keys)
            .map_err(|e| format!("  step {}: {e}", n + 1))?;
        let args = translate(backend, &words);
        let mut on_replica = match (step.on_replica, target.replica) {
            (false, _) => None,
            (true, None) => continue,
            (true, Some(replica)) => {
                wait_for_replica(target.con)?;
                Some(replica.conn())
            }
        };
        let con: &mut dyn ConnectionLike = match on_replica.as_mut() {
            Some(replica) => replica,
            None => &mut *target.con,
        };
        let before_ms = time_ms(con);
        let mut got = Got::of(command(&args).query::<redis::Value>(con));
        let after_ms = time_ms(con);
        if let Some(mutate) = target.mutate {
            mutate(&mut got);
        }
        let expect = &resolve(expected(backend, step), tag, &captures, &mut keys)
            .map_err(|e| format!("  step {}: {e}", n + 1))?;
        let clock = Clock {
            start_ms,
            before_ms,
            after_ms,
        };
        if let Err(why) = check(expect, &got, &clock, &mut captures) {
            return Err(format!(
                "  step {}: {}\n  call:     {}\n  expected: {expect}\n  actual:   {got}\n  \
                 mismatch: {why}",
                n + 1,
                show(
                    &step
                        .call
                        .iter()
                        .map(|w| w.as_bytes().to_vec())
                        .collect::<Vec<_>>()
                ),
                show(&args),
            ));
        }
    }
    if let Some(replica) = target.replica {
        same_on_replica(target.con, replica, &keys)?;
    }
    Ok(keys)
}

/// Which backend runs a step: the target's, or in turn, each RL call to the next backend;
/// a step where the table gives the library a reply of its own, or none, is the module's.
fn step_backend(target: Backend, step: &Step, turn: &mut usize) -> Backend {
    let Backend::InTurn { module_first } = target else {
        return target;
    };
    let rl_call = step
        .call
        .first()
        .is_some_and(|c| c.to_ascii_uppercase().starts_with("RL."));
    if !rl_call || step.functions.is_some() || step.only == Only::Module {
        return Backend::Module;
    }
    *turn += 1;
    if (*turn % 2 == 1) == module_first {
        Backend::Module
    } else {
        Backend::Functions
    }
}

fn expected(backend: Backend, step: &Step) -> &Expect {
    match (backend, &step.functions) {
        (Backend::Functions, Some(other)) => other,
        _ => &step.reply,
    }
}

/// An error text of the table may name the scenario's keys: `ERR key '{key}' ...`.
fn resolve(
    expect: &Expect,
    tag: &str,
    captures: &HashMap<String, Vec<u8>>,
    keys: &mut BTreeSet<Vec<u8>>,
) -> Result<Expect, String> {
    Ok(match expect {
        Expect::Error(text) if text.contains('{') => {
            let words = substitute(std::slice::from_ref(text), tag, captures, keys)?;
            Expect::Error(String::from_utf8_lossy(&words.concat()).into_owned())
        }
        other => other.clone(),
    })
}

fn command(args: &[Vec<u8>]) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for arg in args {
        cmd.arg(arg.as_slice());
    }
    cmd
}

/// Replaces `{key}`, `{key2}`, ... by the scenario's keys (noting them in `keys`) and
/// `{name}` by a value a matcher kept.
fn substitute(
    words: &[String],
    tag: &str,
    captures: &HashMap<String, Vec<u8>>,
    keys: &mut BTreeSet<Vec<u8>>,
) -> Result<Vec<Vec<u8>>, String> {
    words
        .iter()
        .map(|word| {
            let mut out = Vec::new();
            let mut rest = word.as_str();
            while let Some(open) = rest.find('{') {
                let close = rest[open..]
                    .find('}')
                    .map(|c| open + c)
                    .ok_or_else(|| format!("{word:?}: an unclosed {{"))?;
                out.extend_from_slice(&rest.as_bytes()[..open]);
                let name = &rest[open + 1..close];
                if name.starts_with("key") && name[3..].chars().all(|c| c.is_ascii_digit()) {
                    let key = format!("rl:{{{tag}}}:{name}").into_bytes();
                    keys.insert(key.clone());
                    out.extend_from_slice(&key);
                } else {
                    let value = captures
                        .get(name)
                        .ok_or_else(|| format!("{word:?}: nothing was kept as {name:?}"))?;
                    out.extend_from_slice(value);
                }
                rest = &rest[close + 1..];
            }
            out.extend_from_slice(rest.as_bytes());
            Ok(out)
        })
        .collect()
}

/// The several-keys commands, whose numkeys the library's functions take as FCALL's.
const SEVERAL_KEYS: [&str; 3] = ["RL.MHIT", "RL.MPEEK", "RL.MREFUND"];

/// The call on `backend`: as written for the module; for the library, `RL.X` becomes
/// `FCALL rl_x 1 key rest...` (`FCALL rl_x numkeys keys... rest...` for the several-keys
/// commands). Other commands (SET, LPUSH, GET, ...) run as written on both.
pub fn translate(backend: Backend, words: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let Some((name, rest)) = words.split_first() else {
        return Vec::new();
    };
    let upper = String::from_utf8_lossy(name).to_ascii_uppercase();
    let Some(command) = upper.strip_prefix("RL.") else {
        return words.to_vec();
    };
    if backend == Backend::Module {
        return words.to_vec();
    }
    let function = format!("rl_{}", command.to_ascii_lowercase()).into_bytes();
    let mut out = vec![b"FCALL".to_vec(), function];
    if !SEVERAL_KEYS.contains(&upper.as_str()) {
        out.push(if rest.is_empty() { b"0" } else { b"1" }.to_vec());
    }
    out.extend(rest.iter().cloned());
    out
}

/// The words of a call, printable.
pub fn show(words: &[Vec<u8>]) -> String {
    words
        .iter()
        .map(|w| {
            let text = String::from_utf8_lossy(w);
            if text.is_empty() || text.contains(char::is_whitespace) {
                format!("{text:?}")
            } else {
                text.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
