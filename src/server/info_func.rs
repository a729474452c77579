//! The module's `INFO` section, registered in place of the crate's default.

use super::api::api;
use redis_module::{raw, Context, InfoContext};

/// Writes the module's INFO section.
pub trait InfoSource {
    /// Adds the section to `ctx`; `for_crash_report` when the server is writing a crash log.
    fn info(ctx: &InfoContext, for_crash_report: bool);
}

/// Registers `S` as the module's INFO section; called once at load.
pub fn register_info<S: InfoSource>(ctx: &Context) {
    // SAFETY: called during load with the load context; the callback is a plain function.
    unsafe { api!(RedisModule_RegisterInfoFunc)(ctx.ctx, Some(info_callback::<S>)) };
}

extern "C" fn info_callback<S: InfoSource>(
    ctx: *mut raw::RedisModuleInfoCtx,
    for_crash_report: std::os::raw::c_int,
) {
    S::info(&InfoContext::new(ctx), for_crash_report != 0);
}
