//! `RL.POLICY SET|GET|DEL|LIST` and `RL.STATS [RESET] [name]`.
//!
//! `RL.POLICY SET name limit window [limit window ...] [ALGO a] [BURST b]
//! [MODE enforce|shadow]` defines a named rule that `RL.HIT key POLICY name [COST n]` (and
//! RL.PEEK, RL.REFUND) apply. A change propagates as the command itself: it reads no clock,
//! so replaying it is replaying its effect.

use super::CommandResult;
use super::{command_handler, from_primary_or_aof, read_only_replica, Args, CommandError};
use crate::{config, metrics, persist, policies, reply, store};
use ratelimit_core::args::{parse_policy, policy_arguments, Settings};
use ratelimit_core::duration::LARGEST_WINDOW_MS;
use redis_module::{Context, RedisValue};

command_handler!(rl_policy, run_policy);
command_handler!(rl_stats, run_stats);

const READONLY: &str = "READONLY You can't write against a read only replica.";
const NOT_IN_AOF_REWRITE: &str = "ERR policies would not survive an AOF rewrite with \
    aof-use-rdb-preamble no: keep the RDB preamble (the default) to use policies";
const NOT_PERSISTED: &str = "ERR policies would not survive a restart: on Redis 7.0 load the \
    module with 'policies-in-rdb yes' (its RDB files then need the module to load)";

fn run_policy(ctx: &Context, args: Args<'_>) -> CommandResult {
    let mut words = args.bytes_from(1);
    let subcommand = words.next().ok_or(CommandError::WrongArity)?;
    let name = words.next();
    let rest = words;
    match (subcommand.to_ascii_uppercase().as_slice(), name) {
        (b"SET", Some(name)) => {
            refuse_on_replica(ctx)?;
            if !from_primary_or_aof(ctx) {
                if !persist::policies_persist() {
                    return Err(message(NOT_PERSISTED));
                }
                if aof_rewrite_would_drop_policies(ctx) {
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
            policies::set(name, definition);
            store::propagate_command(ctx, c"RL.POLICY", &propagated);
            reply::ok(ctx);
        }
        (b"GET", Some(name)) if rest.len() == 0 => match policies::get(name) {
            Some(definition) => reply::bulk_strings(ctx, &policy_arguments(&definition)),
            None => reply::null(ctx),
        },
        (b"DEL", Some(name)) if rest.len() == 0 => {
            refuse_on_replica(ctx)?;
            let deleted = policies::delete(name);
            if deleted {
                store::propagate_command(ctx, c"RL.POLICY", &[b"DEL", name]);
            }
            reply::integer(ctx, i64::from(deleted));
        }
        (b"LIST", None) => {
            let names: Vec<Vec<u8>> = policies::all().into_iter().map(|(n, _)| n).collect();
            reply::bulk_strings(ctx, &names);
        }
        (b"SET" | b"GET" | b"DEL" | b"LIST", _) => return Err(CommandError::WrongArity),
        _ => {
            return Err(message(
                "ERR unknown RL.POLICY subcommand (expected SET, GET, DEL or LIST)",
            ))
        }
    }
    Ok(())
}

/// Whether the AOF is on without its RDB preamble: a rewrite then writes only commands for
/// keys, and policies, which are no keys, would be gone at the next restart.
fn aof_rewrite_would_drop_policies(ctx: &Context) -> bool {
    let config_is = |name: &str, wanted: &str| {
        let reply = ctx.call("CONFIG", &["GET", name][..]);
        match reply {
            Ok(RedisValue::Array(pair)) => pair.get(1).is_some_and(|value| match value {
                RedisValue::SimpleString(v) | RedisValue::BulkString(v) => v == wanted,
                RedisValue::StringBuffer(v) => v.as_slice() == wanted.as_bytes(),
                RedisValue::BulkRedisString(v) => v.as_slice() == wanted.as_bytes(),
                _ => false,
            }),
            _ => false,
        }
    };
    config_is("appendonly", "yes") && config_is("aof-use-rdb-preamble", "no")
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
                    (c"policies", policies::count() as i64),
                ],
            );
        }
        [reset] if reset.eq_ignore_ascii_case(b"RESET") => {
            metrics::reset();
            policies::reset_stats(None);
            reply::ok(ctx);
        }
        [reset, name] if reset.eq_ignore_ascii_case(b"RESET") => {
            if !policies::reset_stats(Some(name)) {
                return Err(no_such_policy(name));
            }
            reply::ok(ctx);
        }
        [name] => {
            let stats = policies::stats(name).ok_or_else(|| no_such_policy(name))?;
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
