//! The core commands that carry the module's effects to replicas and the AOF (`SET key
//! value PXAT ms`, `DEL key`) must exist on this server. An operator can take them away
//! with `rename-command`; the module would then write without propagating, and replicas
//! and the AOF would silently differ from the primary. The command table is final when
//! modules load (renames are applied while the config is read), so the module checks once
//! at load and refuses to load without them. Each propagation's status is checked too
//! (`store`), as a second line of defence.

use crate::ffi::api;
use crate::strings;
use redis_module::Context;
use std::os::raw::c_int;

/// The calls the module propagates, as the server must be able to look them up.
const PROPAGATED: [&[&[u8]]; 2] = [&[b"SET", b"k", b"v", b"PXAT", b"1"], &[b"DEL", b"k"]];

/// `Err` names the first propagated command this server does not know.
pub fn check_commands_exist(ctx: &Context) -> Result<(), String> {
    for call in PROPAGATED {
        if !command_exists(ctx, call) {
            let name = String::from_utf8_lossy(call.first().copied().unwrap_or_default());
            return Err(format!(
                "the command {name} is missing (renamed or disabled with rename-command?); \
                 the module propagates its writes as SET and DEL, so it refuses to load \
                 rather than write without propagating"
            ));
        }
    }
    Ok(())
}

/// Whether the server can look up the command of `call` (a whole call, so that the lookup
/// also checks its arity and finds its key).
fn command_exists(ctx: &Context, call: &[&[u8]]) -> bool {
    let mut argv: Vec<_> = call.iter().map(|arg| strings::create(arg)).collect();
    let mut keys: c_int = 0;
    // SAFETY: argv holds live server strings for the duration of the call; the returned
    // array, if any, is the server's allocation and is freed with RedisModule_Free.
    let found = unsafe {
        let positions = api!(RedisModule_GetCommandKeys)(
            ctx.ctx,
            argv.as_mut_ptr(),
            argv.len() as c_int,
            &mut keys,
        );
        if positions.is_null() {
            false
        } else {
            api!(RedisModule_Free)(positions.cast());
            true
        }
    };
    argv.into_iter().for_each(strings::free);
    found
}
