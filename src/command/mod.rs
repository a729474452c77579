//! Command handlers: parse -> load -> core -> store -> propagate -> reply.
//!
//! Commands are registered with plain C callbacks ([`command_handler!`]) that read the
//! server's argument vector in place ([`Args`]): no argument is copied or
//! reference-counted on the way in. Every handler runs inside [`run_guarded`], which catches panics (a panic
//! that reached Redis would kill the server) and writes every reply itself, so no reply
//! path that could panic on odd bytes is ever used.

pub mod lease;
pub mod limit;
pub mod multi;
pub mod reset;
pub mod take;
pub mod testing;
pub mod throttle;

use crate::server::context::ContextFlags;
use crate::server::reply::Reply;
use crate::store::StoreError;
use ratelimit_core::args::ArgError;
use ratelimit_core::limiter::LimiterError;
use redis_module::Context;
use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use crate::server::command::Args;

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
            // Replied from a static text (`WRONGTYPE`), which a test holds to `reply`.
            StoreError::WrongType => CommandError::WrongType,
            other => CommandError::Message(other.reply().into()),
        }
    }
}

impl From<LimiterError> for CommandError {
    fn from(err: LimiterError) -> Self {
        CommandError::Message(err.message().into())
    }
}

/// What a handler returns: `Ok` once it has replied.
pub type CommandResult = Result<(), CommandError>;

/// A command handler: the context and the arguments (the command name first).
pub type Handler = fn(&Context, Args<'_>) -> CommandResult;

const WRONGTYPE: &CStr = c"WRONGTYPE Operation against a key holding the wrong kind of value";
const INTERNAL_ERROR: &CStr =
    c"ERR internal error in the ratelimit module; the server log has the details";

/// Defines `$name`, the callback registered for a command (see `lib.rs`), running
/// `$handler` under [`run_guarded`]. The callback itself is
/// [`server::command::callback`](crate::server::command::callback), so no handler touches a
/// raw pointer.
macro_rules! command_handler {
    ($name:ident, $handler:expr) => {
        #[allow(non_upper_case_globals)]
        pub const $name: $crate::server::command::Callback = {
            struct Handler;
            impl $crate::server::command::Command for Handler {
                #[inline]
                fn run(ctx: &redis_module::Context, args: $crate::server::command::Args<'_>) {
                    $crate::command::run_guarded(ctx, args, $handler)
                }
            }
            $crate::server::command::callback::<Handler>
        };
    };
}
pub(crate) use command_handler;

/// Runs `handler`, catching any panic, and replies with its error if it failed.
#[inline]
pub fn run_guarded(ctx: &Context, args: Args<'_>, handler: Handler) {
    let outcome = catch_unwind(AssertUnwindSafe(|| handler(ctx, args)));
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
        reply_error(ctx, err);
    }
}

fn reply_error(ctx: &Context, err: CommandError) {
    let reply = Reply::to(ctx);
    match err {
        CommandError::WrongArity => reply.wrong_arity(),
        CommandError::WrongType => reply.error(WRONGTYPE),
        CommandError::Message(text) => {
            let text =
                CString::new(text.into_owned()).unwrap_or_else(|_| INTERNAL_ERROR.to_owned());
            reply.error(&text);
        }
    }
}

/// Whether the command comes from this server's primary or from the AOF being loaded:
/// such commands are obeyed as they are, never refused by local settings.
pub fn from_primary_or_aof(ctx: &Context) -> bool {
    ContextFlags::of(ctx).replicated_or_loading()
}

/// Whether this server is a read-only replica (a client may not change its policies).
pub fn read_only_replica(ctx: &Context) -> bool {
    ContextFlags::of(ctx).read_only_replica()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's errors reply their code and Display text; `WrongType` is replied from
    /// the static `WRONGTYPE`, which must say the same.
    #[test]
    fn store_errors_reply_their_code_and_display_text() {
        let wrong_type = StoreError::WrongType;
        assert_eq!(
            wrong_type.to_string(),
            "Operation against a key holding the wrong kind of value"
        );
        assert_eq!(Some(wrong_type.reply().as_str()), WRONGTYPE.to_str().ok());
        let lost = StoreError::NotPropagated("RL.X".into());
        let text = "cannot propagate RL.X to replicas and the AOF (is RL.X renamed?): nothing \
                    was written";
        assert_eq!(lost.to_string(), text);
        let CommandError::Message(reply) = CommandError::from(lost) else {
            panic!("a failed propagation is an ERR reply");
        };
        assert_eq!(reply, format!("ERR {text}"));
        let _: Box<dyn std::error::Error> = Box::new(StoreError::WrongType);
    }
}
