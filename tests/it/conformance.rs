//! One behavioural suite for both backends: the scenarios of `tests/conformance/*.toml`
//! (calls in the module's syntax and the replies expected) run against the module's
//! commands, against the Functions library's, and against both in turn on the same keys,
//! on Redis 7.0 and Valkey 8.1, each scenario on fresh keys of a primary whose replica must
//! then hold the same bytes; and through a 3-primary cluster, routed by key. The library
//! alone runs on a server started without the module and with `enable-module-command no`,
//! as on a managed service. `docs/src/internals/conformance.md` describes the table.

mod reply;
mod runner;
mod state;
mod table;

use reply::Got;
use runner::{run_all, run_side_by_side, server_name, Backend, Outcome, Target};
use state::library_functions;
use std::collections::BTreeSet;
use table::{Expect, Only, Scenario};
use testkit::cluster::Cluster;
use testkit::policy::policy_config;
use testkit::*;

fn scenarios() -> Vec<Scenario> {
    table::load_all(workspace_root())
}

/// The bundled library, as `FUNCTION LOAD` takes it; `RL_FUNCTIONS_BUNDLE` names another
/// file (a changed copy, to see the suite fail).
fn library_source() -> String {
    match std::env::var_os("RL_FUNCTIONS_BUNDLE").filter(|p| !p.is_empty()) {
        Some(path) => std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("RL_FUNCTIONS_BUNDLE {}: {e}", path.to_string_lossy())),
        None => testkit::functions::bundle(),
    }
}

fn load_library(con: &mut redis::Connection, source: &str) -> BTreeSet<String> {
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(source)
        .query(con)
        .expect("FUNCTION LOAD REPLACE");
    library_functions(con)
}

/// A primary with its replica, and the library's functions there, for one backend.
struct Pair {
    primary: Server,
    replica: Server,
    library: BTreeSet<String>,
}

fn pair(backend: Backend, flavor: Flavor) -> Pair {
    // The module is loaded as RL.POLICY SET needs it on Redis 7.0 (`policies-in-rdb`).
    let config = || match backend {
        Backend::Module | Backend::InTurn { .. } => policy_config(flavor),
        Backend::Functions => ServerConfig::managed(flavor),
    };
    let (primary, replica) = primary_with_replica_configs(config(), config());
    let library = match backend {
        Backend::Module => BTreeSet::new(),
        _ => load_library(&mut primary.conn(), &library_source()),
    };
    Pair {
        primary,
        replica,
        library,
    }
}

/// Runs every scenario on each backend's primary (with its replica) of each flavour, the
/// backends side by side.
fn run_backends(backends: &[Backend], scenarios: &[Scenario]) -> Outcome {
    let mut outcome = Outcome::default();
    each_flavor(|flavor| {
        let pairs: Vec<Pair> = backends.iter().map(|b| pair(*b, flavor)).collect();
        let mut cons: Vec<redis::Connection> = pairs.iter().map(|p| p.primary.conn()).collect();
        let mut targets: Vec<Target> = backends
            .iter()
            .zip(&pairs)
            .zip(cons.iter_mut())
            .map(|((backend, pair), con)| Target {
                backend: *backend,
                server: server_name(flavor),
                con,
                replica: Some(&pair.replica),
                library: pair.library.clone(),
                tag: "c".into(),
                mutate: None,
            })
            .collect();
        outcome.absorb(run_side_by_side(&mut targets, scenarios));
    });
    outcome
}

/// The module alone: the reference, which needs no library.
#[test]
fn conformance_module() {
    run_backends(&[Backend::Module], &scenarios()).assert_passed();
}

/// The library, each scenario run on the module first: the same replies, and where the
/// state depends on window edges only, the same stored bytes.
#[test]
fn conformance_functions_beside_the_module() {
    let outcome = run_backends(&[Backend::Module, Backend::Functions], &scenarios());
    outcome.assert_passed();
    assert!(outcome.compared > 0, "no stored bytes were compared");
}

/// The module and the library on one server, each scenario's calls going to one and the
/// other in turn on the same keys (starting with either): each reads and continues what the
/// other wrote, with the replies and the bytes of the module alone.
#[test]
fn conformance_backends_in_turn_on_the_same_keys() {
    let backends = [
        Backend::Module,
        Backend::InTurn { module_first: true },
        Backend::InTurn {
            module_first: false,
        },
    ];
    let outcome = run_backends(&backends, &scenarios());
    outcome.assert_passed();
    assert!(outcome.compared > 0, "no stored bytes were compared");
}

/// Whether a scenario can run through a cluster client: RL.POLICY is keyless (the cluster
/// tests of policies send it to every primary), so its scenarios stay on one server.
fn routable(scenario: &Scenario) -> bool {
    scenario.steps.iter().all(|step| {
        step.only == Only::Both
            && !step
                .call
                .first()
                .is_some_and(|c| c.eq_ignore_ascii_case("RL.POLICY"))
    })
}

/// Through a cluster client, every backend's calls reach the primary that owns the key
/// (FCALL by its declared keys), with the replies and the bytes of the module.
#[test]
fn conformance_in_a_cluster_routed_by_key() {
    let scenarios: Vec<Scenario> = scenarios().into_iter().filter(routable).collect();
    let source = library_source();
    let mut outcome = Outcome::default();
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        let mut library = BTreeSet::new();
        for primary in cluster.primaries() {
            library = load_library(&mut primary.conn(), &source);
        }
        let backends = [
            (Backend::Module, "m"),
            (Backend::Functions, "f"),
            (Backend::InTurn { module_first: true }, "t"),
        ];
        let mut cons: Vec<_> = backends.iter().map(|_| cluster.client()).collect();
        let mut targets: Vec<Target> = backends
            .iter()
            .zip(cons.iter_mut())
            .map(|((backend, tag), con)| Target {
                backend: *backend,
                server: format!("{} cluster", server_name(flavor)),
                con,
                replica: None,
                library: library.clone(),
                tag: (*tag).into(),
                mutate: None,
            })
            .collect();
        outcome.absorb(run_side_by_side(&mut targets, &scenarios));
        // The scenarios' tags spread their keys over the slots: every primary served some.
        for primary in cluster.primaries() {
            let keys: i64 = redis::cmd("DBSIZE")
                .query(&mut primary.conn())
                .expect("DBSIZE");
            assert!(
                keys > 0,
                "{flavor:?}: primary {} holds no key",
                primary.port()
            );
        }
    });
    outcome.assert_passed();
}

/// What the self-test changes: every array of five integers (a decision, RL.LEASES) gets
/// one more `remaining` (or `free`) than the server answered.
fn one_more_remaining(got: &mut Got) {
    if let Got::Array(items) = got {
        if items.len() == 5 && items.iter().all(|i| matches!(i, Got::Int(_))) {
            if let Got::Int(n) = &mut items[2] {
                *n += 1;
            }
        }
        items.iter_mut().for_each(one_more_remaining);
    }
}

/// Whether the table expects an array of five integers somewhere in this reply.
fn expects_five(expect: &Expect) -> bool {
    match expect {
        Expect::Array(items) => {
            (items.len() == 5 && !items.iter().any(|i| matches!(i, Expect::Array(_))))
                || items.iter().any(expects_five)
        }
        _ => false,
    }
}

/// The suite can fail: with a backend whose replies carry one more `remaining`, exactly the
/// scenarios that expect a decision fail, and each failure names the scenario, the step,
/// the backend, the server, the call, the expected and the actual reply.
#[test]
fn conformance_fails_when_a_reply_changes() {
    let scenarios = scenarios();
    let flavor = Flavor::Valkey;
    let server = ServerConfig::new(flavor).start();
    let mut con = server.conn();
    let mut target = Target {
        backend: Backend::Module,
        server: server_name(flavor),
        con: &mut con,
        replica: None,
        library: BTreeSet::new(),
        tag: "x".into(),
        mutate: Some(one_more_remaining),
    };
    let outcome = run_all(&mut target, &scenarios);
    let failed: BTreeSet<&str> = scenarios
        .iter()
        .filter(|s| {
            outcome
                .failures
                .iter()
                .any(|f| f.contains(&format!("{:?}", s.name)))
        })
        .map(|s| s.name.as_str())
        .collect();
    let deciding: BTreeSet<&str> = scenarios
        .iter()
        // The target has no replica: steps on the replica are left out.
        .filter(|s| {
            s.steps
                .iter()
                .any(|step| !step.on_replica && expects_five(&step.reply))
        })
        .map(|s| s.name.as_str())
        .collect();
    assert!(deciding.len() > 20, "{deciding:?}");
    assert_eq!(failed, deciding, "{:#?}", outcome.failures);
    let first = &outcome.failures[0];
    for part in [
        "scenario",
        "step",
        "backend module",
        "Valkey",
        "call:",
        "expected:",
        "actual:",
    ] {
        assert!(first.contains(part), "{part:?} missing in:\n{first}");
    }
}

/// A pending mark never hides a scenario for good: a function's name holds only while the
/// library lacks it, a feature only while its scenario fails on the library.
#[test]
fn conformance_pending_marks_are_checked() {
    let table = r#"
[[scenario]]
name = "lacks a function"
pending = ["rl_no_such_function"]
steps = [["RL.HIT {key} 1 1h", [1, 1, 0, "edge:1h", 0]]]

[[scenario]]
name = "has every function it waits for"
pending = ["rl_hit"]
steps = [["RL.HIT {key} 1 1h", [1, 1, 0, "edge:1h", 0]]]

[[scenario]]
name = "a feature that fails"
pending = ["a reply no backend gives"]
steps = [["RL.HIT {key} 1 1h", [1, 1, 1, "edge:1h", 0]]]

[[scenario]]
name = "a feature that passes"
pending = ["fixed windows"]
steps = [["RL.HIT {key} 1 1h", [1, 1, 0, "edge:1h", 0]]]
"#;
    let scenarios = table::parse_file("inline", table).expect("the table parses");
    let flavor = Flavor::Valkey;
    let server = ServerConfig::managed(flavor).start();
    let mut con = server.conn();
    let library = load_library(&mut con, &library_source());
    let mut target = Target {
        backend: Backend::Functions,
        server: server_name(flavor),
        con: &mut con,
        replica: None,
        library,
        tag: "p".into(),
        mutate: None,
    };
    let outcome = run_all(&mut target, &scenarios);
    let named = |list: &[String], name: &str| list.iter().any(|l| l.contains(name));
    assert!(outcome.passed.is_empty(), "{outcome:#?}");
    assert!(
        named(&outcome.pending, "\"lacks a function\""),
        "{outcome:#?}"
    );
    assert!(
        named(&outcome.pending, "\"a feature that fails\""),
        "{outcome:#?}"
    );
    assert!(
        named(&outcome.failures, "\"has every function"),
        "{outcome:#?}"
    );
    assert!(
        named(&outcome.failures, "\"a feature that passes\""),
        "{outcome:#?}"
    );
    assert_eq!((outcome.pending.len(), outcome.failures.len()), (2, 2));
}

/// The table's reader names the file, the scenario and the step of what it cannot read.
#[test]
fn conformance_table_errors_name_the_place() {
    let cases = [
        ("[[scenario]]\nsteps = []", "a scenario needs a name"),
        (
            "[[scenario]]\nname = \"a\"\nsteps = [[\"RL.HIT {key} 1 1h\", \"soon\"]]",
            "\"a\" step 1: \"soon\" is no matcher",
        ),
        (
            "[[scenario]]\nname = \"b\"\nsteps = [{ call = \"PING\", reply = 1, via = 2 }]",
            "\"b\" step 1: unknown field \"via\"",
        ),
        (
            "[[scenario]]\nname = \"c\"\nsteps = [[\"PING\", \"edge:1y\"]]",
            "unknown unit \"y\"",
        ),
    ];
    for (text, expected) in cases {
        let error = table::parse_file("inline", text).expect_err(text);
        assert!(error.contains(expected), "{error:?} lacks {expected:?}");
    }
}
