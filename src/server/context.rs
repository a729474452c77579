//! What a command asks of its context besides keys and replies: its flags, signalling a
//! key as modified, keyspace events and propagation.

use super::api::api;
use super::string::{ServerStr, ServerString};
use redis_module::raw;
use redis_module::Context;
use std::ffi::CStr;
use std::os::raw::c_int;

/// The context's flags, read once and asked by name. The `REDISMODULE_CTX_FLAGS_*` bits
/// stay in this module; the rest of the crate asks the questions below, in its own terms.
#[derive(Debug, Clone, Copy)]
pub struct ContextFlags(c_int);

impl ContextFlags {
    /// The flags of the running command's context.
    #[inline]
    pub fn of(ctx: &Context) -> Self {
        // SAFETY: ctx is the live context of the running command.
        ContextFlags(unsafe { api!(RedisModule_GetContextFlags)(ctx.ctx) })
    }

    /// The command comes from this server's primary (the replication stream) or from the
    /// AOF being loaded.
    #[inline]
    pub fn replicated_or_loading(self) -> bool {
        self.any(raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING)
    }

    /// This server is a replica that refuses writes from its clients (`replica-read-only`).
    #[inline]
    pub fn read_only_replica(self) -> bool {
        self.all(raw::REDISMODULE_CTX_FLAGS_SLAVE | raw::REDISMODULE_CTX_FLAGS_READONLY)
    }

    /// The AOF is on or being turned on (`aof_state` is not off: the server feeds it).
    #[inline]
    pub fn aof_on(self) -> bool {
        self.any(raw::REDISMODULE_CTX_FLAGS_AOF)
    }

    fn any(self, bits: u32) -> bool {
        self.0 & bits as c_int != 0
    }

    fn all(self, bits: u32) -> bool {
        self.0 & bits as c_int == bits as c_int
    }
}

/// The classes of keyspace events the module fires (`REDISMODULE_NOTIFY_*`): a client
/// receives an event when `notify-keyspace-events` enables its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventClass {
    /// Class `g`, the generic commands' (`DEL`, `EXPIRE`, ...): the module's own events.
    Generic,
}

impl EventClass {
    fn bits(self) -> c_int {
        match self {
            EventClass::Generic => raw::REDISMODULE_NOTIFY_GENERIC as c_int,
        }
    }
}

/// Signals `key` as modified (for WATCH and client-side caching).
#[inline]
pub fn signal_modified(ctx: &Context, key: ServerStr<'_>) {
    // SAFETY: ctx is the live context of the running command; key is live for the call.
    unsafe { api!(RedisModule_SignalModifiedKey)(ctx.ctx, key.as_ptr()) };
}

/// Fires the keyspace event `event` of class `class` on `key`.
#[inline]
pub fn notify_keyspace_event(ctx: &Context, class: EventClass, event: &CStr, key: ServerStr<'_>) {
    let class = class.bits();
    // SAFETY: ctx is the live context of the running command; event and key are live for
    // the call, and the server copies what it keeps.
    unsafe { api!(RedisModule_NotifyKeyspaceEvent)(ctx.ctx, class, event.as_ptr(), key.as_ptr()) };
}

/// Propagates `command` with one argument; whether the server accepted it.
#[inline]
pub fn replicate1(ctx: &Context, command: &CStr, arg: ServerStr<'_>) -> bool {
    // SAFETY: the format `s` takes one live server string, retained by the server.
    let status = unsafe {
        api!(RedisModule_Replicate)(ctx.ctx, command.as_ptr(), c"s".as_ptr(), arg.as_ptr())
    };
    status == raw::REDISMODULE_OK as c_int
}

/// Propagates `command` with two arguments; whether the server accepted it.
#[inline]
pub fn replicate2(ctx: &Context, command: &CStr, args: [ServerStr<'_>; 2]) -> bool {
    let [a, b] = args;
    // SAFETY: the format `ss` takes two live server strings, each retained by the server.
    let status = unsafe {
        api!(RedisModule_Replicate)(
            ctx.ctx,
            command.as_ptr(),
            c"ss".as_ptr(),
            a.as_ptr(),
            b.as_ptr(),
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

/// Propagates `command` with three arguments; whether the server accepted it.
#[inline]
pub fn replicate3(ctx: &Context, command: &CStr, args: [ServerStr<'_>; 3]) -> bool {
    let [a, b, c] = args;
    // SAFETY: the format `sss` takes three live server strings, each retained by the
    // server.
    let status = unsafe {
        api!(RedisModule_Replicate)(
            ctx.ctx,
            command.as_ptr(),
            c"sss".as_ptr(),
            a.as_ptr(),
            b.as_ptr(),
            c.as_ptr(),
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

/// Propagates `command` with four arguments; whether the server accepted it.
#[inline]
pub fn replicate4(ctx: &Context, command: &CStr, args: [ServerStr<'_>; 4]) -> bool {
    let [a, b, c, d] = args;
    // SAFETY: the format `ssss` takes four live server strings, each retained by the
    // server (a reference-count increment, no copy).
    let status = unsafe {
        api!(RedisModule_Replicate)(
            ctx.ctx,
            command.as_ptr(),
            c"ssss".as_ptr(),
            a.as_ptr(),
            b.as_ptr(),
            c.as_ptr(),
            d.as_ptr(),
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

/// Propagates `command` with the arguments `args`; whether the server accepted it.
pub fn replicate_all(ctx: &Context, command: &CStr, args: &[ServerString]) -> bool {
    // SAFETY: the format `v` takes an array of live server strings and its length;
    // ServerString is one string pointer (repr(transparent)), and the server only reads
    // the array and retains the strings it keeps.
    let status = unsafe {
        api!(RedisModule_Replicate)(
            ctx.ctx,
            command.as_ptr(),
            c"v".as_ptr(),
            args.as_ptr().cast::<*mut raw::RedisModuleString>(),
            args.len(),
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

/// Counts the running command's write as one change to the dataset (what the server's
/// save points, `save <seconds> <changes>`, count), without propagating anything: for a
/// write that nothing can receive (see `crate::listeners`).
///
/// This is `RedisModule_Replicate` with the flags `A` and `R`, which exclude the AOF and
/// the replicas: the server counts the change and propagates nothing, whatever listens.
/// (Handing on the command as it was called would be cheaper, but the `RL.*` command reads
/// the clock, so it must never reach a replica or the AOF: only its effects do.) The server
/// still looks `SET` up by name, which is most of what is left of the cost this saves.
#[inline]
pub fn count_change_unpropagated(ctx: &Context) -> bool {
    // SAFETY: the format `AR` takes no argument; the command name is a live C string.
    let status = unsafe { api!(RedisModule_Replicate)(ctx.ctx, c"SET".as_ptr(), c"AR".as_ptr()) };
    status == raw::REDISMODULE_OK as c_int
}
