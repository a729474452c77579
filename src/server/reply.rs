//! The reply writer of a command's context.

use super::api::api;
use redis_module::{raw, Context};
use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::c_long;

/// Writes the running command's reply, piece by piece (an aggregate's length first, then
/// its elements), into the context it was made for.
#[derive(Clone, Copy)]
pub struct Reply<'ctx> {
    ctx: *mut raw::RedisModuleCtx,
    _command: PhantomData<&'ctx Context>,
}

impl<'ctx> Reply<'ctx> {
    /// The writer of the reply in `ctx`, the running command's context.
    #[inline]
    pub fn to(ctx: &'ctx Context) -> Self {
        Reply {
            ctx: ctx.ctx,
            _command: PhantomData,
        }
    }

    /// Whether the client speaks RESP3.
    #[inline]
    pub fn resp3(self) -> bool {
        // SAFETY: self.ctx is the live context of the running command ('ctx).
        let flags = unsafe { api!(RedisModule_GetContextFlags)(self.ctx) };
        flags & raw::REDISMODULE_CTX_FLAGS_RESP3 as i32 != 0
    }

    /// Opens an array of `len` elements.
    #[inline]
    pub fn array(self, len: usize) {
        // SAFETY: self.ctx is the live context of the running command ('ctx).
        unsafe { api!(RedisModule_ReplyWithArray)(self.ctx, len as c_long) };
    }

    /// Opens a map of `len` pairs (the server writes a flat array to a RESP2 client).
    #[inline]
    pub fn map(self, len: usize) {
        // SAFETY: self.ctx is the live context of the running command ('ctx).
        unsafe { api!(RedisModule_ReplyWithMap)(self.ctx, len as c_long) };
    }

    /// One integer.
    #[inline]
    pub fn integer(self, value: i64) {
        // SAFETY: self.ctx is the live context of the running command ('ctx).
        unsafe { api!(RedisModule_ReplyWithLongLong)(self.ctx, value) };
    }

    /// A simple string (`+text`).
    #[inline]
    pub fn simple(self, text: &CStr) {
        // SAFETY: self.ctx is the live context of the running command; the server copies
        // the text during the call.
        unsafe { api!(RedisModule_ReplyWithSimpleString)(self.ctx, text.as_ptr()) };
    }

    /// A bulk string, binary-safe.
    #[inline]
    pub fn bulk(self, bytes: &[u8]) {
        // SAFETY: self.ctx is the live context of the running command; the server copies
        // the `len` bytes during the call.
        unsafe {
            api!(RedisModule_ReplyWithStringBuffer)(self.ctx, bytes.as_ptr().cast(), bytes.len())
        };
    }

    /// A null.
    #[inline]
    pub fn null(self) {
        // SAFETY: self.ctx is the live context of the running command ('ctx).
        unsafe { api!(RedisModule_ReplyWithNull)(self.ctx) };
    }

    /// An error (`-text`; the text starts with its code).
    #[inline]
    pub fn error(self, text: &CStr) {
        // SAFETY: self.ctx is the live context of the running command; the server copies
        // the text during the call.
        unsafe { api!(RedisModule_ReplyWithError)(self.ctx, text.as_ptr()) };
    }

    /// The server's standard "wrong number of arguments" error for this command.
    #[inline]
    pub fn wrong_arity(self) {
        // SAFETY: self.ctx is the live context of the running command ('ctx).
        unsafe { api!(RedisModule_WrongArity)(self.ctx) };
    }
}
