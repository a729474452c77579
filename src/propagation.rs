//! The core commands that carry the module's effects to replicas and the AOF (`SET key
//! value PXAT ms`, `DEL key`) must exist on this server. An operator can take them away
//! with `rename-command`; the module would then write without propagating, and replicas
//! and the AOF would silently differ from the primary. The command table is final when
//! modules load (renames are applied while the config is read), so the module checks once
//! at load and refuses to load without them. Each propagation's status is checked too
//! (`store`), as a second line of defence. `SETRANGE` and `PEXPIREAT`, which carry a large
//! value's small change (a lease renewed among thousands), are used only when present:
//! without them every write goes as `SET`.

use crate::server::command::command_known;
use redis_module::Context;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Whether `SETRANGE` and `PEXPIREAT` exist here, so that a large value changed in a few
/// bytes can be propagated as those bytes ([`patches_available`]). Without them the module
/// still loads, and propagates every write as `SET`.
static PATCHES: AtomicBool = AtomicBool::new(false);

/// The calls of a patch.
const PATCH_CALLS: [&[&[u8]]; 2] = [
    &[b"SETRANGE", b"k", b"0", b"v"],
    &[b"PEXPIREAT", b"k", b"1"],
];

/// Whether writes may be propagated as patches (`SETRANGE`, `PEXPIREAT`): known at load.
pub fn patches_available() -> bool {
    PATCHES.load(Relaxed)
}

/// The calls the module propagates, as the server must be able to look them up.
const PROPAGATED: [&[&[u8]]; 2] = [&[b"SET", b"k", b"v", b"PXAT", b"1"], &[b"DEL", b"k"]];

/// A command the module propagates its writes as, which this server does not know (its
/// name); the module then refuses to load rather than write without propagating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingCommand(pub String);

impl std::fmt::Display for MissingCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the command {} is missing (renamed or disabled with rename-command?); the module \
             propagates its writes as SET and DEL, so it refuses to load rather than write \
             without propagating",
            self.0
        )
    }
}

impl std::error::Error for MissingCommand {}

/// `Err` names the first propagated command this server does not know.
pub fn check_commands_exist(ctx: &Context) -> Result<(), MissingCommand> {
    PATCHES.store(
        PATCH_CALLS.iter().all(|call| command_known(ctx, call)),
        Relaxed,
    );
    for call in PROPAGATED {
        if !command_known(ctx, call) {
            let name = String::from_utf8_lossy(call.first().copied().unwrap_or_default());
            return Err(MissingCommand(name.into_owned()));
        }
    }
    Ok(())
}
