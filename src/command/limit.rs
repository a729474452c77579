//! RL.HIT, RL.PEEK and RL.REFUND: one argument grammar, one path through the limiter.
//!
//! `RL.HIT key limit window [limit window ...] [ALGO name] [BURST b] [COST n]` checks every
//! tier and counts in all or none; RL.PEEK answers the same without writing; RL.REFUND
//! gives back up to `COST` units.

use super::{arg_bytes, CommandError, CommandResult};
use crate::core::args::parse_limits;
use crate::core::limiter::{self, Action, LimiterError};
use crate::store::{Access, StoredKey};
use crate::{clock, reply};
use redis_module::{Context, RedisResult, RedisString};

/// RL.HIT: check and count.
pub fn rl_hit(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    super::guarded(ctx, args, |ctx, args| {
        run(ctx, args, |cost| Action::Hit { cost })
    })
}

/// RL.PEEK: what RL.HIT would answer, without writing (runs on replicas).
pub fn rl_peek(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    super::guarded(ctx, args, |ctx, args| {
        run(ctx, args, |cost| Action::Peek { cost })
    })
}

/// RL.REFUND: give back up to `COST` units counted earlier.
pub fn rl_refund(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    super::guarded(ctx, args, |ctx, args| {
        run(ctx, args, |amount| Action::Refund { amount })
    })
}

fn run(ctx: &Context, args: &[RedisString], action: fn(i64) -> Action) -> CommandResult {
    let [_, key_name, rest @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let rest: Vec<&[u8]> = rest.iter().map(arg_bytes).collect();
    let request = parse_limits(&rest)?;
    let action = action(request.cost);
    let access = match action {
        Action::Peek { .. } => Access::Read,
        _ => Access::Write,
    };
    let mut key = StoredKey::open(ctx, key_name, access);
    let stored = key.value()?;
    let now_ms = clock::now_ms();
    let outcome = limiter::run(&request.limits, action, stored, || key.expiry(), now_ms)
        .map_err(limiter_error)?;
    key.apply(&outcome.write);
    reply::outcome(ctx, &outcome);
    Ok(())
}

/// The error reply for a limiter failure.
pub fn limiter_error(err: LimiterError) -> CommandError {
    CommandError::Message(match err {
        LimiterError::NotOurs => crate::store::NOT_OURS.into(),
        LimiterError::OutOfRange => "ERR the server clock is out of the supported range".into(),
    })
}
