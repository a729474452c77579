//! Random traffic against a primary (AOF on) and its replica, on Redis 7.0 and Valkey 8.1:
//! several clients at once send random calls of every command of the module with edge and
//! malformed arguments, while others overwrite the same keys with plain commands, wrap
//! calls in MULTI/EXEC and Lua, change `ratelimit.*` configs and start background saves.
//!
//! Then: both servers are alive and logged no panic; every error began with `ERR` or
//! `WRONGTYPE` and none was the panic guard's; the replica and a restart from the AOF hold
//! the primary's keys, values, absolute expiries and policies; and the slow log holds no
//! call of the module of 1 ms or more.
//!
//! The seed is printed at the start; `RL_HOSTILE_SEED=<seed>` replays the same calls (each
//! client's sequence is the seed's, their interleaving is the scheduler's), and
//! `RL_HOSTILE_SECONDS` runs the traffic longer than the default 30 s per server.

use testkit::random_calls::calls::{any_call, peek_call, Argv};
use testkit::random_calls::keys::BIG_LOG_KEY;
use testkit::random_calls::replies::{show, Tally};
use testkit::random_calls::rng::Rng;
use testkit::random_calls::traffic::{self, Step};
use testkit::random_calls::{seed, server_config, slowlog, snapshot, traffic_duration};
use testkit::*;

use redis::{Connection, ConnectionLike, Value};
use std::time::{Duration, Instant};

/// Keys are compared when they expire this long after the comparison starts, or never:
/// enough for the replica check and an AOF restart on a loaded machine.
const OUTLIVES_COMPARISON_MS: i64 = 90_000;

#[test]
fn random_traffic_on_redis() {
    random_run(Flavor::Redis);
}

#[test]
fn random_traffic_on_valkey() {
    random_run(Flavor::Valkey);
}

fn random_run(flavor: Flavor) {
    let seed = seed();
    let duration = traffic_duration();
    eprintln!(
        "random traffic on {flavor:?}: seed {seed} (replay: RL_HOSTILE_SEED={seed}), {} s",
        duration.as_secs()
    );
    let primary_config = server_config(flavor).arg("appendonly", "yes");
    let (primary, replica) = primary_with_replica_configs(primary_config, server_config(flavor));

    let tally = drive(&primary, &replica, seed, duration);
    eprintln!(
        "{flavor:?}: {} commands, {} hits allowed, {} denied, errors by code {:?}; most \
         frequent errors: {:?}",
        tally.calls,
        tally.allowed,
        tally.denied,
        tally.errors,
        tally.top_messages(12)
    );
    assert_alive(&primary, flavor);
    assert_alive(&replica, flavor);
    assert!(
        tally.violations.is_empty(),
        "{flavor:?} seed {seed}: {} replies broke the error contract, e.g.:\n{}",
        tally.violation_count,
        tally.violations.join("\n")
    );
    assert!(
        tally.allowed > 0 && tally.denied > 0,
        "{flavor:?}: hits were allowed ({}) and denied ({})",
        tally.allowed,
        tally.denied
    );

    settle(&primary, &replica, flavor);
    let threshold = primary.time_ms() + OUTLIVES_COMPARISON_MS;
    let on_primary = snapshot::take(&mut primary.conn(), threshold);
    let on_replica = snapshot::take(&mut replica.conn(), threshold);
    eprintln!(
        "{flavor:?}: comparing {} keys and {} policies",
        on_primary.keys.len(),
        on_primary.policies.len()
    );
    assert!(
        on_primary.keys.contains_key(BIG_LOG_KEY),
        "{flavor:?}: the big log is among the compared keys"
    );
    let diff = snapshot::differences(&on_primary, &on_replica);
    assert!(
        diff.is_empty(),
        "{flavor:?} seed {seed}: the replica differs from the primary:\n{}",
        diff.join("\n")
    );
    let mut slow = slow_calls_of_ours(&primary, flavor);
    slow.extend(slow_calls_of_ours(&replica, flavor));

    drop(replica);
    let restarted = primary.shutdown("NOSAVE").start();
    let after_restart = snapshot::take(&mut restarted.conn(), threshold);
    let diff = snapshot::differences(&on_primary, &after_restart);
    assert!(
        diff.is_empty(),
        "{flavor:?} seed {seed}: the AOF restart differs from the primary:\n{}",
        diff.join("\n")
    );
    assert_alive(&restarted, flavor);
    assert_slow_calls_were_preempted(&restarted, flavor, seed, &slow);
    report_big_log_cost(&restarted, flavor);
}

/// What each client thread does.
#[derive(Clone, Copy, Debug)]
enum Client {
    /// The module's calls, RESP2 or RESP3.
    Caller { resp3: bool },
    /// Plain writes to the same keys, MULTI/EXEC blocks and Lua.
    Meddler,
    /// Configs, background saves, and the module's reads on the replica.
    Operator,
    /// Fills one `ALGO log` key to its 10,000 entries and keeps calling it.
    LogFiller,
}

const CLIENTS: [Client; 6] = [
    Client::Caller { resp3: false },
    Client::Caller { resp3: true },
    Client::Caller { resp3: false },
    Client::Meddler,
    Client::Operator,
    Client::LogFiller,
];

/// Runs every client for `duration` and returns what they saw, all tallies merged.
fn drive(primary: &Server, replica: &Server, seed: u64, duration: Duration) -> Tally {
    let deadline = Instant::now() + duration;
    let mut root = Rng::new(seed);
    let rngs: Vec<Rng> = (0..CLIENTS.len() as u64).map(|i| root.fork(i)).collect();
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let handles: Vec<_> = CLIENTS
            .into_iter()
            .zip(rngs)
            .map(|(client, rng)| {
                scope.spawn(move || run_client(client, rng, primary, replica, deadline))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a client thread panicked"))
            .collect()
    });
    let mut total = Tally::default();
    tallies.into_iter().for_each(|t| total.merge(t));
    // What the operator changed is put back, so later commands run under the defaults.
    let mut con = primary.conn();
    for argv in traffic::config_defaults() {
        send(&mut con, &argv, &mut total);
    }
    total
}

fn run_client(
    client: Client,
    mut rng: Rng,
    primary: &Server,
    replica: &Server,
    deadline: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let mut con = match client {
        Client::Caller { resp3: true } => resp3_conn(primary),
        _ => primary.conn(),
    };
    let mut on_replica = replica.conn();
    while Instant::now() < deadline {
        let alive = match client {
            Client::Caller { .. } => send(&mut con, &any_call(&mut rng), &mut tally),
            Client::Meddler => match rng.below(10) {
                0..=5 => send(&mut con, &traffic::foreign_write(&mut rng), &mut tally),
                6..=7 => match traffic::transaction(&mut rng) {
                    Step::Transaction(commands) => transact(&mut con, &commands, &mut tally),
                    Step::Command(argv) => send(&mut con, &argv, &mut tally),
                },
                _ => send(&mut con, &traffic::lua_call(&mut rng), &mut tally),
            },
            Client::Operator => {
                // Configs change now and then and soon come back to their defaults, so
                // that most calls run under the defaults and some under each change.
                let alive = match rng.below(100) {
                    0..=2 => send(&mut con, &traffic::background_save(&mut rng), &mut tally),
                    3..=5 => send(&mut con, &traffic::config_set(&mut rng), &mut tally),
                    6..=8 => traffic::config_defaults()
                        .iter()
                        .all(|argv| send(&mut con, argv, &mut tally)),
                    _ => send(&mut on_replica, &peek_call(&mut rng), &mut tally),
                };
                std::thread::sleep(Duration::from_millis(5));
                alive
            }
            Client::LogFiller => {
                let command: &[u8] = match rng.below(20) {
                    0 => b"RL.PEEK",
                    1 => b"RL.REFUND",
                    _ => b"RL.HIT",
                };
                let argv = [command, BIG_LOG_KEY, b"10000", b"1h", b"ALGO", b"log"];
                send(&mut con, &argv.map(<[u8]>::to_vec), &mut tally)
            }
        };
        if !alive {
            break;
        }
    }
    tally
}

/// A RESP3 connection with the same read timeout as the RESP2 ones.
fn resp3_conn(server: &Server) -> Connection {
    let con = server.conn_resp3();
    con.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    con
}

fn command(argv: &[Vec<u8>]) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    argv.iter().for_each(|arg| {
        cmd.arg(arg.as_slice());
    });
    cmd
}

/// Sends one command and checks its reply; false when the connection is gone (recorded
/// as a violation: the server must never drop a client).
fn send(con: &mut Connection, argv: &[Vec<u8>], tally: &mut Tally) -> bool {
    match con.req_command(&command(argv)) {
        Ok(reply) => {
            tally.record(argv, &reply);
            true
        }
        Err(err) => {
            tally.violation(format!("{} -> connection failed: {err}", show(argv)));
            false
        }
    }
}

/// Runs `commands` in MULTI/EXEC and checks every reply. A command refused while being
/// queued makes the server abort the block with `EXECABORT`, which is then expected.
fn transact(con: &mut Connection, commands: &[Argv], tally: &mut Tally) -> bool {
    let multi = vec![b"MULTI".to_vec()];
    if !send(con, &multi, tally) {
        return false;
    }
    let mut refused_while_queued = false;
    for argv in commands {
        match con.req_command(&command(argv)) {
            Ok(reply) => {
                refused_while_queued |= matches!(reply, Value::ServerError(_));
                tally.record(argv, &reply);
            }
            Err(err) => {
                tally.violation(format!("{} -> connection failed: {err}", show(argv)));
                return false;
            }
        }
    }
    let exec = vec![b"EXEC".to_vec()];
    match con.req_command(&command(&exec)) {
        Ok(Value::ServerError(err)) if refused_while_queued && err.code() == "EXECABORT" => {
            tally.calls += 1;
            true
        }
        Ok(reply) => {
            let block: Vec<String> = commands.iter().map(|argv| show(argv)).collect();
            tally.record(
                &[format!("EXEC of [{}]", block.join("; ")).into_bytes()],
                &reply,
            );
            true
        }
        Err(err) => {
            tally.violation(format!("EXEC -> connection failed: {err}"));
            false
        }
    }
}

/// The server answers, and its log shows no panic, assertion or crash.
fn assert_alive(server: &Server, flavor: Flavor) {
    let pong: String = redis::cmd("PING")
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("{flavor:?} on port {} is gone: {e}", server.port()));
    assert_eq!(pong, "PONG");
    let log = server
        .config
        .dir()
        .join(format!("server-{}.log", server.port()));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    for alarm in ["ratelimit: panic", "ASSERTION FAILED", "crashed by signal"] {
        assert!(
            !text.contains(alarm),
            "{flavor:?}: {} shows {alarm:?}",
            log.display()
        );
    }
}

/// Waits until no background save runs and the replica has everything the primary
/// propagated, including a last write made for that purpose.
fn settle(primary: &Server, replica: &Server, flavor: Flavor) {
    wait_until(Duration::from_secs(60), "background saves to end", || {
        [
            "rdb_bgsave_in_progress",
            "aof_rewrite_in_progress",
            "aof_rewrite_scheduled",
        ]
        .iter()
        .all(|field| primary.info_field("persistence", field).as_deref() == Some("0"))
    });
    let mut con = primary.conn();
    redis::cmd("SET")
        .arg("random:fence")
        .arg(flavor_name(flavor))
        .exec(&mut con)
        .expect("SET");
    wait_for_replicas(&mut con, 1);
    wait_until(Duration::from_secs(30), "the replica to catch up", || {
        let sent = primary.master_repl_offset();
        let applied: i64 = replica
            .info_field("replication", "slave_repl_offset")
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1);
        applied >= sent
    });
}

fn flavor_name(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::Redis => "redis",
        Flavor::Valkey => "valkey",
    }
}

/// The calls of the module in the server's slow log (each took 1 ms or more); the others
/// are printed.
fn slow_calls_of_ours(server: &Server, flavor: Flavor) -> Vec<slowlog::SlowCall> {
    let entries = slowlog::entries(&mut server.conn());
    let (ours, others): (Vec<_>, Vec<_>) = entries.into_iter().partition(|e| e.is_ours());
    let names: Vec<String> = others
        .iter()
        .map(|e| format!("{} {} us", show(&e.argv[..e.argv.len().min(1)]), e.micros))
        .collect();
    eprintln!(
        "{flavor:?} port {}: {} slow calls of the module, {} of other commands: {}",
        server.port(),
        ours.len(),
        others.len(),
        names.join(", ")
    );
    ours
}

/// How often each slow call is replayed; the fastest replay is its cost.
const REPLAYS: usize = 5;

/// A call of the module in the slow log may be slow, or may have been descheduled by a
/// loaded machine (the run shares its cores; trivial `SET`s and `PEXPIRE`s show up there
/// too). Each is replayed [`REPLAYS`] times on the restarted server, which holds the same
/// data; the fastest replay must stay under 1 ms. A call that is really slow is slow every
/// time, a preempted one is not.
fn assert_slow_calls_were_preempted(
    server: &Server,
    flavor: Flavor,
    seed: u64,
    slow: &[slowlog::SlowCall],
) {
    let mut really_slow = Vec::new();
    for call in slow {
        let fastest = fastest_replay_us(server, &call.argv);
        eprintln!(
            "{flavor:?}: slow call {} us, fastest of {REPLAYS} replays {fastest} us: {}",
            call.micros,
            show(&call.argv)
        );
        if fastest >= slowlog::THRESHOLD_US {
            really_slow.push(format!("{fastest} us: {}", show(&call.argv)));
        }
    }
    assert!(
        really_slow.is_empty(),
        "{flavor:?} seed {seed}: calls of the module took {} us or more every time:\n{}",
        slowlog::THRESHOLD_US,
        really_slow.join("\n")
    );
}

/// Runs `argv` [`REPLAYS`] times and returns the shortest duration the slow log measured.
fn fastest_replay_us(server: &Server, argv: &[Vec<u8>]) -> i64 {
    let mut con = server.conn();
    let set_threshold = |con: &mut Connection, us: i64| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(us)
            .exec(con)
            .expect("CONFIG SET slowlog-log-slower-than");
    };
    set_threshold(&mut con, 0);
    redis::cmd("SLOWLOG")
        .arg("RESET")
        .exec(&mut con)
        .expect("SLOWLOG RESET");
    for _ in 0..REPLAYS {
        let _ = con.req_command(&command(argv));
    }
    let fastest = slowlog::entries(&mut con)
        .into_iter()
        .filter(|e| e.argv.first() == argv.first())
        .map(|e| e.micros)
        .min()
        .unwrap_or(0);
    set_threshold(&mut con, slowlog::THRESHOLD_US);
    fastest
}

/// Prints what calls on the full 10,000-entry log cost (the fastest of a few replays), the
/// slowest state a call of the module meets.
fn report_big_log_cost(server: &Server, flavor: Flavor) {
    let costs: Vec<String> = [&b"RL.PEEK"[..], b"RL.HIT", b"RL.REFUND"]
        .into_iter()
        .map(|name| {
            let argv = [name, BIG_LOG_KEY, b"10000", b"1h", b"ALGO", b"log"].map(<[u8]>::to_vec);
            format!(
                "{} {} us",
                name.escape_ascii(),
                fastest_replay_us(server, &argv)
            )
        })
        .collect();
    let length: i64 = redis::cmd("STRLEN")
        .arg(BIG_LOG_KEY)
        .query(&mut server.conn())
        .expect("STRLEN");
    eprintln!(
        "{flavor:?}: on the big log ({length} bytes): {}",
        costs.join(", ")
    );
}
