//! The server events that can give a write someone to reach: this server's role changes,
//! a replica comes or goes, a child process is forked (a full sync to a replica starts
//! with one).

use super::api::api;
use redis_module::raw;
use redis_module::Context;
use std::os::raw::{c_int, c_void};

/// Told of the server events after which a write may reach a replica.
pub trait ReplicationListener {
    /// This server became a primary or a replica, or a replica of it came online or went
    /// offline.
    fn replication_changed();
    /// A child process was forked: a save, an AOF rewrite, or a full sync to a replica.
    fn child_forked();
}

/// A server event the server refused to tell the module of (its name); the module then
/// refuses to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRefused(pub &'static str);

impl std::fmt::Display for EventRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server refused the '{}' event", self.0)
    }
}

impl std::error::Error for EventRefused {}

/// Subscribes `L` to the events it is told of; `Err` names an event the server refused.
pub fn subscribe_to_replication<L: ReplicationListener>(ctx: &Context) -> Result<(), EventRefused> {
    let events = [
        (
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            "replication role changed",
        ),
        (raw::REDISMODULE_EVENT_REPLICA_CHANGE, "replica change"),
        (raw::REDISMODULE_EVENT_FORK_CHILD, "fork child"),
    ];
    for (id, name) in events {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: called during load with the load context; the callback is a plain
        // function that reads nothing through its pointers.
        let status = unsafe {
            api!(RedisModule_SubscribeToServerEvent)(ctx.ctx, event, Some(on_event::<L>))
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(EventRefused(name));
        }
    }
    Ok(())
}

extern "C" fn on_event<L: ReplicationListener>(
    _ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if event.id != raw::REDISMODULE_EVENT_FORK_CHILD {
        L::replication_changed();
    } else if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
        L::child_forked();
    }
}
