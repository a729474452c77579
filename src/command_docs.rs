//! What `COMMAND DOCS` and `COMMAND INFO` say about each command beyond its flags: a
//! summary, its complexity (the reason most commands are not `fast`), and the tip
//! `nondeterministic_output` for every command whose reply depends on the server's clock.
//!
//! Set with `RedisModule_SetCommandInfo` (Redis 7.0, Valkey) without key specs, so the
//! key positions registered with the command (`1, 1, 1`) stay as they are, and without an
//! arity, so the module keeps checking its arguments itself. Docs are optional: a server
//! that refuses them gets a log line, and the module loads anyway.

use crate::server::command::set_docs;
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

/// Sets the docs of every registered command; called at load, after registration.
pub fn describe_all(ctx: &Context) {
    for (name, summary, complexity, tips) in DOCS {
        if let Err(err) = set_docs(ctx, name, summary, complexity, *tips) {
            ctx.log_notice(&format!("ratelimit: {err}"));
        }
    }
}
