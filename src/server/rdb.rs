//! Module data in the RDB: a data type that holds no keys and carries the module's own
//! record as its auxiliary data, read and written through typed handles; and the event
//! that a whole dataset starts loading.

use super::api::api;
use redis_module::raw::{self, RedisModuleIO};
use redis_module::Context;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};

/// The RDB being written, during an `aux_save` callback.
pub struct RdbWriter<'a> {
    io: *mut RedisModuleIO,
    _save: PhantomData<&'a mut RedisModuleIO>,
}

impl RdbWriter<'_> {
    /// Writes an unsigned integer.
    pub fn unsigned(&mut self, value: u64) {
        raw::save_unsigned(self.io, value);
    }

    /// Writes a byte string.
    pub fn bytes(&mut self, bytes: &[u8]) {
        raw::save_slice(self.io, bytes);
    }
}

/// The RDB being read, during an `aux_load` callback. `None` from a read: an I/O error
/// (the module loads with `HANDLE_IO_ERRORS`).
pub struct RdbReader<'a> {
    io: *mut RedisModuleIO,
    _load: PhantomData<&'a mut RedisModuleIO>,
}

impl RdbReader<'_> {
    /// Reads an unsigned integer.
    pub fn unsigned(&mut self) -> Option<u64> {
        raw::load_unsigned(self.io).ok()
    }

    /// Reads a byte string.
    pub fn bytes(&mut self) -> Option<Vec<u8>> {
        Some(raw::load_string_buffer(self.io).ok()?.as_ref().to_vec())
    }
}

/// The module's own record in the RDB.
pub trait AuxRecord {
    /// Writes the record (nothing at all, where the server has `aux_save2`, leaves it out).
    fn save(rdb: &mut RdbWriter<'_>);
    /// Reads a record of encoding version `encver`; whether it loaded.
    fn load(rdb: &mut RdbReader<'_>, encver: c_int) -> bool;
}

/// Whether the server has `aux_save2` (Redis 7.2 and newer, Valkey): it came with
/// `CachedMicroseconds`, whose presence tells.
pub fn has_aux_save2() -> bool {
    // SAFETY: copies a function pointer the crate filled in at load.
    unsafe { raw::RedisModule_CachedMicroseconds }.is_some()
}

/// Registers the data type `name` (9 characters) whose auxiliary data is `R`'s record,
/// saved before the keys; `R::save` runs as `aux_save2` where the server has it. Whether
/// the server created it.
pub fn register_aux_type<R: AuxRecord>(ctx: &Context, name: &CStr, encver: c_int) -> bool {
    let aux2 = has_aux_save2();
    let mut methods = raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(no_value_load),
        rdb_save: Some(no_value_save),
        aof_rewrite: None,
        mem_usage: None,
        digest: None,
        free: Some(no_value_free),
        aux_load: Some(aux_load::<R>),
        aux_save: if aux2 { None } else { Some(aux_save::<R>) },
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: if aux2 { Some(aux_save::<R>) } else { None },
    };
    // SAFETY: called during load with the load context; the server copies the methods
    // and the name.
    let created =
        unsafe { api!(RedisModule_CreateDataType)(ctx.ctx, name.as_ptr(), encver, &mut methods) };
    !created.is_null()
}

extern "C" fn aux_save<R: AuxRecord>(io: *mut RedisModuleIO, _when: c_int) {
    R::save(&mut RdbWriter {
        io,
        _save: PhantomData,
    });
}

extern "C" fn aux_load<R: AuxRecord>(io: *mut RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    let loaded = R::load(
        &mut RdbReader {
            io,
            _load: PhantomData,
        },
        encver,
    );
    if loaded {
        raw::REDISMODULE_OK as c_int
    } else {
        raw::REDISMODULE_ERR as c_int
    }
}

// The type holds no keys; these are never called but the server wants them set.
extern "C" fn no_value_load(_rdb: *mut RedisModuleIO, _encver: c_int) -> *mut c_void {
    std::ptr::null_mut()
}
extern "C" fn no_value_save(_rdb: *mut RedisModuleIO, _value: *mut c_void) {}
extern "C" fn no_value_free(_value: *mut c_void) {}

/// Told when a whole dataset starts loading (an RDB, an AOF, a full sync).
pub trait LoadingListener {
    /// A dataset starts loading.
    fn dataset_loading_starts();
}

/// Subscribes `L` to the loading events; whether the server accepted.
pub fn subscribe_to_loading<L: LoadingListener>(ctx: &Context) -> bool {
    let loading = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_LOADING,
        dataver: 1,
    };
    // SAFETY: called during load with the load context; the callback is a plain function.
    let status = unsafe {
        api!(RedisModule_SubscribeToServerEvent)(ctx.ctx, loading, Some(on_loading::<L>))
    };
    status == raw::REDISMODULE_OK as c_int
}

extern "C" fn on_loading<L: LoadingListener>(
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
        L::dataset_loading_starts();
    }
}
