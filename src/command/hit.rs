//! `RL.HIT key limit window [COST n]`: check and, when allowed, count, in one step.

use super::{arg_bytes, CommandError, CommandResult};
use crate::core::algorithm::Algorithm;
use crate::core::args::parse_hit;
use crate::core::fixed_window::Fixed;
use crate::{clock, reply, store};
use redis_module::{Context, RedisResult, RedisString};

/// The entry point registered in the commands table.
pub fn rl_hit(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    super::guarded(ctx, args, run)
}

fn run(ctx: &Context, args: &[RedisString]) -> CommandResult {
    let [_, key_name, rest @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let rest: Vec<&[u8]> = rest.iter().map(arg_bytes).collect();
    let request = parse_hit(&rest)?;

    let key = store::WindowKey::open(ctx, key_name);
    let stored = key.read()?;
    let now_ms = clock::now_ms();
    let hit =
        Fixed::check(stored.as_ref(), now_ms, &request.quota, request.cost).map_err(|_| {
            CommandError::Message("ERR the server clock is out of the supported range".into())
        })?;
    if let Some(new_state) = hit.charged {
        key.write(stored, new_state);
    }
    reply::decision(ctx, &hit.decision);
    Ok(())
}
