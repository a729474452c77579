//! `RL.RESET key`: forget a key's rate-limit state.

use super::{CommandError, CommandResult};
use crate::core::encoding::classify;
use crate::core::limiter::Write;
use crate::reply;
use crate::store::{Access, StoredKey};
use redis_module::{Context, RedisResult, RedisString};

/// RL.RESET: deletes the key if it holds a rate-limit state (propagated as `DEL`);
/// replies 1 if it did, 0 if there was no key. Other values are refused, not deleted.
pub fn rl_reset(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    super::guarded(ctx, args, run)
}

fn run(ctx: &Context, args: &[RedisString]) -> CommandResult {
    let [_, key_name] = args else {
        return Err(CommandError::WrongArity);
    };
    let mut key = StoredKey::open(ctx, key_name, Access::Write);
    let ours = key.value()?.map(|bytes| classify(bytes).is_some());
    let deleted = match ours {
        None => false,
        Some(true) => {
            key.apply(&Write::Delete);
            true
        }
        Some(false) => return Err(CommandError::Message(crate::store::NOT_OURS.into())),
    };
    reply::integer(ctx, i64::from(deleted));
    Ok(())
}
