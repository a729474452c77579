//! Decisions as replies: a RESP2 array of integers, or a RESP3 map with named fields.

use crate::command::client_uses_resp3;
use crate::core::decision::Decision;
use crate::core::limiter::Outcome;
use crate::ffi::api;
use redis_module::Context;
use std::ffi::CStr;
use std::os::raw::c_long;

/// The RESP3 names of [`Decision::values`], as C strings for the reply API.
const FIELD_NAMES: [&CStr; 5] = [
    c"allowed",
    c"limit",
    c"remaining",
    c"reset_after_ms",
    c"retry_after_ms",
];

/// Replies the binding decision: RESP2 `[allowed, limit, remaining, reset_after_ms,
/// retry_after_ms]`; RESP3 a map from those names to the same integers, plus `tiers`, an
/// array of one such map per tier, when there is more than one tier.
pub fn outcome(ctx: &Context, outcome: &Outcome) {
    if !client_uses_resp3(ctx) {
        integers(ctx, &outcome.decision.values());
        return;
    }
    let with_tiers = outcome.tiers.len() > 1;
    // SAFETY: ctx.ctx is the live context of the running command.
    unsafe {
        api!(RedisModule_ReplyWithMap)(ctx.ctx, 5 + c_long::from(with_tiers));
        decision_fields(ctx, &outcome.decision);
        if with_tiers {
            api!(RedisModule_ReplyWithSimpleString)(ctx.ctx, c"tiers".as_ptr());
            api!(RedisModule_ReplyWithArray)(ctx.ctx, outcome.tiers.len() as c_long);
            for tier in &outcome.tiers {
                api!(RedisModule_ReplyWithMap)(ctx.ctx, 5);
                decision_fields(ctx, tier);
            }
        }
    }
}

/// The five name/value pairs of a decision, inside a map already opened.
fn decision_fields(ctx: &Context, decision: &Decision) {
    for (value, name) in decision.values().into_iter().zip(FIELD_NAMES) {
        // SAFETY: ctx.ctx is the live context of the running command.
        unsafe {
            api!(RedisModule_ReplyWithSimpleString)(ctx.ctx, name.as_ptr());
            api!(RedisModule_ReplyWithLongLong)(ctx.ctx, value);
        }
    }
}

/// Replies an array of integers (the same in RESP2 and RESP3).
pub fn integers(ctx: &Context, values: &[i64]) {
    // SAFETY: ctx.ctx is the live context of the running command.
    unsafe {
        api!(RedisModule_ReplyWithArray)(ctx.ctx, values.len() as c_long);
        for value in values {
            api!(RedisModule_ReplyWithLongLong)(ctx.ctx, *value);
        }
    }
}

/// Replies one integer.
pub fn integer(ctx: &Context, value: i64) {
    // SAFETY: ctx.ctx is the live context of the running command.
    unsafe { api!(RedisModule_ReplyWithLongLong)(ctx.ctx, value) };
}
