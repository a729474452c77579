//! The only code that opens keys, reads and writes values, sets expiry and propagates.
//!
//! Writes go through the low-level key API (fast, no command dispatch), which neither
//! propagates nor keeps a key's TTL on `StringSet`. So every write here sets the absolute
//! expiry itself and propagates its effect as `SET key <state> PXAT <expiry>` (or `DEL
//! key`): replicas and AOF replay then store the same bytes and the same absolute expiry
//! without reading any clock, and can do so without the module loaded.

use crate::command::CommandError;
use crate::core::encoding::encode_count;
use crate::core::limiter::Write;
use crate::ffi::api;
use redis_module::{raw, Context, RedisString};
use std::os::raw::{c_char, c_int};

/// The error for a string value that this module did not write.
pub const NOT_OURS: &str = "ERR key holds a string that is not a ratelimit state";

/// How a command uses its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only reads (RL.PEEK): works on replicas and never changes the key.
    Read,
    /// May write.
    Write,
}

/// A key opened for the duration of one command.
pub struct StoredKey<'a> {
    ctx: &'a Context,
    name: &'a RedisString,
    key: *mut raw::RedisModuleKey,
}

impl<'a> StoredKey<'a> {
    /// Opens `name`. A logically expired key reads as empty on a primary; on a replica it
    /// may still be there, and the core reads its absolute times as ended.
    pub fn open(ctx: &'a Context, name: &'a RedisString, access: Access) -> Self {
        let mode = match access {
            Access::Read => raw::REDISMODULE_READ,
            Access::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        };
        // SAFETY: ctx and name are live for the current command.
        let key = unsafe { api!(RedisModule_OpenKey)(ctx.ctx, name.inner, mode as c_int) };
        StoredKey { ctx, name, key }
    }

    fn is_empty(&self) -> bool {
        // SAFETY: self.key is open until drop.
        let key_type = unsafe { api!(RedisModule_KeyType)(self.key) };
        key_type as isize == raw::REDISMODULE_KEYTYPE_EMPTY
    }

    /// The key's string value; `None` for no key; `WRONGTYPE` for another type. The bytes
    /// are valid until the key is written, which `apply` taking `&mut self` enforces.
    pub fn value(&self) -> Result<Option<&[u8]>, CommandError> {
        // SAFETY: self.key is open until drop.
        let key_type = unsafe { api!(RedisModule_KeyType)(self.key) };
        match key_type as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => return Ok(None),
            raw::REDISMODULE_KEYTYPE_STRING => {}
            _ => return Err(CommandError::WrongType),
        }
        let mut len = 0usize;
        // SAFETY: self.key is an open string key; the buffer lives until the key is written
        // or closed, and the borrow of self prevents both meanwhile.
        unsafe {
            let ptr =
                api!(RedisModule_StringDMA)(self.key, &mut len, raw::REDISMODULE_READ as c_int);
            if ptr.is_null() {
                return Ok(Some(&[]));
            }
            Ok(Some(std::slice::from_raw_parts(ptr.cast::<u8>(), len)))
        }
    }

    /// The key's absolute expiry in ms, `None` when it has none (or no key).
    pub fn expiry(&self) -> Option<i64> {
        // SAFETY: self.key is open until drop.
        let expiry = unsafe { api!(RedisModule_GetAbsExpire)(self.key) };
        (expiry != raw::REDISMODULE_NO_EXPIRE as i64).then_some(expiry)
    }

    /// Makes the change the limiter decided, and propagates it. `Nothing` writes and
    /// propagates nothing.
    pub fn apply(&mut self, write: &Write) {
        match write {
            Write::Nothing => return,
            Write::Set {
                value,
                expires_at_ms,
            } => {
                if !self.is_empty() && self.expiry() == Some(*expires_at_ms) {
                    // Same expiry: rewrite the value in place (no reallocation of the key).
                    self.overwrite_value(value);
                } else {
                    self.replace_value(value, *expires_at_ms);
                }
                self.propagate_set(value, *expires_at_ms);
            }
            Write::Delete => {
                // SAFETY: self.key is open for writing.
                unsafe { api!(RedisModule_DeleteKey)(self.key) };
                self.propagate_del();
            }
        }
        // SAFETY: ctx and name are live for the current command.
        unsafe { api!(RedisModule_SignalModifiedKey)(self.ctx.ctx, self.name.inner) };
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

    /// Sets the value of a new (or replaced) key and its absolute expiry.
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

    /// Propagates `DEL key`.
    fn propagate_del(&self) {
        // SAFETY: format "s" takes one RedisModuleString, live for the call.
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx.ctx,
                c"DEL".as_ptr(),
                c"s".as_ptr(),
                self.name.inner,
            );
        }
    }
}

impl Drop for StoredKey<'_> {
    fn drop(&mut self) {
        // SAFETY: self.key was opened by OpenKey and is closed exactly once.
        unsafe { api!(RedisModule_CloseKey)(self.key) };
    }
}
