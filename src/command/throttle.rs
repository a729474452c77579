//! `CL.THROTTLE key max_burst count_per_period period [quantity]`: redis-cell's command,
//! argument- and reply-compatible, on this module's GCRA and its effects replication.

use super::limit::limiter_error;
use super::{arg_bytes, CommandError, CommandResult};
use crate::core::args::ArgError;
use crate::core::cell::{cell_reply, parse_throttle, ThrottleArgError};
use crate::core::limiter::{self, Action};
use crate::store::{Access, StoredKey};
use crate::{clock, reply};
use redis_module::{Context, RedisResult, RedisString};

/// CL.THROTTLE: replies `[limited, limit, remaining, retry_after_s, reset_after_s]`.
pub fn cl_throttle(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    super::guarded(ctx, args, run)
}

fn run(ctx: &Context, args: &[RedisString]) -> CommandResult {
    let [_, key_name, rest @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let rest: Vec<&[u8]> = rest.iter().map(arg_bytes).collect();
    let throttle = parse_throttle(&rest).map_err(|err| match err {
        ThrottleArgError::Common(ArgError::WrongArity) => CommandError::WrongArity,
        other => CommandError::Message(other.message()),
    })?;
    let (limits, action) = throttle.request();
    let access = match action {
        Action::Peek { .. } => Access::Read,
        _ => Access::Write,
    };
    let mut key = StoredKey::open(ctx, key_name, access);
    let stored = key.value()?;
    let now_ms = clock::now_ms();
    let outcome =
        limiter::run(&limits, action, stored, || key.expiry(), now_ms).map_err(limiter_error)?;
    key.apply(&outcome.write);
    reply::integers(ctx, &cell_reply(&outcome.decision));
    Ok(())
}
