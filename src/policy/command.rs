//! `RL.POLICY SET|GET|DEL|LIST|HELP` (subcommands of a container command, each with its
//! own flags: see `lib.rs`) and `RL.STATS [RESET] [name]`.
//!
//! `RL.POLICY SET name limit window [limit window ...] [ALGO a] [BURST b]
//! [MODE enforce|shadow]` defines a named rule that `RL.HIT key POLICY name [COST n]` (and
//! RL.PEEK, RL.REFUND) apply. A change propagates as the command itself: it reads no clock,
//! so replaying it is replaying its effect.

use super::{rdb, registry};
use crate::command::{
    command_handler, from_primary_or_aof, read_only_replica, Args, CommandError, CommandResult,
};
use crate::server::info;
use crate::{config, metrics, reply, store};
use ratelimit_core::args::{parse_policy, policy_arguments, Settings};
use ratelimit_core::duration::LARGEST_WINDOW_MS;
use redis_module::{Context, RedisValue};

command_handler!(rl_policy, run_policy);
command_handler!(rl_stats, run_stats);

const READONLY: &str = "READONLY You can't write against a read only replica.";
const NOT_IN_AOF_REWRITE: &str = "ERR policies would not survive an AOF rewrite with \
    aof-use-rdb-preamble no: keep the RDB preamble (the default) to use policies";
const CANNOT_READ_PREAMBLE: &str = "ERR cannot tell whether policies survive an AOF \
    rewrite: CONFIG GET aof-use-rdb-preamble failed (is CONFIG renamed?)";
const NOT_PERSISTED: &str = "ERR policies would not survive a restart: on Redis 7.0 load the \
    module with 'policies-in-rdb yes' (its RDB files then need the module to load)";

/// `RL.POLICY HELP`: one line per subcommand, its syntax from its description
/// (`commands/rl.policy-*.json`), in this order.
const HELP: [&str; 5] = ["SET", "GET", "DEL", "LIST", "HELP"];

fn help_lines() -> Vec<&'static [u8]> {
    HELP.iter()
        .filter_map(|sub| crate::command_docs::syntax_of(&format!("RL.POLICY|{sub}")))
        .collect()
}

/// Every subcommand of the `RL.POLICY` container runs this. A wrong number of arguments is
/// reported for `RL.POLICY` as a whole (the server would name the subcommand,
/// `RL.POLICY|SET`), as it was before the container.
fn run_policy(ctx: &Context, args: Args<'_>) -> CommandResult {
    run_subcommand(ctx, args).map_err(|err| match err {
        CommandError::WrongArity => {
            message("ERR wrong number of arguments for 'RL.POLICY' command")
        }
        other => other,
    })
}

fn run_subcommand(ctx: &Context, args: Args<'_>) -> CommandResult {
    let mut words = args.bytes_from(1);
    let subcommand = words.next().ok_or(CommandError::WrongArity)?;
    let name = words.next();
    let rest = words;
    match (subcommand.to_ascii_uppercase().as_slice(), name) {
        (b"SET", Some(name)) => {
            refuse_on_replica(ctx)?;
            if !from_primary_or_aof(ctx) {
                if !rdb::policies_persist() {
                    return Err(message(NOT_PERSISTED));
                }
                if aof_rewrite_would_drop_policies(ctx)? {
                    return Err(message(NOT_IN_AOF_REWRITE));
                }
            }
            if name.is_empty() {
                return Err(message("ERR policy name must not be empty"));
            }
            // What the primary (or the AOF) accepted is obeyed whatever the local configs.
            let settings = if from_primary_or_aof(ctx) {
                Settings {
                    max_window_ms: LARGEST_WINDOW_MS,
                    max_log_limit: config::LARGEST_MAX_LOG_LIMIT,
                    ..config::settings()
                }
            } else {
                config::settings()
            };
            let definition = parse_policy(rest, &settings)?;
            // Propagated in full (ALGO and MODE spelled out), so that a replica or the AOF
            // does not fill in its own default algorithm.
            let canonical = policy_arguments(&definition);
            let mut propagated: Vec<&[u8]> = vec![b"SET", name];
            propagated.extend(canonical.iter().map(|a| a.as_bytes()));
            // Propagated before it is applied: a policy that could not reach the replicas
            // and the AOF is not defined here either.
            store::propagate_command(ctx, c"RL.POLICY", &propagated)?;
            registry::set(name, definition);
            reply::ok(ctx);
        }
        (b"GET", Some(name)) if rest.len() == 0 => match registry::get(name) {
            Some(definition) => reply::bulk_strings(ctx, &policy_arguments(&definition)),
            None => reply::null(ctx),
        },
        (b"DEL", Some(name)) if rest.len() == 0 => {
            refuse_on_replica(ctx)?;
            let deleted = registry::get(name).is_some();
            if deleted {
                store::propagate_command(ctx, c"RL.POLICY", &[b"DEL", name])?;
                registry::delete(name);
            }
            reply::integer(ctx, i64::from(deleted));
        }
        (b"LIST", None) => {
            let names: Vec<Vec<u8>> = registry::all().into_iter().map(|(n, _)| n).collect();
            reply::bulk_strings(ctx, &names);
        }
        (b"HELP", None) => reply::bulk_strings(ctx, &help_lines()),
        (b"SET" | b"GET" | b"DEL" | b"LIST" | b"HELP", _) => return Err(CommandError::WrongArity),
        // The server answers unknown subcommands of the container itself; this is for a
        // call that reaches the handler another way.
        _ => {
            return Err(message(
                "ERR unknown RL.POLICY subcommand (expected SET, GET, DEL, LIST or HELP)",
            ))
        }
    }
    Ok(())
}

/// Whether the AOF is on without its RDB preamble: a rewrite then writes only commands for
/// keys, and policies, which are no keys, would be gone at the next restart. Whether the
/// AOF is on comes from INFO's data (no command needed); the preamble setting only from
/// `CONFIG GET`, so where `CONFIG` is renamed away a policy is refused rather than allowed
/// on a guess.
fn aof_rewrite_would_drop_policies(ctx: &Context) -> Result<bool, CommandError> {
    if !info::aof_enabled(ctx) {
        return Ok(false);
    }
    let reply = ctx.call("CONFIG", &["GET", "aof-use-rdb-preamble"][..]);
    let value = match reply {
        Ok(RedisValue::Array(pair)) => pair.get(1).and_then(|value| match value {
            RedisValue::SimpleString(v) | RedisValue::BulkString(v) => Some(v.as_bytes().to_vec()),
            RedisValue::StringBuffer(v) => Some(v.clone()),
            RedisValue::BulkRedisString(v) => Some(v.as_slice().to_vec()),
            _ => None,
        }),
        _ => None,
    };
    match value {
        Some(value) => Ok(value.eq_ignore_ascii_case(b"no")),
        None => Err(message(CANNOT_READ_PREAMBLE)),
    }
}

fn refuse_on_replica(ctx: &Context) -> CommandResult {
    if read_only_replica(ctx) && !from_primary_or_aof(ctx) {
        return Err(message(READONLY));
    }
    Ok(())
}

fn message(text: &'static str) -> CommandError {
    CommandError::Message(text.into())
}

/// `RL.STATS` (the server's counts), `RL.STATS name` (one policy's), `RL.STATS RESET
/// [name]`.
fn run_stats(ctx: &Context, args: Args<'_>) -> CommandResult {
    let words: Vec<&[u8]> = args.bytes_from(1).collect();
    match words.as_slice() {
        [] => {
            let totals = metrics::totals();
            reply::named_integers(
                ctx,
                &[
                    (c"hits", totals.hits),
                    (c"allowed", totals.allowed),
                    (c"denied", totals.denied),
                    (c"shadow_denied", totals.shadow_denied),
                    (c"errors", totals.errors),
                    (c"policies", registry::count() as i64),
                ],
            );
        }
        [reset] if reset.eq_ignore_ascii_case(b"RESET") => {
            metrics::reset();
            registry::reset_stats(None);
            reply::ok(ctx);
        }
        [reset, name] if reset.eq_ignore_ascii_case(b"RESET") => {
            if !registry::reset_stats(Some(name)) {
                return Err(no_such_policy(name));
            }
            reply::ok(ctx);
        }
        [name] => {
            let stats = registry::stats(name).ok_or_else(|| no_such_policy(name))?;
            let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            reply::named_integers(
                ctx,
                &[
                    (c"hits", count(stats.hits)),
                    (c"allowed", count(stats.allowed)),
                    (c"denied", count(stats.denied)),
                    (c"shadow_denied", count(stats.shadow_denied)),
                ],
            );
        }
        _ => return Err(CommandError::WrongArity),
    }
    Ok(())
}

/// The error for a call naming a policy that does not exist.
pub fn no_such_policy(name: &[u8]) -> CommandError {
    let shown: String = name
        .iter()
        .take(64)
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
        .collect();
    CommandError::Message(format!("ERR no such policy '{shown}'").into())
}
