//! What `COMMAND DOCS` and `COMMAND INFO` say about each command beyond its flags: a
//! summary, its complexity (the reason most commands are not `fast`), and the tip
//! `nondeterministic_output` for every command whose reply depends on the server's clock.
//!
//! Set with `RedisModule_SetCommandInfo` (Redis 7.0, Valkey) without an arity, so the
//! module keeps checking its arguments itself, and without key specs for the commands
//! registered with key positions (`1, 1, 1`), which stay as they are. The several-keys
//! commands (`numkeys key [key ...]`) are registered without positions and get their key
//! spec here: it is how Cluster finds their keys. Docs are optional: a server
//! that refuses them gets a log line, and the module loads anyway.

use crate::server::command::{set_docs, CountedKeys};
use redis_module::Context;
use std::ffi::CStr;

/// A command's (or subcommand's, `RL.POLICY|SET`) summary, complexity and tips.
type Docs = (
    &'static CStr,
    &'static CStr,
    &'static CStr,
    Option<&'static CStr>,
);

/// The clock is read, so the same call on the same key can answer differently.
const CLOCK: Option<&CStr> = Some(c"nondeterministic_output");
const LEASES: &CStr =
    c"O(N), N the leases stored in the key (at most ratelimit.max-leases, expired ones included)";
const ALGO_LOG: &CStr = c"O(1); O(N) with ALGO log, N the limit (at most 10000)";

const DOCS: &[Docs] = &[
    (
        c"RL.HIT",
        c"Checks every tier of a rate limit and, if all allow, counts the units in all of them",
        ALGO_LOG,
        CLOCK,
    ),
    (
        c"RL.PEEK",
        c"Answers what RL.HIT would, without counting",
        ALGO_LOG,
        CLOCK,
    ),
    (
        c"RL.REFUND",
        c"Gives back units counted earlier in the current window or bucket",
        ALGO_LOG,
        CLOCK,
    ),
    (
        c"RL.RESET",
        c"Forgets a key's rate-limit state",
        c"O(1); O(N) for an ALGO log state of N entries",
        None,
    ),
    (
        c"CL.THROTTLE",
        c"redis-cell's GCRA throttle: same arguments and reply",
        c"O(1); O(N) when the key holds an ALGO log state of N entries",
        CLOCK,
    ),
    (
        c"RL.ACQUIRE",
        c"Takes one of max concurrent leases on a key for ttl, and counts the hit in the tiers given, all or nothing",
        LEASES,
        CLOCK,
    ),
    (
        c"RL.RELEASE",
        c"Releases a held lease by its id",
        LEASES,
        CLOCK,
    ),
    (
        c"RL.RENEW",
        c"Extends a held lease to end ttl from now (never shortens it)",
        LEASES,
        CLOCK,
    ),
    (
        c"RL.LEASES",
        c"Counts the held and free leases of a key, without writing",
        LEASES,
        CLOCK,
    ),
    (
        c"RL.STATS",
        c"The module's decision counts, or one policy's",
        c"O(1)",
        Some(c"nondeterministic_output"),
    ),
    (
        c"RL.POLICY",
        c"Named rate-limit policies",
        c"Depends on the subcommand",
        None,
    ),
    (
        c"RL.POLICY|SET",
        c"Defines or replaces a named policy",
        c"O(1)",
        None,
    ),
    (
        c"RL.POLICY|GET",
        c"Shows a named policy's definition",
        c"O(1)",
        None,
    ),
    (c"RL.POLICY|DEL", c"Deletes a named policy", c"O(1)", None),
    (
        c"RL.POLICY|LIST",
        c"Lists the names of the policies",
        c"O(N), N the number of policies",
        None,
    ),
    (
        c"RL.POLICY|HELP",
        c"Shows the RL.POLICY subcommands",
        c"O(1)",
        None,
    ),
];

/// The several-keys commands: their docs and whether they write their keys.
const SEVERAL_KEYS: &[(Docs, bool)] = &[
    (
        (
            c"RL.MHIT",
            c"Checks several keys, each with its own rule and cost, and counts in all of them or in none",
            c"O(K) for K keys; O(N) more per key with ALGO log, N its limit (at most 10000)",
            CLOCK,
        ),
        true,
    ),
    (
        (
            c"RL.MPEEK",
            c"Answers what RL.MHIT would, without counting",
            c"O(K) for K keys; O(N) more per key with ALGO log, N its limit (at most 10000)",
            CLOCK,
        ),
        false,
    ),
    (
        (
            c"RL.MREFUND",
            c"Gives back units in several keys at once",
            c"O(K) for K keys; O(N) more per key with ALGO log, N its limit (at most 10000)",
            CLOCK,
        ),
        true,
    ),
];

/// Sets the docs of every registered command, and the key specs of the several-keys
/// commands; called at load, after registration. A key spec the server refuses fails the
/// load: without it Cluster could not route those commands.
pub fn describe_all(ctx: &Context) -> Result<(), String> {
    for (name, summary, complexity, tips) in DOCS {
        if let Err(err) = set_docs(ctx, name, summary, complexity, *tips, None) {
            ctx.log_notice(&format!("ratelimit: {err}"));
        }
    }
    for ((name, summary, complexity, tips), writes) in SEVERAL_KEYS {
        let keys = CountedKeys {
            count_at: 1,
            writes: *writes,
        };
        set_docs(ctx, name, summary, complexity, *tips, Some(keys))?;
    }
    Ok(())
}
