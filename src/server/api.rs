//! Access to the raw module API functions the module calls directly.
//!
//! The crate exposes each `RedisModule_*` function as an `Option`, `None` when the server
//! lacks it. [`missing_apis`] is checked once at load time, so that the module refuses to
//! load on a server without them instead of failing later, and [`api!`] can then expect.

use redis_module::raw;

/// The raw function `RedisModule_<name>`, known to exist since [`missing_apis`] passed.
macro_rules! api {
    ($name:ident) => {
        redis_module::raw::$name.expect(concat!(stringify!($name), " is checked at load"))
    };
}
pub(super) use api;

/// Names of the raw API functions the module needs and this server does not have.
pub fn missing_apis() -> Vec<&'static str> {
    let mut missing = Vec::new();
    macro_rules! check {
        ($($name:ident),* $(,)?) => {
            $(
                // SAFETY: copies the function pointer the crate filled in at load.
                if unsafe { raw::$name }.is_none() {
                    missing.push(stringify!($name));
                }
            )*
        };
    }
    check!(
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_StringDMA,
        RedisModule_StringTruncate,
        RedisModule_StringSet,
        RedisModule_CreateString,
        RedisModule_FreeString,
        RedisModule_StringPtrLen,
        RedisModule_GetAbsExpire,
        RedisModule_SetAbsExpire,
        RedisModule_SignalModifiedKey,
        RedisModule_Replicate,
        RedisModule_Milliseconds,
        RedisModule_GetContextFlags,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithMap,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithSimpleString,
        RedisModule_ReplyWithError,
        RedisModule_WrongArity,
        RedisModule_SetModuleOptions,
        RedisModule_CreateCommand,
        RedisModule_DeleteKey,
        RedisModule_RegisterInfoFunc,
        RedisModule_ReplyWithStringBuffer,
        RedisModule_ReplyWithNull,
        RedisModule_CreateDataType,
        RedisModule_SubscribeToServerEvent,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_GetCommand,
        RedisModule_CreateSubcommand,
        RedisModule_GetCommandKeys,
        RedisModule_Free,
        RedisModule_GetServerInfo,
        RedisModule_ServerInfoGetFieldSigned,
        RedisModule_ServerInfoGetFieldC,
        RedisModule_FreeServerInfo,
        RedisModule_SetCommandInfo,
        RedisModule_IsKeysPositionRequest,
        RedisModule_KeyAtPos,
        RedisModule_KeyAtPosWithFlags,
    );
    missing
}
