//! The Functions library (`functions/ratelimit.lua`): its path, loading it into a
//! [`Server`], calling its functions, a server that stands in for a managed Redis (no
//! module, `MODULE` disabled), and the comparison of the library with the module: the same
//! calls on keys of each, in one transaction whose clock stays in one ms ([`same_ms`],
//! [`assert_same_as_the_module`], [`same_ms_several`]).

use super::*;
use crate::cluster::NodeSetup;
use redis::Value;

/// The committed bundle that `FUNCTION LOAD` takes.
pub fn bundle_path() -> PathBuf {
    workspace_root().join("functions").join("ratelimit.lua")
}

/// The bundle's text.
pub fn bundle() -> String {
    let path = bundle_path();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl ServerConfig {
    /// A server as a managed service offers it: no module, and `MODULE LOAD` refused
    /// (`enable-module-command no`), so only `FUNCTION LOAD` can bring the limits.
    pub fn managed(flavor: Flavor) -> Self {
        ServerConfig::new(flavor).as_managed()
    }

    /// This config without the module and with `enable-module-command no`.
    pub fn as_managed(self) -> Self {
        self.without_module().arg("enable-module-command", "no")
    }
}

impl NodeSetup {
    /// Cluster nodes as [`ServerConfig::managed`] makes servers: no module, and none loadable.
    pub fn managed() -> NodeSetup {
        NodeSetup {
            node: Box::new(|config| {
                let port = config.port;
                (config.as_managed(), port)
            }),
            cli_args: Vec::new(),
        }
    }
}

impl Server {
    /// Loads (or replaces) the library; returns the library's name as the server answers.
    pub fn load_functions(&self) -> String {
        load_functions(&mut self.conn())
    }
}

/// `FUNCTION LOAD REPLACE` of the bundle on `con`.
pub fn load_functions(con: &mut Connection) -> String {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(bundle())
        .query(con)
        .expect("FUNCTION LOAD REPLACE functions/ratelimit.lua")
}

/// `FCALL name numkeys keys... args...` as a command, for [`error_text`] and raw replies.
pub fn fcall_cmd(name: &str, keys: &[&str], args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(name).arg(keys.len()).arg(keys).arg(args);
    cmd
}

/// `FCALL rl_hit 1 key args...`: the library's RL.HIT, decoded like [`hit`].
pub fn fhit(con: &mut Connection, key: &str, args: &[&str]) -> Reply {
    fcall_reply(con, "rl_hit", key, args)
}

/// A one-key function that answers RL.HIT's five integers (`rl_hit`, `rl_peek`,
/// `rl_refund`), decoded.
pub fn fcall_reply(con: &mut Connection, name: &str, key: &str, args: &[&str]) -> Reply {
    let values: Vec<i64> = fcall_cmd(name, &[key], args)
        .query(con)
        .unwrap_or_else(|e| panic!("FCALL {name} {key} {args:?}: {e}"));
    decode_reply(&values)
}

/// One call of a sequence: the command (`hit`, `peek`, `refund`) and its arguments after
/// the key.
pub type Step<'a> = (&'a str, &'a str);

/// The module's command and the library's function for `command`.
pub fn names(command: &str) -> (String, String) {
    (
        format!("RL.{}", command.to_uppercase()),
        format!("rl_{command}"),
    )
}

/// What one key answered and then held: the reply (raw, errors included), the value and
/// its absolute expiry.
pub type Seen = (Value, Option<Vec<u8>>, i64);

/// The module's clock, read through a fixed window of 366 days on `PROBE`: its
/// `reset_after_ms` is the window's end minus the module's `now`.
pub const PROBE: &str = "functions-core:clock-probe";
pub const PROBE_WINDOW_MS: i64 = 366 * 86_400_000;

/// Adds the module's clock probe to `pipe`.
fn probe(pipe: &mut redis::Pipeline) {
    pipe.cmd("RL.HIT")
        .arg(PROBE)
        .arg("9007199254740991")
        .arg("366d");
}

/// Adds to `pipe` what puts `key` back as `before` says (value and absolute expiry, -1 for
/// none, no value for no key), its reply ignored.
fn restore(pipe: &mut redis::Pipeline, key: &str, before: &(Option<Vec<u8>>, i64)) {
    match before {
        (None, _) => pipe.cmd("DEL").arg(key).ignore(),
        (Some(value), -1) => pipe.cmd("SET").arg(key).arg(value).ignore(),
        (Some(value), at) => pipe
            .cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PXAT")
            .arg(*at)
            .ignore(),
    };
}

/// Whether a transaction's clocks all read one ms: `TIME` at `replies[first]` and
/// `replies[last]`, the module's probe at `first + 1` and `probe_after`.
fn in_one_ms(replies: &[Value], first: usize, probe_after: usize, last: usize) -> bool {
    let time = |v: &Value| -> i64 {
        let (secs, micros): (i64, i64) = redis::from_redis_value(v.clone()).expect("TIME");
        secs * 1_000 + micros / 1_000
    };
    let start = time(&replies[first]);
    let end = start - start.rem_euclid(PROBE_WINDOW_MS) + PROBE_WINDOW_MS;
    let module_clock = |v: &Value| -> i64 {
        let reply: Vec<i64> = redis::from_redis_value(v.clone()).expect("probe");
        end - reply[3]
    };
    [
        module_clock(&replies[first + 1]),
        module_clock(&replies[probe_after]),
        time(&replies[last]),
    ]
    .iter()
    .all(|&clock| clock == start)
}

/// Runs `command` on three keys in one transaction during which the server's clock stays
/// in one ms (retried until it does, so every call saw the same `now`): `m` by the module,
/// `l` by the library, and `x` by the module or the library as `library_on_x` says.
/// Returns each key's reply and what it held right after, read in the transaction.
///
/// Every attempt puts the three keys back as they were before the step (`before`: the
/// value and absolute expiry, -1 for none), so an attempt whose clock moved leaves nothing
/// behind; it does so after the first clock reads, so that the restores too run in the ms
/// the calls see (an expiry at that ms drops the key on every one of them alike).
///
/// Valkey answers `TIME` inside a transaction (and a function's `TIME`) with the time the
/// transaction started, while the module reads the running clock: the transaction is
/// taken when `TIME` and the module's clock, read before and after the calls, agree.
pub fn same_ms(
    con: &mut Connection,
    (command, args): Step<'_>,
    keys: [&str; 3],
    library_on_x: bool,
    before: &(Option<Vec<u8>>, i64),
) -> [Seen; 3] {
    let (module, library) = names(command);
    let args: Vec<&str> = args.split_whitespace().collect();
    for _ in 0..1_000 {
        let mut pipe = redis::pipe();
        pipe.atomic().ignore_errors();
        pipe.cmd("TIME");
        probe(&mut pipe);
        for key in keys {
            restore(&mut pipe, key, before);
        }
        pipe.cmd(&module).arg(keys[0]).arg(&args);
        pipe.cmd("FCALL")
            .arg(&library)
            .arg(1)
            .arg(keys[1])
            .arg(&args);
        if library_on_x {
            pipe.cmd("FCALL")
                .arg(&library)
                .arg(1)
                .arg(keys[2])
                .arg(&args);
        } else {
            pipe.cmd(&module).arg(keys[2]).arg(&args);
        }
        for key in keys {
            pipe.cmd("GET").arg(key).cmd("PEXPIRETIME").arg(key);
        }
        probe(&mut pipe);
        pipe.cmd("TIME");
        let replies: Vec<Value> = pipe.query(con).expect("EXEC");
        if in_one_ms(&replies, 0, 11, 12) {
            let seen = |n: usize| -> Seen {
                let value = redis::from_redis_value(replies[5 + 2 * n].clone()).expect("GET");
                let expiry =
                    redis::from_redis_value(replies[6 + 2 * n].clone()).expect("PEXPIRETIME");
                (replies[2 + n].clone(), value, expiry)
            };
            return [seen(0), seen(1), seen(2)];
        }
    }
    panic!("no transaction ran within one ms in 1000 tries");
}

/// Runs `steps` on the three keys of [`same_ms`] (the backend on `x` alternating) and
/// asserts that each step's replies, and the stored bytes and expiries after it, are equal;
/// returns each step's reply (the same on every key) but the `persist` steps'.
pub fn assert_same_as_the_module(
    con: &mut Connection,
    tag: &str,
    steps: &[Step<'_>],
) -> Vec<Value> {
    assert_same_from(con, tag, (None, -2), steps)
}

/// [`assert_same_as_the_module`] on keys that start holding `start` (a value and its
/// absolute expiry, -1 for none).
pub fn assert_same_from(
    con: &mut Connection,
    tag: &str,
    start: (Option<Vec<u8>>, i64),
    steps: &[Step<'_>],
) -> Vec<Value> {
    let keys = [
        format!("{tag}:module"),
        format!("{tag}:library"),
        format!("{tag}:mixed"),
    ];
    let keys = [keys[0].as_str(), keys[1].as_str(), keys[2].as_str()];
    let mut before = start;
    let mut replies = Vec::new();
    for (n, step) in steps.iter().enumerate() {
        if step.0 == "persist" {
            // The key loses its expiry (PERSIST): both backends count its units again.
            before.1 = -1;
            continue;
        }
        let [module, library, mixed] = same_ms(con, *step, keys, n % 2 == 0, &before);
        let context = format!("{tag}, step {n} {step:?}");
        assert_eq!(module, library, "module, library: {context}");
        assert_eq!(module, mixed, "module, mixed: {context}");
        replies.push(module.0);
        before = (module.1, module.2);
    }
    replies
}

/// Two keys no rate-limit command can read, for the wrong-type cases: `text`, a string
/// that is no state of ours, and `hash`, a hash.
pub fn foreign_keys(con: &mut Connection) {
    redis::cmd("SET")
        .arg("text")
        .arg("hello")
        .exec(con)
        .expect("SET");
    redis::cmd("HSET")
        .arg("hash")
        .arg("f")
        .arg("v")
        .exec(con)
        .expect("HSET");
}

/// A server with the module and the library: what the comparisons below run on.
pub fn with_module_and_library(flavor: Flavor) -> Server {
    let server = ServerConfig::new(flavor).start();
    assert_eq!(server.load_functions(), "ratelimit");
    server
}

/// A key's value and absolute expiry (-1 none, -2 no key).
pub type Held = (Option<Vec<u8>>, i64);

/// Runs `RL.M<command>` on `m1 m2` and `FCALL rl_m<command>` on `l1 l2` with `args` after
/// the keys, in one transaction during which the clock stays in one ms (as [`same_ms`],
/// the keys first put back as `before`); returns both replies and what the four keys hold.
pub fn same_ms_several(
    con: &mut Connection,
    command: &str,
    args: &str,
    before: &[Held; 2],
) -> ((Value, Value), [Held; 4]) {
    let (module, library) = names(&format!("m{command}"));
    let args: Vec<&str> = args.split_whitespace().collect();
    let keys = ["several:m1", "several:m2", "several:l1", "several:l2"];
    for _ in 0..1_000 {
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("TIME");
        probe(&mut pipe);
        for (n, key) in keys.iter().enumerate() {
            restore(&mut pipe, key, &before[n % 2]);
        }
        pipe.cmd(&module).arg(2).arg(&keys[..2]).arg(&args);
        pipe.cmd("FCALL")
            .arg(&library)
            .arg(2)
            .arg(&keys[2..])
            .arg(&args);
        for key in keys {
            pipe.cmd("GET").arg(key).cmd("PEXPIRETIME").arg(key);
        }
        probe(&mut pipe);
        pipe.cmd("TIME");
        let r: Vec<Value> = pipe.query(con).expect("EXEC");
        if in_one_ms(&r, 0, 12, 13) {
            let held = |n: usize| -> Held {
                (
                    redis::from_redis_value(r[4 + 2 * n].clone()).expect("GET"),
                    redis::from_redis_value(r[5 + 2 * n].clone()).expect("PEXPIRETIME"),
                )
            };
            return (
                (r[2].clone(), r[3].clone()),
                [held(0), held(1), held(2), held(3)],
            );
        }
    }
    panic!("no transaction ran within one ms in 1000 tries");
}
