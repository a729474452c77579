//! RL.HIT, RL.PEEK and RL.REFUND: one argument grammar, one path through the limiter.
//!
//! `RL.HIT key limit window [limit window ...] [ALGO name] [BURST b] [COST n]` checks every
//! tier and counts in all or none; RL.PEEK answers the same without writing; RL.REFUND
//! gives back up to `COST` units.

use super::{command_handler, Args, CommandError, CommandResult};
use crate::policy::command::no_such_policy;
use crate::policy::registry;
use crate::server::clock;
use crate::store::{self, Access, StoredKey};
use crate::{config, metrics, reply};
use ratelimit_core::args::{parse_limits, parse_policy_call, Mode};
use ratelimit_core::lease::is_lease;
use ratelimit_core::limiter::{self, Action, Limits, Outcome};
use redis_module::Context;

command_handler!(rl_hit, |ctx, args| run(ctx, args, |cost| Action::Hit {
    cost
}));
command_handler!(rl_peek, |ctx, args| run(ctx, args, |cost| Action::Peek {
    cost
}));
command_handler!(rl_refund, |ctx, args| run(ctx, args, |amount| {
    Action::Refund { amount }
}));

fn run(ctx: &Context, args: Args<'_>, action: fn(i64) -> Action) -> CommandResult {
    if args.len() < 2 {
        return Err(CommandError::WrongArity);
    }
    if let Some(call) = parse_policy_call(args.bytes_from(2)) {
        let (name, cost) = call?;
        return run_policy(ctx, args, name, action(cost));
    }
    let request = parse_limits(args.bytes_from(2), &config::settings())?;
    let action = action(request.cost);
    let outcome = decide(ctx, args, &request.limits, action)?;
    if let Action::Hit { .. } = action {
        metrics::record_hit(
            request.limits.algorithm,
            outcome.decision.allowed,
            false,
            None,
        );
    }
    reply::outcome(ctx, &outcome, None);
    Ok(())
}

/// A call that names a policy: its rule, and in shadow mode an answer that never denies
/// but says (RESP3 `shadow_denied`; RESP2: `allowed` 1 with a `retry_after_ms` other than
/// 0) what enforcing would have done. A denied hit writes nothing in either mode.
fn run_policy(ctx: &Context, args: Args<'_>, name: &[u8], action: Action) -> CommandResult {
    let policy = registry::get(name).ok_or_else(|| no_such_policy(name))?;
    let mut outcome = decide(ctx, args, &policy.limits, action)?;
    let shadow = policy.mode == Mode::Shadow;
    let refund = matches!(action, Action::Refund { .. });
    let shadow_denied = shadow && !refund && !outcome.decision.allowed;
    if shadow_denied {
        outcome.decision.allowed = true;
    }
    if let Action::Hit { .. } = action {
        let allowed = outcome.decision.allowed;
        metrics::record_hit(policy.limits.algorithm, allowed, shadow_denied, Some(name));
    }
    reply::outcome(ctx, &outcome, (shadow && !refund).then_some(shadow_denied));
    Ok(())
}

/// Runs `action` on the key at argument 1: load, decide with the server's clock, store
/// and propagate the change. Shared by every command that goes through the limiter.
pub fn decide(
    ctx: &Context,
    args: Args<'_>,
    limits: &Limits,
    action: Action,
) -> Result<Outcome, CommandError> {
    let key_name = args.string(1).ok_or(CommandError::WrongArity)?;
    let access = match action {
        Action::Peek { .. } => Access::Read,
        _ => Access::Write,
    };
    let mut key = StoredKey::open(ctx, key_name, access);
    let stored = key.value()?;
    let now_ms = clock::now_ms();
    let outcome = limiter::run(limits, action, stored, || key.expiry(), now_ms).map_err(|err| {
        if stored.is_some_and(is_lease) {
            return CommandError::Message(LEASES_NOT_STATE.into());
        }
        CommandError::from(err)
    })?;
    key.apply(&outcome.write)?;
    if matches!(action, Action::Hit { .. }) && !outcome.decision.allowed && config::notify_denied()
    {
        store::notify_denied(ctx, key_name);
    }
    Ok(outcome)
}

/// The error for RL.HIT and its kin on a key that holds leases.
pub(crate) const LEASES_NOT_STATE: &str =
    "ERR key holds leases (RL.ACQUIRE), not a rate-limit state: use RL.LEASES to read it";
