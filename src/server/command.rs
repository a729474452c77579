//! Commands: the callback the server calls, the arguments it passes, and registration.

use super::api::api;
use super::string::ServerStr;
use redis_module::{raw, Context};
use std::ffi::CStr;
use std::os::raw::c_int;

/// The arguments of the running command (the command name first), as the server holds
/// them: nothing is copied or reference-counted on the way in.
#[derive(Clone, Copy)]
pub struct Args<'ctx> {
    argv: &'ctx [ServerStr<'ctx>],
}

impl<'ctx> Args<'ctx> {
    /// Wraps the server's argument vector.
    ///
    /// # Safety
    /// `argv` must point to `argc` live strings that stay alive and unchanged for `'ctx`.
    #[inline]
    unsafe fn new(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Self {
        let len = usize::try_from(argc).unwrap_or(0);
        let argv = if argv.is_null() || len == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's promise; ServerStr is one string pointer
            // (repr(transparent)), so the vector is a slice of them.
            unsafe { std::slice::from_raw_parts(argv.cast::<ServerStr<'ctx>>(), len) }
        };
        Args { argv }
    }

    /// How many arguments, the command name included.
    #[inline]
    pub fn len(&self) -> usize {
        self.argv.len()
    }

    /// Whether there are no arguments at all (the server always passes the name).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.argv.is_empty()
    }

    /// The argument at `index` as the server's string (for keys and propagation).
    #[inline]
    pub fn string(&self, index: usize) -> Option<ServerStr<'ctx>> {
        self.argv.get(index).copied()
    }

    /// The bytes of the arguments from `start` on, borrowed from the server.
    #[inline]
    pub fn bytes_from(&self, start: usize) -> impl ExactSizeIterator<Item = &'ctx [u8]> + 'ctx {
        self.argv
            .get(start..)
            .unwrap_or(&[])
            .iter()
            .map(|s| s.bytes())
    }
}

/// Whether the server calls a `getkeys-api` command only to learn where its keys are
/// (Redis 7.0's Cluster routing does, its key specs aside): the handler then reports
/// them with [`report_keys`] and neither runs nor replies.
#[inline]
pub fn is_keys_position_request(ctx: &Context) -> bool {
    // SAFETY: ctx is the live context of the running command.
    unsafe { api!(RedisModule_IsKeysPositionRequest)(ctx.ctx) != 0 }
}

/// Reports the arguments at `positions` as keys, for a keys position request, with the
/// flags of the command's key spec (ACL key patterns read them: a key reported without
/// flags needs read and write permission); positions outside `args` are skipped (the
/// server would read past its argument vector).
pub fn report_keys(ctx: &Context, args: Args<'_>, positions: std::ops::Range<usize>, writes: bool) {
    let flags = c_int::try_from(CountedKeys::flags(writes)).unwrap_or(0);
    for position in positions {
        let Ok(at) = c_int::try_from(position) else {
            return;
        };
        if position == 0 || position >= args.len() {
            return;
        }
        // SAFETY: ctx is the live context of a keys position request, and `at` indexes an
        // argument of its vector (checked above).
        unsafe { api!(RedisModule_KeyAtPosWithFlags)(ctx.ctx, at, flags) };
    }
}

/// Why registering or describing a command failed; the module then refuses to load, and
/// the server log says this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterError {
    /// The server refused to create the command (its name).
    Command(String),
    /// The container just registered cannot be found (its name).
    MissingContainer(String),
    /// The server refused a subcommand (its name, then the container's).
    Subcommand(String, String),
    /// There is no registered command of that name to describe.
    NothingToDescribe(String),
    /// The server refused the docs of the command (its name).
    Docs(String),
}

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegisterError::Command(name) => write!(f, "cannot register {name:?}"),
            RegisterError::MissingContainer(name) => {
                write!(f, "cannot find the container {name:?} just registered")
            }
            RegisterError::Subcommand(sub, name) => {
                write!(f, "cannot register the subcommand {sub:?} of {name:?}")
            }
            RegisterError::NothingToDescribe(name) => write!(f, "no command {name:?} to describe"),
            RegisterError::Docs(name) => write!(f, "the server refused the docs of {name:?}"),
        }
    }
}

impl std::error::Error for RegisterError {}

/// A C string's text for an error message.
pub(super) fn shown(name: &CStr) -> String {
    name.to_string_lossy().into_owned()
}

/// What the server calls for a command.
pub type Callback = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// A command the module implements: [`callback::<C>`](callback) is what it registers.
pub trait Command {
    /// Runs the command and writes its reply. Handlers never see the raw pointers.
    fn run(ctx: &Context, args: Args<'_>);
}

/// The callback of command `C`: wraps the server's context and arguments for the
/// duration of the call and runs it.
///
/// # Safety
/// Only the server calls it, with a command's live context and argument vector.
pub unsafe extern "C" fn callback<C: Command>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    // SAFETY: the server passes `argc` live arguments that stay alive and unchanged until
    // the callback returns; `C::run` takes them for any lifetime, so cannot keep them.
    let args = unsafe { Args::new(argv, argc) };
    C::run(&context, args);
    raw::REDISMODULE_OK as c_int
}

/// Registers a command with its callback, flags and key positions (first, last, step).
pub fn register(
    ctx: &Context,
    name: &CStr,
    callback: Option<Callback>,
    flags: &CStr,
    keys: (c_int, c_int, c_int),
) -> Result<(), RegisterError> {
    // SAFETY: called during module load with the load context; the C strings outlive the
    // call (the server copies them).
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
        Err(RegisterError::Command(shown(name)))
    }
}

/// Registers `name` as a container command (no handler of its own) and each of
/// `subcommands` under it, keyless, with its own flags. `RL.POLICY x` for an unknown `x`
/// is then answered by the server itself.
pub fn register_container<'a>(
    ctx: &Context,
    name: &CStr,
    subcommands: impl IntoIterator<Item = (&'a CStr, Option<Callback>, &'a CStr)>,
) -> Result<(), RegisterError> {
    register(ctx, name, None, c"", (0, 0, 0))?;
    // SAFETY: called during module load; the name is a live C string.
    let parent = unsafe { api!(RedisModule_GetCommand)(ctx.ctx, name.as_ptr()) };
    if parent.is_null() {
        return Err(RegisterError::MissingContainer(shown(name)));
    }
    for (sub, callback, flags) in subcommands {
        // SAFETY: `parent` is the container registered above; the C strings are live for
        // the call.
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
            return Err(RegisterError::Subcommand(shown(sub), shown(name)));
        }
    }
    Ok(())
}

/// Whether the server can look up the command of `call` (a whole call: the lookup also
/// checks its arity and finds its keys).
pub fn command_known(ctx: &Context, call: &[&[u8]]) -> bool {
    let mut argv: Vec<super::string::ServerString> = call
        .iter()
        .map(|arg| super::string::ServerString::new(arg))
        .collect();
    let mut keys: c_int = 0;
    // SAFETY: argv holds live server strings for the duration of the call (ServerString is
    // one string pointer); the returned array, if any, is the server's allocation and is
    // freed with RedisModule_Free.
    unsafe {
        let positions = api!(RedisModule_GetCommandKeys)(
            ctx.ctx,
            argv.as_mut_ptr().cast::<*mut raw::RedisModuleString>(),
            argv.len() as c_int,
            &mut keys,
        );
        if positions.is_null() {
            false
        } else {
            api!(RedisModule_Free)(positions.cast());
            true
        }
    }
}

/// Keys counted by an argument, as `numkeys key [key ...]`: the key spec of a command
/// registered without key positions (`0, 0, 0`), which Cluster routes by (and answers
/// `CROSSSLOT` for), ACL key patterns apply to, and `COMMAND GETKEYS` reads.
#[derive(Debug, Clone, Copy)]
pub struct CountedKeys {
    /// The argument index of the count (1: right after the name); the keys follow it.
    pub count_at: c_int,
    /// The command may write its keys (else it only reads them).
    pub writes: bool,
}

impl CountedKeys {
    /// The arity that makes the count present: at least `count_at + 1` arguments.
    pub(super) fn arity(self) -> c_int {
        self.count_at.saturating_add(1).saturating_neg()
    }

    /// The key spec, and the zeroed one that ends the server's array.
    /// The key flags: read, write and update for a command that writes, else read only.
    fn flags(writes: bool) -> u32 {
        if writes {
            raw::REDISMODULE_CMD_KEY_RW
                | raw::REDISMODULE_CMD_KEY_ACCESS
                | raw::REDISMODULE_CMD_KEY_UPDATE
        } else {
            raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS
        }
    }

    pub(super) fn specs(self) -> [raw::RedisModuleCommandKeySpec; 2] {
        let flags = Self::flags(self.writes);
        let counted = raw::RedisModuleCommandKeySpec {
            notes: std::ptr::null(),
            flags: u64::from(flags),
            begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
            bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
                index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 {
                    pos: self.count_at,
                },
            },
            find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM,
            fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                keynum: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
                    keynumidx: 0,
                    firstkey: 1,
                    keystep: 1,
                },
            },
        };
        let end = raw::RedisModuleCommandKeySpec {
            notes: std::ptr::null(),
            flags: 0,
            begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INVALID,
            bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
                index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 0 },
            },
            find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_OMITTED,
            fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                    lastkey: 0,
                    keystep: 0,
                    limit: 0,
                },
            },
        };
        [counted, end]
    }
}
