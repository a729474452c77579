//! RL.HIT, RL.PEEK and RL.REFUND: one argument grammar, one path through the limiter.
//!
//! `RL.HIT key limit window [limit window ...] [ALGO name] [BURST b] [COST n]` checks every
//! tier and counts in all or none; RL.PEEK answers the same without writing; RL.REFUND
//! gives back up to `COST` units.

use super::{command_handler, Args, CommandError, CommandResult};
use crate::core::args::parse_limits;
use crate::core::limiter::{self, Action, LimiterError, Limits, Outcome};
use crate::store::{Access, StoredKey};
use crate::{clock, config, metrics, reply};
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
    let request = parse_limits(args.bytes_from(2), &config::settings())?;
    let outcome = decide(ctx, args, &request.limits, action(request.cost))?;
    reply::outcome(ctx, &outcome);
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
    let outcome =
        limiter::run(limits, action, stored, || key.expiry(), now_ms).map_err(limiter_error)?;
    key.apply(&outcome.write);
    if let Action::Hit { .. } = action {
        metrics::record_hit(limits.algorithm, outcome.decision.allowed);
    }
    Ok(outcome)
}

fn limiter_error(err: LimiterError) -> CommandError {
    CommandError::Message(match err {
        LimiterError::NotOurs => crate::store::NOT_OURS.into(),
        LimiterError::OutOfRange => "ERR the server clock is out of the supported range".into(),
    })
}
