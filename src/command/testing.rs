//! `RL.TESTING.PANIC`: a command that panics, registered only when the module is loaded
//! with the argument `enable-testing-commands`, so that the tests can prove on a real
//! server that a panicking handler answers an error instead of killing the server.

use redis_module::{decode_args, raw, Context, Status};
use std::os::raw::c_int;

/// Registers the testing commands.
pub fn register(ctx: &Context) -> Status {
    // SAFETY: called during module load with the load context.
    let created = unsafe {
        crate::ffi::api!(RedisModule_CreateCommand)(
            ctx.ctx,
            c"rl.testing.panic".as_ptr(),
            Some(panic_command),
            c"fast".as_ptr(),
            0,
            0,
            0,
        )
    };
    if created == raw::REDISMODULE_OK as c_int {
        Status::Ok
    } else {
        Status::Err
    }
}

extern "C" fn panic_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let args = decode_args(ctx, argv, argc);
    let _ = super::guarded(&context, args, |_, _| panic!("RL.TESTING.PANIC was called"));
    raw::REDISMODULE_OK as c_int
}
