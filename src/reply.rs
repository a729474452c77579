//! Decisions as replies: a RESP2 array of integers, or a RESP3 map with named fields.

use crate::ffi::api;
use ratelimit_core::decision::Decision;
use ratelimit_core::limiter::Outcome;
use redis_module::{raw, Context};
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

/// Whether the client speaks RESP3, and so gets maps instead of flat arrays.
fn client_uses_resp3(ctx: &Context) -> bool {
    // SAFETY: ctx.ctx is the live context of the running command.
    let flags = unsafe { api!(RedisModule_GetContextFlags)(ctx.ctx) };
    flags & raw::REDISMODULE_CTX_FLAGS_RESP3 as i32 != 0
}

/// Replies the binding decision: RESP2 `[allowed, limit, remaining, reset_after_ms,
/// retry_after_ms]`; RESP3 a map from those names to the same integers, plus `tiers`, an
/// array of one such map per tier, when there is more than one tier, and `shadow_denied`
/// (0 or 1) when `shadow_denied` is given (a call through a shadow policy).
pub fn outcome(ctx: &Context, outcome: &Outcome, shadow_denied: Option<bool>) {
    if !client_uses_resp3(ctx) {
        integers(ctx, &outcome.decision.values());
        return;
    }
    let with_tiers = outcome.tiers.len() > 1;
    let entries = 5 + c_long::from(with_tiers) + c_long::from(shadow_denied.is_some());
    // SAFETY: ctx.ctx is the live context of the running command.
    unsafe {
        api!(RedisModule_ReplyWithMap)(ctx.ctx, entries);
        decision_fields(ctx, &outcome.decision);
        if let Some(denied) = shadow_denied {
            api!(RedisModule_ReplyWithSimpleString)(ctx.ctx, c"shadow_denied".as_ptr());
            api!(RedisModule_ReplyWithLongLong)(ctx.ctx, i64::from(denied));
        }
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

/// Replies name/value pairs: a map in RESP3, a flat `[name, value, ...]` array in RESP2.
pub fn named_integers(ctx: &Context, pairs: &[(&CStr, i64)]) {
    let resp3 = client_uses_resp3(ctx);
    // SAFETY: ctx.ctx is the live context of the running command.
    unsafe {
        if resp3 {
            api!(RedisModule_ReplyWithMap)(ctx.ctx, pairs.len() as c_long);
        } else {
            api!(RedisModule_ReplyWithArray)(ctx.ctx, 2 * pairs.len() as c_long);
        }
        for (name, value) in pairs {
            api!(RedisModule_ReplyWithSimpleString)(ctx.ctx, name.as_ptr());
            api!(RedisModule_ReplyWithLongLong)(ctx.ctx, *value);
        }
    }
}

/// Replies an array of bulk strings.
pub fn bulk_strings<T: AsRef<[u8]>>(ctx: &Context, items: &[T]) {
    // SAFETY: ctx.ctx is the live context of the running command; each buffer is copied.
    unsafe {
        api!(RedisModule_ReplyWithArray)(ctx.ctx, items.len() as c_long);
        for item in items {
            let bytes = item.as_ref();
            api!(RedisModule_ReplyWithStringBuffer)(ctx.ctx, bytes.as_ptr().cast(), bytes.len());
        }
    }
}

/// Replies `+OK`.
pub fn ok(ctx: &Context) {
    // SAFETY: ctx.ctx is the live context of the running command.
    unsafe { api!(RedisModule_ReplyWithSimpleString)(ctx.ctx, c"OK".as_ptr()) };
}

/// Replies a null.
pub fn null(ctx: &Context) {
    // SAFETY: ctx.ctx is the live context of the running command.
    unsafe { api!(RedisModule_ReplyWithNull)(ctx.ctx) };
}

/// Replies one integer.
pub fn integer(ctx: &Context, value: i64) {
    // SAFETY: ctx.ctx is the live context of the running command.
    unsafe { api!(RedisModule_ReplyWithLongLong)(ctx.ctx, value) };
}
