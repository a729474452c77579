//! A key opened through the low-level key API, closed when dropped.

use super::api::api;
use super::string::ServerStr;
use redis_module::raw::{self, RedisModuleKey};
use redis_module::Context;
use std::marker::PhantomData;
use std::os::raw::c_int;

/// How a key is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// For reading only.
    Read,
    /// For reading and writing.
    Write,
}

/// The key holds a value of another type than a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAString;

/// A key of the running command, open until dropped. Reading its value borrows the key;
/// every write takes it mutably, so no value read stays borrowed across a write.
pub struct Key<'ctx> {
    /// NULL for a missing key opened for reading; every method checks.
    key: *mut RedisModuleKey,
    _command: PhantomData<&'ctx Context>,
}

impl<'ctx> Key<'ctx> {
    /// Opens the key `name` in the running command's context.
    #[inline]
    pub fn open(ctx: &'ctx Context, name: ServerStr<'ctx>, mode: Mode) -> Self {
        let mode = match mode {
            Mode::Read => raw::REDISMODULE_READ,
            Mode::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        };
        // SAFETY: ctx is the live context of the running command and name a live string
        // for all of 'ctx; the key is closed on drop, within the command.
        let key = unsafe { api!(RedisModule_OpenKey)(ctx.ctx, name.as_ptr(), mode as c_int) };
        Key {
            key,
            _command: PhantomData,
        }
    }

    /// Whether the server gave a key handle (it gives none for a missing key opened for
    /// reading).
    #[inline]
    pub fn is_open(&self) -> bool {
        !self.key.is_null()
    }

    /// Whether the key is empty (missing).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.key_type() == raw::REDISMODULE_KEYTYPE_EMPTY
    }

    #[inline]
    fn key_type(&self) -> isize {
        // SAFETY: self.key is open until drop; KeyType answers EMPTY for a NULL key.
        unsafe { api!(RedisModule_KeyType)(self.key) as isize }
    }

    /// The key's string value; `None` for no key. The bytes stay valid while the key is
    /// borrowed (writes take `&mut self`).
    #[inline]
    pub fn value(&self) -> Result<Option<&[u8]>, NotAString> {
        match self.key_type() {
            raw::REDISMODULE_KEYTYPE_EMPTY => return Ok(None),
            raw::REDISMODULE_KEYTYPE_STRING => {}
            _ => return Err(NotAString),
        }
        let mut len = 0usize;
        // SAFETY: self.key is an open string key (a NULL key is EMPTY, handled above); the
        // buffer lives until the key is written or closed, and the borrow of self prevents
        // both meanwhile.
        unsafe {
            let ptr =
                api!(RedisModule_StringDMA)(self.key, &mut len, raw::REDISMODULE_READ as c_int);
            if ptr.is_null() {
                return Ok(Some(&[]));
            }
            Ok(Some(std::slice::from_raw_parts(ptr.cast::<u8>(), len)))
        }
    }

    /// The key's absolute expiry in ms, `None` when it has none (or there is no key).
    #[inline]
    pub fn expiry(&self) -> Option<i64> {
        if self.key.is_null() {
            return None;
        }
        // SAFETY: self.key is open until drop and not NULL.
        let expiry = unsafe { api!(RedisModule_GetAbsExpire)(self.key) };
        (expiry != raw::REDISMODULE_NO_EXPIRE as i64).then_some(expiry)
    }

    /// Rewrites the value of an existing string key in place with `value` (its expiry
    /// stays); whether it could.
    #[inline]
    pub fn overwrite(&mut self, value: &[u8]) -> bool {
        if self.key.is_null() {
            return false;
        }
        let write = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: self.key is open and not NULL; DMA gives a buffer of `len` bytes (NULL for
        // a key not open for writing or not a string), which is filled only when it is
        // exactly `value.len()` long, after truncating it to that.
        unsafe {
            let mut len = 0usize;
            let mut ptr = api!(RedisModule_StringDMA)(self.key, &mut len, write);
            if len != value.len() {
                api!(RedisModule_StringTruncate)(self.key, value.len());
                ptr = api!(RedisModule_StringDMA)(self.key, &mut len, write);
            }
            if ptr.is_null() || len != value.len() {
                return false;
            }
            std::ptr::copy_nonoverlapping(value.as_ptr(), ptr.cast::<u8>(), len);
            true
        }
    }

    /// Sets the key's value to `string` (the server takes its own reference).
    #[inline]
    pub fn set(&mut self, string: ServerStr<'_>) {
        if self.key.is_null() {
            return;
        }
        // SAFETY: self.key is open and not NULL (StringSet refuses a key not open for
        // writing); the string is live for the call and the server retains it.
        unsafe { api!(RedisModule_StringSet)(self.key, string.as_ptr()) };
    }

    /// Sets the key's absolute expiry.
    #[inline]
    pub fn set_expiry(&mut self, expires_at_ms: i64) {
        if self.key.is_null() {
            return;
        }
        // SAFETY: self.key is open and not NULL (SetAbsExpire refuses a key not open for
        // writing or empty).
        unsafe { api!(RedisModule_SetAbsExpire)(self.key, expires_at_ms) };
    }

    /// Deletes the key.
    #[inline]
    pub fn delete(&mut self) {
        if self.key.is_null() {
            return;
        }
        // SAFETY: self.key is open and not NULL (DeleteKey refuses a key not open for
        // writing).
        unsafe { api!(RedisModule_DeleteKey)(self.key) };
    }
}

impl Drop for Key<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: self.key came from OpenKey (or is NULL, which CloseKey ignores) and is
        // closed exactly once, here.
        unsafe { api!(RedisModule_CloseKey)(self.key) };
    }
}
