//! Command handlers: parse -> load -> core -> store -> propagate -> reply.
//!
//! Every handler runs inside [`guarded`], which catches panics (a panic that reached
//! Redis would kill the server) and writes every reply itself, so no reply path of the
//! crate that could panic on odd bytes is ever used.

pub mod limit;
pub mod reset;
pub mod testing;
pub mod throttle;

use crate::core::args::ArgError;
use crate::ffi::api;
use redis_module::{raw, Context, RedisResult, RedisString, RedisValue};
use std::borrow::Cow;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Why a command failed; [`guarded`] turns it into the error reply.
#[derive(Debug)]
pub enum CommandError {
    /// Redis's standard "wrong number of arguments" error.
    WrongArity,
    /// The key holds another Redis type.
    WrongType,
    /// Any other error; the text starts with `ERR`.
    Message(Cow<'static, str>),
}

impl From<ArgError> for CommandError {
    fn from(err: ArgError) -> Self {
        match err {
            ArgError::WrongArity => CommandError::WrongArity,
            other => CommandError::Message(other.message()),
        }
    }
}

/// What a handler returns: `Ok` once it has replied.
pub type CommandResult = Result<(), CommandError>;

const WRONGTYPE: &std::ffi::CStr =
    c"WRONGTYPE Operation against a key holding the wrong kind of value";
const INTERNAL_ERROR: &std::ffi::CStr =
    c"ERR internal error in the ratelimit module; the server log has the details";

/// Runs `handler`, catching any panic, and replies with its error if it failed.
pub fn guarded(
    ctx: &Context,
    args: Vec<RedisString>,
    handler: fn(&Context, &[RedisString]) -> CommandResult,
) -> RedisResult {
    let outcome = catch_unwind(AssertUnwindSafe(|| handler(ctx, &args)));
    // A panic inside the handler may have left a reply half written; the error still
    // tells the client, and the panic hook has logged the cause.
    let error = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(err)) => Some(err),
        Err(_) => Some(CommandError::Message(Cow::Borrowed(
            INTERNAL_ERROR.to_str().unwrap_or("ERR internal error"),
        ))),
    };
    if let Some(err) = error {
        reply_error(ctx, err);
    }
    Ok(RedisValue::NoReply)
}

fn reply_error(ctx: &Context, err: CommandError) {
    // SAFETY: ctx.ctx is the live context of the running command; the C strings outlive
    // the calls.
    unsafe {
        match err {
            CommandError::WrongArity => {
                api!(RedisModule_WrongArity)(ctx.ctx);
            }
            CommandError::WrongType => {
                api!(RedisModule_ReplyWithError)(ctx.ctx, WRONGTYPE.as_ptr());
            }
            CommandError::Message(text) => {
                let text =
                    CString::new(text.into_owned()).unwrap_or_else(|_| INTERNAL_ERROR.to_owned());
                api!(RedisModule_ReplyWithError)(ctx.ctx, text.as_ptr());
            }
        }
    }
}

/// The bytes of a command argument, borrowed from the server for the call's duration.
pub fn arg_bytes(arg: &RedisString) -> &[u8] {
    let mut len = 0usize;
    // SAFETY: `arg.inner` is a live argument of the current command; the returned pointer
    // stays valid as long as `arg` does, which the lifetime ties it to.
    unsafe {
        let ptr = api!(RedisModule_StringPtrLen)(arg.inner, &mut len);
        if ptr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}

/// Whether the client speaks RESP3, and so gets maps instead of flat arrays.
pub fn client_uses_resp3(ctx: &Context) -> bool {
    // SAFETY: ctx.ctx is the live context of the running command.
    let flags = unsafe { api!(RedisModule_GetContextFlags)(ctx.ctx) };
    flags & raw::REDISMODULE_CTX_FLAGS_RESP3 as i32 != 0
}
