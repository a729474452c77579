//! The only code that opens keys, reads and writes values, sets expiry and propagates.
//!
//! Writes go through the low-level key API (fast, no command dispatch), which neither
//! propagates nor keeps a key's TTL on `StringSet`. So every write here sets the absolute
//! expiry itself and propagates its effect as `SET key <state> PXAT <window end>`: replicas
//! and AOF replay then store the same bytes and the same absolute expiry without reading
//! any clock, and can do so without the module loaded.

use crate::command::CommandError;
use crate::core::encoding::{decode_count, encode_count};
use crate::core::fixed_window::WindowState;
use crate::ffi::api;
use redis_module::{raw, Context, RedisString};
use std::os::raw::{c_char, c_int};

const NOT_OURS: &str =
    "ERR key holds a string that is not a ratelimit state (expected a count with an expiry)";

/// A key opened for reading and writing for the duration of one command.
pub struct WindowKey<'a> {
    ctx: &'a Context,
    name: &'a RedisString,
    key: *mut raw::RedisModuleKey,
}

impl<'a> WindowKey<'a> {
    /// Opens `name`; a logically expired key reads as empty.
    pub fn open(ctx: &'a Context, name: &'a RedisString) -> Self {
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: ctx and name are live for the current command.
        let key = unsafe { api!(RedisModule_OpenKey)(ctx.ctx, name.inner, mode) };
        WindowKey { ctx, name, key }
    }

    /// The stored fixed-window state, `None` for an empty key.
    pub fn read(&self) -> Result<Option<WindowState>, CommandError> {
        // SAFETY: self.key is open until drop.
        let key_type = unsafe { api!(RedisModule_KeyType)(self.key) };
        match key_type as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => return Ok(None),
            raw::REDISMODULE_KEYTYPE_STRING => {}
            _ => return Err(CommandError::WrongType),
        }
        let count = decode_count(self.value_bytes());
        // SAFETY: self.key is open until drop.
        let ends_at_ms = unsafe { api!(RedisModule_GetAbsExpire)(self.key) };
        match count {
            Some(count) if ends_at_ms != raw::REDISMODULE_NO_EXPIRE as i64 => {
                Ok(Some(WindowState { count, ends_at_ms }))
            }
            _ => Err(CommandError::Message(NOT_OURS.into())),
        }
    }

    /// Stores `state`, over `previous` as [`read`](Self::read) returned it, and propagates
    /// the effect.
    pub fn write(&self, previous: Option<WindowState>, state: WindowState) {
        let mut digits = [0u8; 20];
        let value = encode_count(state.count, &mut digits);
        let same_window = previous.is_some_and(|p| p.ends_at_ms == state.ends_at_ms);
        if same_window {
            // The key already expires at the window's end: rewrite the value in place.
            self.overwrite_value(value);
        } else {
            self.replace_value(value, state.ends_at_ms);
        }
        // SAFETY: ctx and name are live for the current command.
        unsafe { api!(RedisModule_SignalModifiedKey)(self.ctx.ctx, self.name.inner) };
        self.propagate_set(value, state.ends_at_ms);
    }

    fn value_bytes(&self) -> &[u8] {
        let mut len = 0usize;
        // SAFETY: self.key is an open string key; the buffer lives until the key is
        // written or closed, and the borrow of self prevents both meanwhile.
        unsafe {
            let ptr =
                api!(RedisModule_StringDMA)(self.key, &mut len, raw::REDISMODULE_READ as c_int);
            if ptr.is_null() {
                return &[];
            }
            std::slice::from_raw_parts(ptr.cast::<u8>(), len)
        }
    }

    /// Rewrites the value of an existing string key without touching its expiry.
    fn overwrite_value(&self, value: &[u8]) {
        let write = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: self.key is an open string key; DMA gives a buffer of `len` bytes that we
        // fill completely after truncating it to exactly `value.len()`.
        unsafe {
            let mut len = 0usize;
            let mut ptr = api!(RedisModule_StringDMA)(self.key, &mut len, write);
            if len != value.len() {
                api!(RedisModule_StringTruncate)(self.key, value.len());
                ptr = api!(RedisModule_StringDMA)(self.key, &mut len, write);
            }
            if !ptr.is_null() && len == value.len() {
                std::ptr::copy_nonoverlapping(value.as_ptr(), ptr.cast::<u8>(), len);
            }
        }
    }

    /// Sets the value of a new (or dead) key and its absolute expiry.
    fn replace_value(&self, value: &[u8], expires_at_ms: i64) {
        // SAFETY: the string is created and freed here; StringSet takes its own reference.
        unsafe {
            let string =
                api!(RedisModule_CreateString)(self.ctx.ctx, value.as_ptr().cast(), value.len());
            api!(RedisModule_StringSet)(self.key, string);
            api!(RedisModule_FreeString)(self.ctx.ctx, string);
            api!(RedisModule_SetAbsExpire)(self.key, expires_at_ms);
        }
    }

    /// Propagates `SET key value PXAT expires_at_ms` to replicas and the AOF.
    fn propagate_set(&self, value: &[u8], expires_at_ms: i64) {
        let mut digits = [0u8; 20];
        let expiry = encode_count(expires_at_ms, &mut digits);
        // SAFETY: format "sbcb" takes a RedisModuleString, a (pointer, length) buffer, a C
        // string and another buffer; all outlive the call, which copies them.
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx.ctx,
                c"SET".as_ptr(),
                c"sbcb".as_ptr(),
                self.name.inner,
                value.as_ptr().cast::<c_char>(),
                value.len(),
                c"PXAT".as_ptr(),
                expiry.as_ptr().cast::<c_char>(),
                expiry.len(),
            );
        }
    }
}

impl Drop for WindowKey<'_> {
    fn drop(&mut self) {
        // SAFETY: self.key was opened by OpenKey and is closed exactly once.
        unsafe { api!(RedisModule_CloseKey)(self.key) };
    }
}
