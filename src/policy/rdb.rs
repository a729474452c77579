//! Policies in the RDB: saved as the auxiliary data of a module data type that has no keys.
//!
//! Servers that have `aux_save2` (Redis 7.2 and newer, Valkey) skip the auxiliary data when
//! there is no policy, so an RDB (or an AOF with its RDB preamble) written without policies
//! still loads on a server without the module. Redis 7.0 has only `aux_save`, which writes
//! its record into every RDB, and such an RDB needs the module to load; so there the
//! module saves policies only when loaded with `policies-in-rdb yes`, and refuses to define
//! policies otherwise (they would not survive a restart).
//!
//! Format (encoding version 1): the number of policies, then for each its name and the
//! arguments that define it (as `RL.POLICY GET` shows them), parsed again on load.

use super::registry;
use crate::config;
use crate::ffi::api;
use ratelimit_core::args::{parse_policy, policy_arguments, Settings};
use ratelimit_core::duration::LARGEST_WINDOW_MS;
use redis_module::raw::{self, RedisModuleIO};
use redis_module::Context;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

const ENCODING_VERSION: c_int = 1;

/// Whether policies can be defined: they are saved in the RDB on this server.
static PERSISTED: AtomicBool = AtomicBool::new(false);

/// Whether this server keeps policies across restarts (see the module docs).
pub fn policies_persist() -> bool {
    PERSISTED.load(Ordering::Relaxed)
}

/// Registers the data type that carries the policies; called once at load.
pub fn register(ctx: &Context, opted_in_on_7_0: bool) -> Result<(), String> {
    // aux_save2 came with Redis 7.2, as did CachedMicroseconds: its presence tells the API.
    // SAFETY: copies a function pointer the crate filled in at load.
    let has_aux_save2 = unsafe { raw::RedisModule_CachedMicroseconds }.is_some();
    if !has_aux_save2 && !opted_in_on_7_0 {
        return Ok(());
    }
    let mut methods = raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(no_value_load),
        rdb_save: Some(no_value_save),
        aof_rewrite: None,
        mem_usage: None,
        digest: None,
        free: Some(no_value_free),
        aux_load: Some(aux_load),
        aux_save: if has_aux_save2 { None } else { Some(aux_save) },
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: if has_aux_save2 { Some(aux_save) } else { None },
    };
    // SAFETY: called during load; the server copies the methods.
    let created = unsafe {
        api!(RedisModule_CreateDataType)(
            ctx.ctx,
            c"rl-policy".as_ptr(),
            ENCODING_VERSION,
            &mut methods,
        )
    };
    if created.is_null() {
        return Err("cannot create the data type that saves policies".into());
    }
    PERSISTED.store(true, Ordering::Relaxed);
    Ok(())
}

/// Empties the registry when a whole dataset starts loading (an RDB at startup or by
/// `DEBUG RELOAD`, a full sync from a primary, an AOF): the policies are then exactly those
/// it holds. Without this, an RDB without policies — which carries no record at all where
/// `aux_save2` leaves it out — would leave a replica with policies its primary lacks.
pub fn subscribe_to_loading(ctx: &Context) -> Result<(), String> {
    let loading = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_LOADING,
        dataver: 1,
    };
    // SAFETY: called during load with the load context; the callback is a plain function.
    let status =
        unsafe { api!(RedisModule_SubscribeToServerEvent)(ctx.ctx, loading, Some(on_loading)) };
    if status == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err("cannot subscribe to loading events".into())
    }
}

extern "C" fn on_loading(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    let starts = [
        raw::REDISMODULE_SUBEVENT_LOADING_RDB_START,
        raw::REDISMODULE_SUBEVENT_LOADING_AOF_START,
        raw::REDISMODULE_SUBEVENT_LOADING_REPL_START,
    ];
    if starts.contains(&subevent) {
        let _ = std::panic::catch_unwind(|| registry::replace_all(Vec::new()));
    }
}

/// Saves every policy; writes nothing when there is none (with `aux_save2` the server then
/// leaves the record out).
///
/// Like every callback, under the panic guard: a panic must not unwind into the server.
/// Everything that could panic (reading the registry, spelling each definition) runs
/// before the first byte is written, so a panic leaves a record that still loads: none
/// where `aux_save2` lets the module leave it out, else an empty one. Either way the RDB
/// then holds no policies, and the panic hook has logged why.
extern "C" fn aux_save(rdb: *mut RedisModuleIO, _when: c_int) {
    let prepared = std::panic::catch_unwind(prepare_save);
    // SAFETY: copies a function pointer the crate filled in at load (see `register`).
    let has_aux_save2 = unsafe { raw::RedisModule_CachedMicroseconds }.is_some();
    let all = match prepared {
        Ok(all) => all,
        Err(_) => {
            redis_module::logging::log_warning(
                "ratelimit: saving the policies failed (see the panic above); this RDB holds none",
            );
            Vec::new()
        }
    };
    if all.is_empty() && has_aux_save2 {
        return;
    }
    raw::save_unsigned(rdb, all.len() as u64);
    for (name, args) in all {
        raw::save_slice(rdb, &name);
        raw::save_unsigned(rdb, args.len() as u64);
        for arg in args {
            raw::save_slice(rdb, arg.as_bytes());
        }
    }
}

/// Set by `RL.TESTING.PANIC-IN-SAVE` (testing commands only).
static PANIC_IN_NEXT_SAVE: AtomicBool = AtomicBool::new(false);

/// Makes the next save of the policies panic (see `command::testing`).
pub fn panic_in_next_save() {
    PANIC_IN_NEXT_SAVE.store(true, Ordering::Relaxed);
}

/// Each policy's name and the arguments that define it, ready to write.
fn prepare_save() -> Vec<(Vec<u8>, Vec<String>)> {
    if PANIC_IN_NEXT_SAVE.swap(false, Ordering::Relaxed) {
        panic!("RL.TESTING.PANIC-IN-SAVE: saving the policies panics");
    }
    registry::all()
        .into_iter()
        .map(|(name, definition)| (name, policy_arguments(&definition)))
        .collect()
}

/// Replaces the policies with the RDB's.
extern "C" fn aux_load(rdb: *mut RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    let loaded = std::panic::catch_unwind(|| load_all(rdb, encver));
    match loaded {
        Ok(Some(all)) => {
            registry::replace_all(all);
            raw::REDISMODULE_OK as c_int
        }
        _ => raw::REDISMODULE_ERR as c_int,
    }
}

fn load_all(
    rdb: *mut RedisModuleIO,
    encver: c_int,
) -> Option<Vec<(Vec<u8>, ratelimit_core::args::PolicyArgs)>> {
    if encver > ENCODING_VERSION {
        return None;
    }
    // What was saved is obeyed whatever the local configs.
    let settings = Settings {
        max_window_ms: LARGEST_WINDOW_MS,
        max_log_limit: config::LARGEST_MAX_LOG_LIMIT,
        ..config::settings()
    };
    let count = raw::load_unsigned(rdb).ok()?;
    let mut all = Vec::new();
    for _ in 0..count {
        let name = raw::load_string_buffer(rdb).ok()?.as_ref().to_vec();
        let argc = raw::load_unsigned(rdb).ok()?;
        let mut args = Vec::new();
        for _ in 0..argc {
            args.push(raw::load_string_buffer(rdb).ok()?.as_ref().to_vec());
        }
        let definition = parse_policy(args.iter().map(Vec::as_slice), &settings).ok()?;
        all.push((name, definition));
    }
    Some(all)
}

// The type holds no keys; these are never called but the server wants them set.
extern "C" fn no_value_load(_rdb: *mut RedisModuleIO, _encver: c_int) -> *mut c_void {
    std::ptr::null_mut()
}
extern "C" fn no_value_save(_rdb: *mut RedisModuleIO, _value: *mut c_void) {}
extern "C" fn no_value_free(_value: *mut c_void) {}
