//! Decisions as replies: a RESP2 array of integers, or a RESP3 map with named fields.

use crate::command::client_uses_resp3;
use crate::core::decision::Decision;
use crate::ffi::api;
use redis_module::Context;
use std::ffi::CStr;
use std::os::raw::c_long;

/// Replies `[allowed, limit, remaining, reset_after_ms, retry_after_ms]`, or in RESP3 a
/// map from those names to the same integers.
pub fn decision(ctx: &Context, decision: &Decision) {
    let values = decision.values();
    let resp3 = client_uses_resp3(ctx);
    // SAFETY: ctx.ctx is the live context of the running command.
    unsafe {
        if resp3 {
            api!(RedisModule_ReplyWithMap)(ctx.ctx, values.len() as c_long);
        } else {
            api!(RedisModule_ReplyWithArray)(ctx.ctx, values.len() as c_long);
        }
        for (value, name) in values.into_iter().zip(FIELD_NAMES) {
            if resp3 {
                api!(RedisModule_ReplyWithSimpleString)(ctx.ctx, name.as_ptr());
            }
            api!(RedisModule_ReplyWithLongLong)(ctx.ctx, value);
        }
    }
}

/// The RESP3 names of [`Decision::values`], as C strings for the reply API.
const FIELD_NAMES: [&CStr; 5] = [
    c"allowed",
    c"limit",
    c"remaining",
    c"reset_after_ms",
    c"retry_after_ms",
];
