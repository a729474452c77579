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

/// Whether a write made now could reach a replica, as far as `INFO replication` tells: this
/// server is a replica, has replicas, or keeps a replication backlog (which a replica that
/// attached earlier can resynchronise from). Unknown counts as yes.
pub fn replication_may_listen(ctx: &Context) -> bool {
    // SAFETY: ctx.ctx is a live context (of a command or an event); the data is freed once.
    unsafe {
        let data = api!(RedisModule_GetServerInfo)(ctx.ctx, c"replication".as_ptr());
        if data.is_null() {
            return true;
        }
        let mut listens = false;
        for field in [c"connected_slaves", c"repl_backlog_active"] {
            let mut failed: c_int = 0;
            let value =
                api!(RedisModule_ServerInfoGetFieldSigned)(data, field.as_ptr(), &mut failed);
            listens |= failed != 0 || value != 0;
        }
        let role = api!(RedisModule_ServerInfoGetFieldC)(data, c"role".as_ptr());
        listens |= role.is_null() || std::ffi::CStr::from_ptr(role) != c"master";
        api!(RedisModule_FreeServerInfo)(ctx.ctx, data);
        listens
    }
}
