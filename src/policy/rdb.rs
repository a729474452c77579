//! Policies in the RDB: saved as the auxiliary data of a module data type that has no keys.
//!
//! Servers that have `aux_save2` (Redis 7.2 and newer, Valkey) skip the auxiliary data when
//! there is no policy, so an RDB (or an AOF with its RDB preamble) written without policies
//! still loads on a server without the module. Redis 7.0 has only `aux_save`, which writes
//! its record into every RDB, and such an RDB needs the module to load; so there the
//! module saves policies only when loaded with `policies-in-rdb yes`, and refuses to define
//! policies otherwise (they would not survive a restart).
//!
//! Format (encoding version 1): the number of policies, then for each its name and the
//! arguments that define it (as `RL.POLICY GET` shows them), parsed again on load.

use super::registry;
use crate::config;
use crate::server::rdb::{
    has_aux_save2, register_aux_type, subscribe_to_loading as subscribe, AuxRecord,
    LoadingListener, RdbReader, RdbWriter,
};
use ratelimit_core::args::{parse_policy, policy_arguments, PolicyArgs, Settings};
use ratelimit_core::duration::LARGEST_WINDOW_MS;
use redis_module::Context;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

const ENCODING_VERSION: c_int = 1;

/// Whether policies can be defined: they are saved in the RDB on this server.
static PERSISTED: AtomicBool = AtomicBool::new(false);

/// Whether this server keeps policies across restarts (see the module docs).
pub fn policies_persist() -> bool {
    PERSISTED.load(Ordering::Relaxed)
}

/// Why policies cannot be kept in the RDB; the module then refuses to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistenceError {
    /// The server refused the data type whose auxiliary record holds the policies.
    DataType,
    /// The server refused to tell the module when a dataset starts loading.
    LoadingEvents,
}

impl std::fmt::Display for PersistenceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PersistenceError::DataType => "cannot create the data type that saves policies",
            PersistenceError::LoadingEvents => "cannot subscribe to loading events",
        })
    }
}

impl std::error::Error for PersistenceError {}

/// Registers the data type that carries the policies; called once at load.
pub fn register(ctx: &Context, opted_in_on_7_0: bool) -> Result<(), PersistenceError> {
    if !has_aux_save2() && !opted_in_on_7_0 {
        return Ok(());
    }
    if !register_aux_type::<Policies>(ctx, c"rl-policy", ENCODING_VERSION) {
        return Err(PersistenceError::DataType);
    }
    PERSISTED.store(true, Ordering::Relaxed);
    Ok(())
}

/// Empties the registry when a whole dataset starts loading (an RDB at startup or by
/// `DEBUG RELOAD`, a full sync from a primary, an AOF): the policies are then exactly those
/// it holds. Without this, an RDB without policies — which carries no record at all where
/// `aux_save2` leaves it out — would leave a replica with policies its primary lacks.
pub fn subscribe_to_loading(ctx: &Context) -> Result<(), PersistenceError> {
    if subscribe::<Policies>(ctx) {
        Ok(())
    } else {
        Err(PersistenceError::LoadingEvents)
    }
}

/// The policies' record in the RDB.
struct Policies;

impl LoadingListener for Policies {
    fn dataset_loading_starts() {
        let _ = std::panic::catch_unwind(|| registry::replace_all(Vec::new()));
    }
}

impl AuxRecord for Policies {
    /// Saves every policy; writes nothing when there is none (with `aux_save2` the server
    /// then leaves the record out).
    ///
    /// Like every callback, under the panic guard: a panic must not unwind into the
    /// server. Everything that could panic (reading the registry, spelling each
    /// definition) runs before the first byte is written, so a panic leaves a record that
    /// still loads: none where `aux_save2` lets the module leave it out, else an empty
    /// one. Either way the RDB then holds no policies, and the panic hook has logged why.
    fn save(rdb: &mut RdbWriter<'_>) {
        let prepared = std::panic::catch_unwind(prepare_save);
        let all = match prepared {
            Ok(all) => all,
            Err(_) => {
                redis_module::logging::log_warning(
                    "ratelimit: saving the policies failed (see the panic above); this RDB holds none",
                );
                Vec::new()
            }
        };
        if all.is_empty() && has_aux_save2() {
            return;
        }
        rdb.unsigned(all.len() as u64);
        for (name, args) in all {
            rdb.bytes(&name);
            rdb.unsigned(args.len() as u64);
            for arg in args {
                rdb.bytes(arg.as_bytes());
            }
        }
    }

    /// Replaces the policies with the RDB's.
    fn load(rdb: &mut RdbReader<'_>, encver: c_int) -> bool {
        let loaded =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| load_all(rdb, encver)));
        match loaded {
            Ok(Some(all)) => {
                registry::replace_all(all);
                true
            }
            _ => false,
        }
    }
}

/// Set by `RL.TESTING.PANIC-IN-SAVE` (testing commands only).
static PANIC_IN_NEXT_SAVE: AtomicBool = AtomicBool::new(false);

/// Makes the next save of the policies panic (see `command::testing`).
pub fn panic_in_next_save() {
    PANIC_IN_NEXT_SAVE.store(true, Ordering::Relaxed);
}

/// Each policy's name and the arguments that define it, ready to write.
fn prepare_save() -> Vec<(Vec<u8>, Vec<String>)> {
    if PANIC_IN_NEXT_SAVE.swap(false, Ordering::Relaxed) {
        panic!("RL.TESTING.PANIC-IN-SAVE: saving the policies panics");
    }
    registry::all()
        .into_iter()
        .map(|(name, definition)| (name, policy_arguments(&definition)))
        .collect()
}

fn load_all(rdb: &mut RdbReader<'_>, encver: c_int) -> Option<Vec<(Vec<u8>, PolicyArgs)>> {
    if encver > ENCODING_VERSION {
        return None;
    }
    // What was saved is obeyed whatever the local configs.
    let settings = Settings {
        max_window_ms: LARGEST_WINDOW_MS,
        max_log_limit: config::LARGEST_MAX_LOG_LIMIT,
        ..config::settings()
    };
    let count = rdb.unsigned()?;
    let mut all = Vec::new();
    for _ in 0..count {
        let name = rdb.bytes()?;
        let argc = rdb.unsigned()?;
        let mut args = Vec::new();
        for _ in 0..argc {
            args.push(rdb.bytes()?);
        }
        let definition = parse_policy(args.iter().map(Vec::as_slice), &settings).ok()?;
        all.push((name, definition));
    }
    Some(all)
}
