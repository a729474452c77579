//! The only code that opens keys, reads and writes values, sets expiry and propagates.
//!
//! Writes go through the low-level key API (fast, no command dispatch), which neither
//! propagates nor keeps a key's TTL on `StringSet`. So every write here sets the absolute
//! expiry itself and propagates its effect as `SET key <state> PXAT <expiry>` (or `DEL
//! key`): replicas and AOF replay then store the same bytes and the same absolute expiry
//! without reading any clock, and can do so without the module loaded.

use crate::ffi::api;
use crate::{metrics, strings};
use ratelimit_core::encoding::decode_count;
use ratelimit_core::limiter::Write;
use redis_module::raw::{self, RedisModuleString};
use redis_module::Context;
use std::borrow::Cow;
use std::cell::Cell;
use std::os::raw::c_int;

/// The error for a string value that this module did not write.
pub const NOT_OURS: &str = "ERR key holds a string that is not a ratelimit state";

/// Why the store could not do what it was asked; the command layer turns it into the
/// client's error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The key holds another Redis type than a string.
    WrongType,
    /// The server would not propagate `command` (renamed away?); nothing was written.
    NotPropagated(Cow<'static, str>),
}

impl StoreError {
    /// The error reply's text for a failed propagation.
    pub fn not_propagated_message(command: &str) -> String {
        format!(
            "ERR cannot propagate {command} to replicas and the AOF (is {command} renamed?): \
             nothing was written"
        )
    }
}

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
    name: *mut RedisModuleString,
    key: *mut raw::RedisModuleKey,
    /// The key's absolute expiry once read (`Some(None)`: it has none).
    expiry: Cell<Option<Option<i64>>>,
}

impl<'a> StoredKey<'a> {
    /// Opens the key `name` (an argument of the running command). A logically expired key
    /// reads as empty on a primary; on a replica it may still be there, and the core reads
    /// its absolute times as ended.
    pub fn open(ctx: &'a Context, name: *mut RedisModuleString, access: Access) -> Self {
        let mode = match access {
            Access::Read => raw::REDISMODULE_READ,
            Access::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        };
        // SAFETY: ctx and name are live for the current command.
        let key = unsafe { api!(RedisModule_OpenKey)(ctx.ctx, name, mode as c_int) };
        StoredKey {
            ctx,
            name,
            key,
            expiry: Cell::new(None),
        }
    }

    fn key_type(&self) -> isize {
        // SAFETY: self.key is open until drop.
        unsafe { api!(RedisModule_KeyType)(self.key) as isize }
    }

    /// The key's string value; `None` for no key; `WRONGTYPE` for another type. The bytes
    /// are valid until the key is written, which `apply` taking `&mut self` enforces.
    pub fn value(&self) -> Result<Option<&[u8]>, StoreError> {
        match self.key_type() {
            raw::REDISMODULE_KEYTYPE_EMPTY => return Ok(None),
            raw::REDISMODULE_KEYTYPE_STRING => {}
            _ => return Err(StoreError::WrongType),
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

    /// The key's absolute expiry in ms, `None` when it has none (or there is no key). Read
    /// from the server once per command.
    pub fn expiry(&self) -> Option<i64> {
        if let Some(known) = self.expiry.get() {
            return known;
        }
        if self.key.is_null() {
            // OpenKey gives NULL for a missing key opened for reading.
            return None;
        }
        // SAFETY: self.key is open until drop.
        let expiry = unsafe { api!(RedisModule_GetAbsExpire)(self.key) };
        let expiry = (expiry != raw::REDISMODULE_NO_EXPIRE as i64).then_some(expiry);
        self.expiry.set(Some(expiry));
        expiry
    }

    /// Makes the change the limiter decided, and propagates it. `Nothing` writes and
    /// propagates nothing.
    ///
    /// The effect is handed to the server for propagation first, and the key is written
    /// only if that worked: the server sends what a command propagated once the command
    /// returns, so the order inside the command does not matter to replicas and the AOF,
    /// and a change that could not be propagated (the command it is spelt with renamed
    /// away) is not made here either.
    pub fn apply(&mut self, write: &Write) -> Result<(), StoreError> {
        if self.key.is_null() {
            return Ok(());
        }
        match write {
            Write::Nothing => return Ok(()),
            Write::Set {
                value,
                expires_at_ms,
            } => {
                let fresh = self.key_type() == raw::REDISMODULE_KEYTYPE_EMPTY;
                let string = if fresh {
                    ValueString::Made(strings::create(value))
                } else {
                    ValueString::for_value(value)
                };
                let propagated = self.propagate_set(string.get(), *expires_at_ms);
                if propagated.is_ok() {
                    self.write_value(value, *expires_at_ms, fresh, &string);
                }
                string.release();
                propagated?;
            }
            Write::Delete => {
                self.propagate_del()?;
                // SAFETY: self.key is open for writing.
                unsafe { api!(RedisModule_DeleteKey)(self.key) };
            }
        }
        // SAFETY: ctx and name are live for the current command.
        unsafe { api!(RedisModule_SignalModifiedKey)(self.ctx.ctx, self.name) };
        Ok(())
    }

    /// Stores `value` with its absolute expiry. A new key takes `string` (made for it); a
    /// live key is rewritten in place: no new object, and its expiry is only touched when
    /// it moves (never for a fixed window's next hit), or when it has none (after
    /// `PERSIST`), which this sets again.
    fn write_value(&self, value: &[u8], expires_at_ms: i64, fresh: bool, string: &ValueString) {
        if fresh {
            self.create_value(string.get(), expires_at_ms);
        } else if self.overwrite_value(value) {
            if self.expiry() != Some(expires_at_ms) {
                // SAFETY: self.key is an open string key.
                unsafe { api!(RedisModule_SetAbsExpire)(self.key, expires_at_ms) };
            }
        } else {
            let made = strings::create(value);
            self.create_value(made, expires_at_ms);
            strings::free(made);
        }
    }

    /// Rewrites the value of an existing string key in place; its expiry stays. Whether it
    /// could (else the caller sets the value anew).
    fn overwrite_value(&self, value: &[u8]) -> bool {
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
            if ptr.is_null() || len != value.len() {
                return false;
            }
            std::ptr::copy_nonoverlapping(value.as_ptr(), ptr.cast::<u8>(), len);
            true
        }
    }

    /// Sets the key to `string` with its absolute expiry.
    fn create_value(&self, string: *mut RedisModuleString, expires_at_ms: i64) {
        // SAFETY: StringSet takes its own reference to `string`; self.key is open for
        // writing.
        unsafe {
            api!(RedisModule_StringSet)(self.key, string);
            api!(RedisModule_SetAbsExpire)(self.key, expires_at_ms);
        }
    }

    /// Propagates `SET key value PXAT expires_at_ms`.
    fn propagate_set(
        &self,
        value: *mut RedisModuleString,
        expires_at_ms: i64,
    ) -> Result<(), StoreError> {
        let expiry = strings::expiry(expires_at_ms);
        // SAFETY: every argument is a live server string, passed with `s`: the server takes
        // its own reference.
        let status = unsafe {
            api!(RedisModule_Replicate)(
                self.ctx.ctx,
                c"SET".as_ptr(),
                c"ssss".as_ptr(),
                self.name,
                value,
                strings::pxat(),
                expiry,
            )
        };
        replicated(status, Cow::Borrowed("SET"))
    }

    /// Propagates `DEL key`.
    fn propagate_del(&self) -> Result<(), StoreError> {
        // SAFETY: the key name is a live server string, passed with `s`.
        let status = unsafe {
            api!(RedisModule_Replicate)(self.ctx.ctx, c"DEL".as_ptr(), c"s".as_ptr(), self.name)
        };
        replicated(status, Cow::Borrowed("DEL"))
    }
}

/// The server string of a value to propagate (and, for a new key, to store).
enum ValueString {
    /// Made for this write; released after it.
    Made(*mut RedisModuleString),
    /// A small count from the table made at load; never released.
    Shared(*mut RedisModuleString),
}

impl ValueString {
    fn for_value(value: &[u8]) -> Self {
        match decode_count(value).and_then(strings::count) {
            Some(shared) => ValueString::Shared(shared),
            None => ValueString::Made(strings::create(value)),
        }
    }

    fn get(&self) -> *mut RedisModuleString {
        match self {
            ValueString::Made(s) | ValueString::Shared(s) => *s,
        }
    }

    fn release(self) {
        if let ValueString::Made(string) = self {
            strings::free(string);
        }
    }
}

/// The error for an effect the server would not propagate.
fn replicated(status: c_int, command: Cow<'static, str>) -> Result<(), StoreError> {
    if status == raw::REDISMODULE_OK as c_int {
        return Ok(());
    }
    metrics::record_propagation_failure();
    Err(StoreError::NotPropagated(command))
}

/// Propagates `command args...`: for a command whose effect is deterministic (RL.POLICY,
/// which reads no clock), given in a form that means the same on every server, replaying
/// the command is replaying its effect.
pub fn propagate_command(
    ctx: &Context,
    command: &std::ffi::CStr,
    args: &[&[u8]],
) -> Result<(), StoreError> {
    let strings: Vec<*mut RedisModuleString> = args.iter().map(|a| strings::create(a)).collect();
    // SAFETY: the format `v` takes an array of live server strings and its length; the
    // server takes its own references, so ours are released after.
    let status = unsafe {
        api!(RedisModule_Replicate)(
            ctx.ctx,
            command.as_ptr(),
            c"v".as_ptr(),
            strings.as_ptr(),
            strings.len(),
        )
    };
    strings.into_iter().for_each(strings::free);
    replicated(status, Cow::Owned(command.to_string_lossy().into_owned()))
}

/// Fires the keyspace event `rl.denied` (class generic) on `key`, for watching abuse with
/// `SUBSCRIBE __keyevent@<db>__:rl.denied`.
pub fn notify_denied(ctx: &Context, key: *mut RedisModuleString) {
    // SAFETY: key is a live argument of the running command.
    unsafe {
        api!(RedisModule_NotifyKeyspaceEvent)(
            ctx.ctx,
            raw::REDISMODULE_NOTIFY_GENERIC,
            c"rl.denied".as_ptr(),
            key,
        );
    }
}

impl Drop for StoredKey<'_> {
    fn drop(&mut self) {
        // SAFETY: self.key was opened by OpenKey and is closed exactly once.
        unsafe { api!(RedisModule_CloseKey)(self.key) };
    }
}
