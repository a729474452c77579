//! Command handlers: parse -> load -> core -> store -> propagate -> reply.
//!
//! Commands are registered with plain `extern "C"` handlers ([`command_handler!`]) that read
//! the server's argument vector in place: no argument is copied or reference-counted on
//! the way in. Every handler runs inside [`run_guarded`], which catches panics (a panic
//! that reached Redis would kill the server) and writes every reply itself, so no reply
//! path that could panic on odd bytes is ever used.

pub mod limit;
pub mod reset;
pub mod testing;
pub mod throttle;

use crate::ffi::api;
use crate::store::StoreError;
use ratelimit_core::args::ArgError;
use redis_module::{raw, Context};
use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Why a command failed; [`run_guarded`] turns it into the error reply.
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

impl From<StoreError> for CommandError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::WrongType => CommandError::WrongType,
            StoreError::NotPropagated(command) => {
                CommandError::Message(StoreError::not_propagated_message(&command).into())
            }
        }
    }
}

/// What a handler returns: `Ok` once it has replied.
pub type CommandResult = Result<(), CommandError>;

/// A command handler: the context and the arguments (the command name first).
pub type Handler = fn(&Context, Args<'_>) -> CommandResult;

const WRONGTYPE: &CStr = c"WRONGTYPE Operation against a key holding the wrong kind of value";
const INTERNAL_ERROR: &CStr =
    c"ERR internal error in the ratelimit module; the server log has the details";

/// The arguments of the running command, as the server holds them.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    argv: &'a [*mut raw::RedisModuleString],
}

impl<'a> Args<'a> {
    /// Wraps the server's argument vector.
    ///
    /// # Safety
    /// `argv` must point to `argc` live strings that outlive `'a` (true for the duration
    /// of a command callback).
    unsafe fn new(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Self {
        let len = usize::try_from(argc).unwrap_or(0);
        let argv = if argv.is_null() || len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(argv, len)
        };
        Args { argv }
    }

    /// How many arguments, the command name included.
    pub fn len(&self) -> usize {
        self.argv.len()
    }

    /// The argument at `index` as the server's string object (for keys and propagation).
    pub fn string(&self, index: usize) -> Option<*mut raw::RedisModuleString> {
        self.argv.get(index).copied()
    }

    /// The bytes of the arguments from `start` on, borrowed from the server.
    pub fn bytes_from(&self, start: usize) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        self.argv
            .get(start..)
            .unwrap_or(&[])
            .iter()
            .map(|&s| string_bytes(s))
    }
}

/// The bytes of a server string, borrowed for as long as the string lives.
fn string_bytes<'a>(string: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: `string` is a live argument of the current command; the pointer returned
    // stays valid while the command runs, which bounds every use of the slice.
    unsafe {
        let ptr = api!(RedisModule_StringPtrLen)(string, &mut len);
        if ptr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}

/// Defines `extern "C" fn $name`, the callback registered for a command, running
/// `$handler` under [`run_guarded`].
macro_rules! command_handler {
    ($name:ident, $handler:expr) => {
        pub extern "C" fn $name(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::os::raw::c_int,
        ) -> std::os::raw::c_int {
            // SAFETY: the server calls this with its context and argument vector, both
            // live until we return.
            unsafe { $crate::command::run_guarded(ctx, argv, argc, $handler) }
        }
    };
}
pub(crate) use command_handler;

/// Runs `handler`, catching any panic, and replies with its error if it failed.
///
/// # Safety
/// `ctx`, `argv` and `argc` must be what the server passed to a command callback.
pub unsafe fn run_guarded(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    let context = Context::new(ctx);
    let args = Args::new(argv, argc);
    let outcome = catch_unwind(AssertUnwindSafe(|| handler(&context, args)));
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
        crate::metrics::record_error();
        reply_error(&context, err);
    }
    raw::REDISMODULE_OK as c_int
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

/// Registers a command with its callback, flags and key positions (first, last, step).
pub fn register(
    ctx: &Context,
    name: &CStr,
    callback: raw::RedisModuleCmdFunc,
    flags: &CStr,
    keys: (c_int, c_int, c_int),
) -> Result<(), String> {
    // SAFETY: called during module load with the load context; the C strings outlive it.
    let status = unsafe {
        api!(RedisModule_CreateCommand)(
            ctx.ctx,
            name.as_ptr(),
            callback,
            flags.as_ptr(),
            keys.0,
            keys.1,
            keys.2,
        )
    };
    if status == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err(format!("cannot register {name:?}"))
    }
}

/// Registers `name` as a container command (no handler of its own) and each of
/// `subcommands` under it, keyless, with its own flags. `RL.POLICY x` for an unknown `x`
/// is then answered by the server itself.
pub fn register_container<'a>(
    ctx: &Context,
    name: &CStr,
    subcommands: impl IntoIterator<Item = (&'a CStr, raw::RedisModuleCmdFunc, &'a CStr)>,
) -> Result<(), String> {
    register(ctx, name, None, c"", (0, 0, 0))?;
    // SAFETY: called during module load; the name is a live C string.
    let parent = unsafe { api!(RedisModule_GetCommand)(ctx.ctx, name.as_ptr()) };
    if parent.is_null() {
        return Err(format!(
            "cannot find the container {name:?} just registered"
        ));
    }
    for (sub, callback, flags) in subcommands {
        // SAFETY: `parent` is the container registered above; the C strings are static.
        let status = unsafe {
            api!(RedisModule_CreateSubcommand)(
                parent,
                sub.as_ptr(),
                callback,
                flags.as_ptr(),
                0,
                0,
                0,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!(
                "cannot register the subcommand {sub:?} of {name:?}"
            ));
        }
    }
    Ok(())
}

/// Whether the command comes from this server's primary or from the AOF being loaded:
/// such commands are obeyed as they are, never refused by local settings.
pub fn from_primary_or_aof(ctx: &Context) -> bool {
    let from = (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) as i32;
    context_flags(ctx) & from != 0
}

/// Whether this server is a read-only replica (a client may not change its policies).
pub fn read_only_replica(ctx: &Context) -> bool {
    let replica = (raw::REDISMODULE_CTX_FLAGS_SLAVE | raw::REDISMODULE_CTX_FLAGS_READONLY) as i32;
    context_flags(ctx) & replica == replica
}

fn context_flags(ctx: &Context) -> i32 {
    // SAFETY: ctx.ctx is the live context of the running command.
    unsafe { api!(RedisModule_GetContextFlags)(ctx.ctx) }
}
