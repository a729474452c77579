//! `CL.THROTTLE key max_burst count_per_period period [quantity]`: redis-cell's command,
//! argument- and reply-compatible, on this module's GCRA and its effects replication.

use super::limit::decide;
use super::{command_handler, Args, CommandError, CommandResult};
use crate::{metrics, reply};
use ratelimit_core::args::ArgError;
use ratelimit_core::cell::{cell_reply, parse_throttle, ThrottleArgError};
use ratelimit_core::limiter::Action;
use redis_module::Context;
use smallvec::SmallVec;

command_handler!(cl_throttle, run);

/// Replies `[limited, limit, remaining, retry_after_s, reset_after_s]`.
fn run(ctx: &Context, args: Args<'_>) -> CommandResult {
    if args.len() < 2 {
        return Err(CommandError::WrongArity);
    }
    let rest: SmallVec<[&[u8]; 4]> = args.bytes_from(2).collect();
    let throttle = parse_throttle(&rest).map_err(|err| match err {
        ThrottleArgError::Common(ArgError::WrongArity) => CommandError::WrongArity,
        other => CommandError::Message(other.message()),
    })?;
    let (limits, action) = throttle.request();
    let outcome = decide(ctx, args, &limits, action)?;
    if let Action::Hit { .. } = action {
        metrics::record_hit(limits.algorithm, outcome.decision.allowed, false, None);
    }
    reply::integers(ctx, &cell_reply(&outcome.decision));
    Ok(())
}
