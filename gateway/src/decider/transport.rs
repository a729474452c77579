//! The one seam between the decision and Redis: a command out, a reply (or an error) back.
//! [`super::redis::Backend`] is the real one; the decision's unit tests give it a
//! scripted Redis, so that stacking, give-back, refunds, the deny cache, the breaker, local
//! limits and leases are tested without a server.

use super::redis::Backend;
use redis::{Cmd, RedisResult, Value};
use std::future::Future;

/// What the decider needs of Redis.
pub trait Transport: Clone + Send + Sync + 'static {
    /// `cmd`; in Redis Cluster sent to the primary of `route_key`'s slot when given (for
    /// commands whose first argument is not a key, `RL.MHIT numkeys key ...`).
    fn call(
        &self,
        cmd: &Cmd,
        route_key: Option<&str>,
    ) -> impl Future<Output = RedisResult<Value>> + Send;

    /// Whether keys in different slots must go in different calls.
    fn is_cluster(&self) -> bool;

    /// The server the calls go to (`host:port`), for the log; `None` when there is no one
    /// server to name (a Cluster).
    fn node(&self) -> Option<String>;
}

/// The module's commands go out as they are, as the Functions library's `FCALL` when the
/// probe found the library, or not at all while neither backend is usable: the choice is
/// [`Backend::outgoing`]'s, here, and nothing above this knows it. (A one-key `FCALL`
/// routes by its key in a cluster by itself.)
impl Transport for Backend {
    async fn call(&self, cmd: &Cmd, route_key: Option<&str>) -> RedisResult<Value> {
        let cmd = &*self.outgoing(cmd)?;
        let reply = match route_key {
            Some(key) => self.call_for_key(cmd, key).await,
            None => Backend::call(self, cmd).await,
        };
        if let Err(error) = &reply {
            self.saw(error);
        }
        reply
    }

    fn is_cluster(&self) -> bool {
        Backend::is_cluster(self)
    }

    fn node(&self) -> Option<String> {
        Backend::node(self)
    }
}
