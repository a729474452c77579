//! RL.MHIT, RL.MPEEK and RL.MREFUND: several keys, each with its own rule and cost, in one
//! atomic call.
//!
//! `RL.MHIT numkeys key [key ...] SPEC rule [SPEC rule ...]` (grammar:
//! `ratelimit_core::args::parse_multi`) opens every key, decides every key with one clock
//! reading (`ratelimit_core::limiter::run_all`), and only then stores: every key's write
//! when all allow, none when one denies. Each write goes through `StoredKey::apply`, the
//! one path that stores and propagates, exactly as for RL.HIT.

use super::{command_handler, Args, CommandError, CommandResult};
use crate::policy::registry;
use crate::server::{clock, command};
use crate::store::{self, Access, StoredKey};
use crate::{config, metrics, reply};
use ratelimit_core::args::{parse_multi, printable_excerpt, KeyRule, Mode, MAX_KEYS};
use ratelimit_core::limiter::{run_all, KeyCall, LimiterError, Limits, MultiAction, MultiOutcome};
use redis_module::Context;
use smallvec::SmallVec;

command_handler!(rl_mhit, |ctx, args| run(ctx, args, MultiAction::Hit));
command_handler!(rl_mpeek, |ctx, args| run(ctx, args, MultiAction::Peek));
command_handler!(rl_mrefund, |ctx, args| run(ctx, args, MultiAction::Refund));

/// The argument index of the first key: after the name and `numkeys`.
const FIRST_KEY: usize = 2;

/// One key's rule once its policy, if any, is looked up.
struct Rule<'a> {
    limits: Limits,
    amount: i64,
    shadow: bool,
    /// The policy's name, for its counts.
    policy: Option<&'a [u8]>,
}

fn run(ctx: &Context, args: Args<'_>, action: MultiAction) -> CommandResult {
    if command::is_keys_position_request(ctx) {
        report_keys(ctx, args, action != MultiAction::Peek);
        return Ok(());
    }
    if args.len() < 2 {
        return Err(CommandError::WrongArity);
    }
    let call = parse_multi(args.bytes_from(1), &config::settings())?;
    let rules = resolve_rules(call.rules, &call.keys)?;
    let access = match action {
        MultiAction::Peek => Access::Read,
        MultiAction::Hit | MultiAction::Refund => Access::Write,
    };
    let mut keys = SmallVec::<[StoredKey; 4]>::with_capacity(rules.len());
    for index in 0..rules.len() {
        let name = args
            .string(FIRST_KEY + index)
            .ok_or(CommandError::WrongArity)?;
        keys.push(StoredKey::open(ctx, name, access));
    }
    // Every key's type is checked before anything is decided or written.
    let values = keys
        .iter()
        .map(StoredKey::value)
        .collect::<Result<SmallVec<[Option<&[u8]>; 4]>, _>>()?;
    let calls: SmallVec<[KeyCall; 4]> = rules
        .iter()
        .zip(&values)
        .map(|(rule, &stored)| KeyCall {
            limits: &rule.limits,
            amount: rule.amount,
            shadow: rule.shadow,
            stored,
        })
        .collect();
    let now_ms = clock::now_ms();
    let outcome = run_all(
        &calls,
        action,
        |i| keys.get(i).and_then(StoredKey::expiry),
        now_ms,
    )
    .map_err(|(index, err)| limiter_error(index, call.keys[index], err))?;
    drop(calls);
    drop(values);
    for (key, answer) in keys.iter_mut().zip(&outcome.keys) {
        key.apply(&answer.outcome.write)?;
    }
    if action == MultiAction::Hit {
        record_hits(ctx, args, &rules, &outcome);
    }
    let shadow = |index: usize| {
        let shadow = rules.get(index).is_some_and(|rule| rule.shadow);
        let answer = outcome.keys.get(index);
        (shadow && action != MultiAction::Refund).then(|| answer.is_some_and(|a| a.shadow_denied))
    };
    reply::several(ctx, &outcome, shadow);
    Ok(())
}

/// Each key's rule, its policy looked up; a policy that does not exist fails the call,
/// naming the key's SPEC.
fn resolve_rules<'a>(
    given: SmallVec<[KeyRule<'a>; 4]>,
    keys: &[&[u8]],
) -> Result<SmallVec<[Rule<'a>; 4]>, CommandError> {
    let mut rules = SmallVec::<[Rule; 4]>::with_capacity(given.len());
    for (index, rule) in given.into_iter().enumerate() {
        rules.push(match rule {
            KeyRule::Limits(given) => Rule {
                limits: given.limits,
                amount: given.cost,
                shadow: false,
                policy: None,
            },
            KeyRule::Policy { name, cost } => {
                let policy = registry::get(name).ok_or_else(|| {
                    let shown = printable_excerpt(name);
                    key_error(index, keys[index], &format!("no such policy '{shown}'"))
                })?;
                Rule {
                    limits: policy.limits,
                    amount: cost,
                    shadow: policy.mode == Mode::Shadow,
                    policy: Some(name),
                }
            }
        });
    }
    Ok(rules)
}

/// Counts an RL.MHIT's decision per key, and fires `rl.denied` on the denying keys when
/// `ratelimit.notify-denied` asks for it.
fn record_hits(ctx: &Context, args: Args<'_>, rules: &[Rule<'_>], outcome: &MultiOutcome) {
    for (rule, answer) in rules.iter().zip(&outcome.keys) {
        let algorithm = rule.limits.algorithm;
        metrics::record_hit(
            algorithm,
            outcome.allowed,
            answer.shadow_denied,
            rule.policy,
        );
    }
    if !outcome.allowed && config::notify_denied() {
        for (index, answer) in outcome.keys.iter().enumerate() {
            if let (false, Some(name)) = (
                answer.outcome.decision.allowed,
                args.string(FIRST_KEY + index),
            ) {
                store::notify_denied(ctx, name);
            }
        }
    }
}

/// Tells the server where the keys are: the `numkeys` arguments after `numkeys`, when it
/// is a valid count (else none: the call then fails on whichever node gets it), flagged
/// as the key spec flags them (read only for RL.MPEEK).
fn report_keys(ctx: &Context, args: Args<'_>, writes: bool) {
    let numkeys = args.bytes_from(1).next().and_then(|count| {
        if !count.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let count = std::str::from_utf8(count).ok()?.parse::<usize>().ok()?;
        (1..=MAX_KEYS).contains(&count).then_some(count)
    });
    if let Some(numkeys) = numkeys {
        command::report_keys(ctx, args, FIRST_KEY..FIRST_KEY + numkeys, writes);
    }
}

/// An error about key `index` (named `key`), as the SPEC errors of the grammar put it.
fn key_error(index: usize, key: &[u8], reason: &str) -> CommandError {
    let key = printable_excerpt(key);
    CommandError::Message(format!("ERR SPEC {index} (key '{key}'): {reason}").into())
}

fn limiter_error(index: usize, key: &[u8], err: LimiterError) -> CommandError {
    key_error(index, key, &err.to_string())
}
