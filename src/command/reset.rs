//! `RL.RESET key`: forget a key's rate-limit state, or its leases (RL.ACQUIRE).

use super::{command_handler, Args, CommandError, CommandResult};
use crate::reply;
use crate::store::{Access, StoredKey};
use ratelimit_core::lease::is_lease;
use ratelimit_core::limiter::{is_state, LimiterError, Write};
use redis_module::Context;

command_handler!(rl_reset, run);

/// Deletes the key if it holds a rate-limit state (propagated as `DEL`); replies 1 if it
/// did, 0 if there was no key. Other values are refused, not deleted.
fn run(ctx: &Context, args: Args<'_>) -> CommandResult {
    let (2, Some(key_name)) = (args.len(), args.string(1)) else {
        return Err(CommandError::WrongArity);
    };
    let mut key = StoredKey::open(ctx, key_name, Access::Write);
    let ours = |bytes: &[u8]| is_state(bytes, key.expiry()) || is_lease(bytes);
    let deleted = match key.value()?.map(ours) {
        None => false,
        Some(true) => {
            key.apply(&Write::Delete)?;
            true
        }
        // The same refusal as RL.HIT's on a value this module did not write.
        Some(false) => return Err(LimiterError::NotOurs.into()),
    };
    reply::integer(ctx, i64::from(deleted));
    Ok(())
}
