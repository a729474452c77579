//! RL.ACQUIRE, RL.RELEASE, RL.RENEW and RL.LEASES: concurrency leases on one key.
//!
//! - `RL.ACQUIRE key max ttl [limit window ...] [ALGO a] [BURST b] [COST n] [ID id]` takes
//!   one of `max` slots for `ttl` (and counts the hit in the tiers, all or nothing).
//! - `RL.RELEASE key id`: 1 if that lease was held (and is now released), else 0.
//! - `RL.RENEW key id ttl`: 1 if that lease was held (it now ends `ttl` from now, or later
//!   if it already did), else 0.
//! - `RL.LEASES key max`: the held and free slots, read only (runs on replicas).
//!
//! The logic is `ratelimit_core::lease`; this file parses, reads the clock once, stores the
//! value the core returns (propagated as `SET key <value> PXAT <ms>` or `DEL key`, which
//! carry a generated id as it is) and replies.

use super::{command_handler, Args, CommandError, CommandResult};
use crate::server::clock;
use crate::store::{Access, StoredKey};
use crate::{config, reply};
use ratelimit_core::lease::args::{parse_acquire, parse_id, parse_max, parse_ttl, LeaseArgError};
use ratelimit_core::lease::{self, Acquire, LeaseError, LeaseId, GENERATED_ID_LEN};
use redis_module::Context;
use smallvec::SmallVec;

command_handler!(rl_acquire, acquire);
command_handler!(rl_release, release);
command_handler!(rl_renew, renew);
command_handler!(rl_leases, leases);

impl From<LeaseArgError> for CommandError {
    fn from(err: LeaseArgError) -> Self {
        match err {
            LeaseArgError::WrongArity => CommandError::WrongArity,
            other => CommandError::Message(other.message()),
        }
    }
}

impl From<LeaseError> for CommandError {
    fn from(err: LeaseError) -> Self {
        CommandError::Message(err.message().into())
    }
}

fn acquire(ctx: &Context, args: Args<'_>) -> CommandResult {
    if args.len() < 4 {
        return Err(CommandError::WrongArity);
    }
    let words: SmallVec<[&[u8]; 12]> = args.bytes_from(2).collect();
    let settings = config::settings();
    let parsed = parse_acquire(&words, &settings, config::max_leases())?;
    let generated;
    let id = match parsed.id {
        Some(id) => id,
        None => {
            generated = random_id()?;
            LeaseId::Raw(generated)
        }
    };
    let tiers = parsed.tiers.as_ref().map(|t| (&t.limits, t.cost));
    let request = Acquire {
        max: parsed.max,
        ttl_ms: parsed.ttl_ms,
        id,
        tiers,
    };
    let mut key = open(ctx, args, Access::Write)?;
    let now_ms = clock::now_ms();
    let acquired = lease::acquire(key.value()?, now_ms, &request)?;
    key.apply(&acquired.write)?;
    let shown = acquired.acquired.then(|| request.id.display());
    reply::lease_acquired(ctx, &acquired, shown.as_deref());
    Ok(())
}

fn release(ctx: &Context, args: Args<'_>) -> CommandResult {
    let (3, Some(id)) = (args.len(), args.bytes_from(2).next()) else {
        return Err(CommandError::WrongArity);
    };
    let id = parse_id(id)?;
    let mut key = open(ctx, args, Access::Write)?;
    let changed = lease::release(key.value()?, clock::now_ms(), &id)?;
    key.apply(&changed.write)?;
    reply::integer(ctx, i64::from(changed.held));
    Ok(())
}

fn renew(ctx: &Context, args: Args<'_>) -> CommandResult {
    let mut words = args.bytes_from(2);
    let (4, Some(id), Some(ttl)) = (args.len(), words.next(), words.next()) else {
        return Err(CommandError::WrongArity);
    };
    let id = parse_id(id)?;
    let ttl_ms = parse_ttl(ttl, &config::settings())?;
    let mut key = open(ctx, args, Access::Write)?;
    let changed = lease::renew(key.value()?, clock::now_ms(), &id, ttl_ms)?;
    key.apply(&changed.write)?;
    reply::integer(ctx, i64::from(changed.held));
    Ok(())
}

fn leases(ctx: &Context, args: Args<'_>) -> CommandResult {
    let (3, Some(max)) = (args.len(), args.bytes_from(2).next()) else {
        return Err(CommandError::WrongArity);
    };
    let max = parse_max(max, config::max_leases())?;
    let key = open(ctx, args, Access::Read)?;
    let held = lease::peek(key.value()?, clock::now_ms(), max)?;
    reply::leases_held(ctx, &held);
    Ok(())
}

fn open<'a>(
    ctx: &'a Context,
    args: Args<'a>,
    access: Access,
) -> Result<StoredKey<'a>, CommandError> {
    let name = args.string(1).ok_or(CommandError::WrongArity)?;
    Ok(StoredKey::open(ctx, name, access).exact_size())
}

/// 128 bits from the operating system's CSPRNG: unguessable, and unique in practice (a
/// repeat among held leases is refused as a duplicate id, never merged).
fn random_id() -> Result<[u8; GENERATED_ID_LEN], CommandError> {
    let mut id = [0u8; GENERATED_ID_LEN];
    getrandom::getrandom(&mut id).map_err(|_| {
        CommandError::Message("ERR cannot read random bytes for a lease id: give ID".into())
    })?;
    Ok(id)
}
