//! What `COMMAND DOCS` and `COMMAND INFO` show of a command: summary, complexity, since,
//! tips, arguments, and the key spec of keys that follow a count, set with
//! `RedisModule_SetCommandInfo` (Redis 7.0, Valkey) once the command is registered.

use super::api::api;
use super::command::{shown, CountedKeys, RegisterError};
use redis_module::{raw, Context};
use std::ffi::CStr;
use std::os::raw::c_int;

/// What `COMMAND DOCS` and `COMMAND INFO` show of a command beyond its flags (written in
/// `commands/*.json`; `build.rs` turns them into these consts).
#[derive(Debug, Clone, Copy)]
pub struct CommandDoc {
    /// The registered name; `RL.POLICY|SET` for a subcommand.
    pub name: &'static CStr,
    /// Its syntax line, as its page shows it (`RL.POLICY GET name`).
    pub syntax: &'static CStr,
    /// The flags it is registered with (`write deny-oom`), as `command_flags` lists them.
    pub flags: &'static CStr,
    /// One line on what it does.
    pub summary: &'static CStr,
    /// Its time complexity.
    pub complexity: &'static CStr,
    /// The module version that added it.
    pub since: &'static CStr,
    /// The server's command tips, space-separated (`nondeterministic_output`).
    pub tips: Option<&'static CStr>,
    /// Keys that follow a count: the key spec the module sets itself.
    pub counted_keys: Option<CountedKeys>,
    /// Its arguments, in order.
    pub args: &'static [ArgDoc],
}

/// An argument's type, as the module API and the command JSON name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    /// Any bytes.
    String,
    /// An integer.
    Integer,
    /// A floating-point number.
    Double,
    /// A key (the command's first key spec).
    Key,
    /// A glob-style pattern.
    Pattern,
    /// A Unix time.
    UnixTime,
    /// A keyword alone.
    PureToken,
    /// One of its subarguments.
    OneOf,
    /// Its subarguments, in order.
    Block,
}

/// One argument of a command, with its subarguments for a one-of or a block.
#[derive(Debug, Clone, Copy)]
pub struct ArgDoc {
    /// Its name (what redis-cli shows for a value).
    pub name: &'static CStr,
    /// Its type.
    pub kind: ArgKind,
    /// The keyword before it, if any (`ALGO`).
    pub token: Option<&'static CStr>,
    /// What it means.
    pub summary: Option<&'static CStr>,
    /// It may be left out.
    pub optional: bool,
    /// It may be repeated.
    pub multiple: bool,
    /// Its keyword is repeated with each repetition.
    pub multiple_token: bool,
    /// Its subarguments.
    pub args: &'static [ArgDoc],
}

impl ArgKind {
    fn raw(self) -> raw::RedisModuleCommandArgType {
        match self {
            ArgKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
            ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
            ArgKind::Double => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_DOUBLE,
            ArgKind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
            ArgKind::Pattern => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PATTERN,
            ArgKind::UnixTime => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
            ArgKind::PureToken => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
            ArgKind::OneOf => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
            ArgKind::Block => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
        }
    }
}

/// The server's argument array for `args`, ended by a zeroed entry, with the arrays of
/// their subarguments kept in `arrays` (the returned pointer, and those inside it, stay
/// valid while `arrays` lives: moving a Vec does not move its elements).
fn raw_args(
    args: &[ArgDoc],
    arrays: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    let text = |value: Option<&CStr>| value.map_or(std::ptr::null(), CStr::as_ptr);
    let mut array: Vec<raw::RedisModuleCommandArg> = args
        .iter()
        .map(|arg| {
            let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
            for (set, flag) in [
                (arg.optional, raw::REDISMODULE_CMD_ARG_OPTIONAL),
                (arg.multiple, raw::REDISMODULE_CMD_ARG_MULTIPLE),
                (arg.multiple_token, raw::REDISMODULE_CMD_ARG_MULTIPLE_TOKEN),
            ] {
                if set {
                    flags |= flag;
                }
            }
            raw::RedisModuleCommandArg {
                name: arg.name.as_ptr(),
                type_: arg.kind.raw(),
                // The first key spec (the derived one, or the counted one set here); the
                // server wants -1 for an argument that is no key.
                key_spec_index: if arg.kind == ArgKind::Key { 0 } else { -1 },
                token: text(arg.token),
                summary: text(arg.summary),
                since: std::ptr::null(),
                flags: c_int::try_from(flags).unwrap_or(0),
                deprecated_since: std::ptr::null(),
                subargs: if arg.args.is_empty() {
                    std::ptr::null_mut()
                } else {
                    raw_args(arg.args, arrays)
                },
                display_text: std::ptr::null(),
            }
        })
        .collect();
    array.push(raw::RedisModuleCommandArg {
        name: std::ptr::null(),
        type_: 0,
        key_spec_index: 0,
        token: std::ptr::null(),
        summary: std::ptr::null(),
        since: std::ptr::null(),
        flags: 0,
        deprecated_since: std::ptr::null(),
        subargs: std::ptr::null_mut(),
        display_text: std::ptr::null(),
    });
    let first = array.as_mut_ptr();
    arrays.push(array);
    first
}

/// Sets what `COMMAND DOCS` shows of the registered command `doc.name` (summary,
/// complexity, since, tips and arguments), and its key spec when its keys follow a count
/// (a command registered with key positions keeps them).
///
/// No arity, the module checks its arguments itself, except with a key spec: the command
/// then needs at least the arguments up to the count. The servers' key search (for ACL key
/// patterns, Cluster routing and `COMMAND GETKEYS`, all before the module runs) reads the
/// count without checking that it is there (Redis 7.0 and Valkey 8.1 check the count's
/// offset, not its position, against the number of arguments), so `RL.MHIT` alone from a
/// user with key patterns would crash the server; with the arity the server refuses it
/// first, with its own "wrong number of arguments".
pub fn set_docs(ctx: &Context, doc: &CommandDoc) -> Result<(), RegisterError> {
    // SAFETY: called during load; the name is a live C string.
    let command = unsafe { api!(RedisModule_GetCommand)(ctx.ctx, doc.name.as_ptr()) };
    if command.is_null() {
        return Err(RegisterError::NothingToDescribe(shown(doc.name)));
    }
    let keys = doc.counted_keys;
    let mut specs = keys.map(CountedKeys::specs);
    let mut arrays = Vec::new();
    let args = if doc.args.is_empty() {
        std::ptr::null_mut()
    } else {
        raw_args(doc.args, &mut arrays)
    };
    let info = raw::RedisModuleCommandInfo {
        version: &INFO_VERSION,
        summary: doc.summary.as_ptr(),
        complexity: doc.complexity.as_ptr(),
        since: doc.since.as_ptr(),
        history: std::ptr::null_mut(),
        tips: doc.tips.map_or(std::ptr::null(), CStr::as_ptr),
        arity: keys.map_or(0, CountedKeys::arity),
        key_specs: specs
            .as_mut()
            .map_or(std::ptr::null_mut(), |specs| specs.as_mut_ptr()),
        args,
    };
    // SAFETY: `command` was just looked up; the info, its strings, the key specs (an array
    // ended by a zeroed spec) and the argument arrays (each ended by a zeroed argument,
    // alive in `arrays`) are live for the call, and the server copies everything it keeps.
    let status = unsafe { api!(RedisModule_SetCommandInfo)(command, &info) };
    drop(arrays);
    if status == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err(RegisterError::Docs(shown(doc.name)))
    }
}

/// The layout version the server checks the command info against (the header's
/// `RedisModule_CurrentCommandInfoVersion`, a `static` that bindings cannot reach).
static INFO_VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
};
