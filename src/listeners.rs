//! Whether a write made now can reach anyone: a replica or the AOF.
//!
//! The server itself propagates a write only when something listens: the AOF is on, or
//! this server is a primary with replicas or a replication backlog. A write that nothing
//! receives is lost to no one, since a replica that attaches later gets a full sync of the
//! dataset, and turning the AOF on later rewrites it from the dataset. `RedisModule_Replicate`
//! does not skip that case itself before its costly part (looking the command up by name and
//! building its arguments, about 2,500 instructions per write), so the module skips it.
//!
//! It decides conservatively:
//! - while the AOF is on (read per write from the context's flags), it propagates;
//! - once this server has been a replica, or has had a replica or a replication backlog,
//!   it propagates from then on, for good: a replica that went away may come back and
//!   resynchronise from the backlog;
//! - it learns that from `INFO replication` at its first write after load and after every
//!   fork (a full sync to a new replica starts with one), and from the events of a role
//!   change and of a replica coming or going.
//!
//! A write it does not propagate is still counted as a change for the save points, as a
//! propagated one is (`server::context::count_change_unpropagated`, which propagates
//! nothing whatever listens: the `RL.*` command itself never reaches a replica or the AOF).

use crate::server::context::ContextFlags;
use crate::server::events::ReplicationListener;
use crate::server::info;
use redis_module::Context;
use std::sync::atomic::{AtomicU8, Ordering};

/// Not known yet: `INFO replication` is read at the next write.
const UNKNOWN: u8 = 0;
/// No replica and no backlog, never a replica, since the last reading.
const NO_REPLICA: u8 = 1;
/// A replica may listen, for good.
const REPLICA_MAY_LISTEN: u8 = 2;

static REPLICATION: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether the running command's writes must be propagated.
#[inline]
pub fn someone_listens(ctx: &Context) -> bool {
    match REPLICATION.load(Ordering::Relaxed) {
        REPLICA_MAY_LISTEN => true,
        NO_REPLICA => aof_on(ctx),
        _ => {
            let replica = info::replication_may_listen(ctx);
            let state = if replica {
                REPLICA_MAY_LISTEN
            } else {
                NO_REPLICA
            };
            // A replica seen in between (an event) is never undone by this reading.
            let _ =
                REPLICATION.compare_exchange(UNKNOWN, state, Ordering::Relaxed, Ordering::Relaxed);
            replica || aof_on(ctx)
        }
    }
}

/// Whether writes are propagated for good (`INFO ratelimit`: `propagating_always`).
pub fn propagating_always() -> bool {
    REPLICATION.load(Ordering::Relaxed) == REPLICA_MAY_LISTEN
}

/// Whether the AOF is on or being turned on (`aof_state` is not off: the server feeds it).
#[inline]
fn aof_on(ctx: &Context) -> bool {
    ContextFlags::of(ctx).aof_on()
}

/// Records the server events that can give writes a listener.
pub struct Events;

impl ReplicationListener for Events {
    fn replication_changed() {
        REPLICATION.store(REPLICA_MAY_LISTEN, Ordering::Relaxed);
    }

    fn child_forked() {
        // The next write reads INFO replication again, unless a replica is already known.
        let _ =
            REPLICATION.compare_exchange(NO_REPLICA, UNKNOWN, Ordering::Relaxed, Ordering::Relaxed);
    }
}
