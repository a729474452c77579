//! RL.TAKE, the partial grant: `RL.TAKE key limit window [limit window ...] [ALGO name]
//! [BURST b] [TZ zone] [ANCHOR day] UPTO n` (or `RL.TAKE key POLICY name UPTO n`) counts as
//! many units as every tier allows, at most `n`, and answers how many. Unused units go back
//! with RL.REFUND and `COST`, into the same window.

use super::limit::LEASES_NOT_STATE;
use super::{command_handler, Args, CommandError, CommandResult};
use crate::policy::command::no_such_policy;
use crate::policy::registry;
use crate::server::clock;
use crate::store::{self, Access, StoredKey};
use crate::{config, metrics, reply};
use ratelimit_core::args::{parse_take, Mode, TakeRule};
use ratelimit_core::lease::is_lease;
use ratelimit_core::limiter::{self, Grant, Limits};
use redis_module::Context;

command_handler!(rl_take, take);

fn take(ctx: &Context, args: Args<'_>) -> CommandResult {
    if args.len() < 2 {
        return Err(CommandError::WrongArity);
    }
    let request = parse_take(args.bytes_from(2), &config::settings())?;
    match request.rule {
        TakeRule::Limits(limits) => {
            let grant = decide(ctx, args, &limits, request.upto)?;
            metrics::record_hit(limits.algorithm, grant.granted > 0, false, None);
            reply::grant(ctx, &grant.outcome, grant.granted, None);
        }
        TakeRule::Policy(name) => {
            let policy = registry::get(name).ok_or_else(|| no_such_policy(name))?;
            let mut grant = decide(ctx, args, &policy.limits, request.upto)?;
            // A shadow policy never denies: it answers the whole `n` as granted, says
            // whether enforcing would have granted less, and counts only what enforcing
            // would have, as a shadow RL.HIT counts nothing it would deny.
            let shadow = policy.mode == Mode::Shadow;
            let shadow_denied = shadow && grant.granted < request.upto;
            if shadow_denied {
                grant.granted = request.upto;
                grant.outcome.decision.allowed = true;
            }
            let allowed = grant.outcome.decision.allowed;
            metrics::record_hit(policy.limits.algorithm, allowed, shadow_denied, Some(name));
            reply::grant(
                ctx,
                &grant.outcome,
                grant.granted,
                shadow.then_some(shadow_denied),
            );
        }
    }
    Ok(())
}

/// Counts up to `upto` units on the key at argument 1: load, decide with the server's
/// clock, store and propagate the change, as `limit::decide` does for RL.HIT. What is
/// stored and propagated is what `RL.HIT key ... COST granted` would store; a grant of 0
/// writes nothing (but for a renewal, as a denied RL.HIT).
fn decide(
    ctx: &Context,
    args: Args<'_>,
    limits: &Limits,
    upto: i64,
) -> Result<Grant, CommandError> {
    let key_name = args.string(1).ok_or(CommandError::WrongArity)?;
    let mut key = StoredKey::open(ctx, key_name, Access::Write);
    let stored = key.value()?;
    let now_ms = clock::now_ms();
    let grant = limiter::take(limits, upto, stored, || key.expiry(), now_ms).map_err(|err| {
        if stored.is_some_and(is_lease) {
            return CommandError::Message(LEASES_NOT_STATE.into());
        }
        CommandError::from(err)
    })?;
    key.apply(&grant.outcome.write)?;
    if grant.granted == 0 && config::notify_denied() {
        store::notify_denied(ctx, key_name);
    }
    Ok(grant)
}
