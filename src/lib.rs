//! redis-ratelimit: rate limiting as one atomic server-side command for Redis and Valkey.
//!
//! This file only registers things: the commands table, the allocator and the load-time
//! checks. The logic lives in `core` (pure) under `command` (handlers) and `store`.

mod clock;
mod command;
mod core;
mod ffi;
mod reply;
mod store;

use redis_module::{redis_module, Context, ModuleOptions, RedisString, Status};

// The Redis allocator is only there inside a server; unit tests use the system one.
#[cfg(not(test))]
use redis_module::alloc::RedisAlloc as ModuleAlloc;
#[cfg(test)]
use std::alloc::System as ModuleAlloc;

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let missing = ffi::missing_apis();
    if !missing.is_empty() {
        ctx.log_warning(&format!(
            "ratelimit: this server lacks module API functions: {}; Redis 7.0 or newer (or \
             Valkey 7.2 or newer) is required",
            missing.join(", ")
        ));
        return Status::Err;
    }
    // Keys are signalled as modified explicitly, only when a command really wrote them,
    // so that a denied hit does not abort another client's WATCH.
    ctx.set_module_options(ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED);
    install_panic_hook();
    let testing = args.iter().any(|arg| {
        arg.as_slice()
            .eq_ignore_ascii_case(b"enable-testing-commands")
    });
    if testing {
        return command::testing::register(ctx);
    }
    Status::Ok
}

/// Sends panic messages to the server log: a daemonized server has no stderr to read.
/// Handlers catch the unwind itself (see `command::guarded`).
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        redis_module::logging::log_warning(format!("ratelimit: panic: {info}"));
        previous(info);
    }));
}

redis_module! {
    name: "ratelimit",
    version: 1,
    allocator: (ModuleAlloc, ModuleAlloc),
    data_types: [],
    init: init,
    commands: [
        ["RL.HIT", command::limit::rl_hit, "write deny-oom fast", 1, 1, 1, ""],
        ["RL.PEEK", command::limit::rl_peek, "readonly fast", 1, 1, 1, ""],
        ["RL.REFUND", command::limit::rl_refund, "write deny-oom fast", 1, 1, 1, ""],
        ["RL.RESET", command::reset::rl_reset, "write fast", 1, 1, 1, ""],
        ["CL.THROTTLE", command::throttle::cl_throttle, "write deny-oom fast", 1, 1, 1, ""],
    ],
}
