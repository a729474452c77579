//! What the module needs to know about the server it runs in, read without calling a
//! command (an operator may have renamed `CONFIG` or `INFO` away).

use super::api::api;
use redis_module::Context;
use std::os::raw::c_int;

/// Whether the AOF is on (`aof_enabled` of `INFO persistence`, read through the module
/// API, which does not go through the command table). Unknown counts as on: the caller
/// then checks more, never less.
pub fn aof_enabled(ctx: &Context) -> bool {
    // SAFETY: ctx.ctx is the live context of the running command; the data is freed once.
    unsafe {
        let data = api!(RedisModule_GetServerInfo)(ctx.ctx, c"persistence".as_ptr());
        if data.is_null() {
            return true;
        }
        let mut failed: c_int = 0;
        let enabled =
            api!(RedisModule_ServerInfoGetFieldSigned)(data, c"aof_enabled".as_ptr(), &mut failed);
        api!(RedisModule_FreeServerInfo)(ctx.ctx, data);
        failed != 0 || enabled != 0
    }
}
