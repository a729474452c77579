//! How many connections one client holds at once (`[connections]
//! max_connections_per_client`). Without it, a single client can take every one of
//! `max_connections` with kept-alive or slow connections, and everyone else gets 503. A
//! client is its network as `[client_ip]` counts it (an IPv6 host holds a whole /64), and
//! the peers in `trusted_proxies` are not counted: every client behind them shares their
//! address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

pub(crate) struct ClientConnections {
    limit: usize,
    /// Connections held per client; a client with none has no entry, so the map never
    /// holds more entries than there are connections.
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection of a client; dropping it gives the place back.
pub(crate) struct Held {
    owner: Arc<ClientConnections>,
    client: IpAddr,
}

impl ClientConnections {
    pub(crate) fn new(limit: usize) -> Arc<ClientConnections> {
        Arc::new(ClientConnections {
            limit,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more connection of `client`, or `None` when it holds `limit`.
    pub(crate) fn try_hold(self: &Arc<Self>, client: IpAddr) -> Option<Held> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(client).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(Held {
            owner: self.clone(),
            client,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.owner.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.client) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_has_its_own_places_given_back_on_drop() {
        let connections = ClientConnections::new(2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let first = connections.try_hold(a).unwrap();
        let _second = connections.try_hold(a).unwrap();
        assert!(connections.try_hold(a).is_none(), "a holds 2");
        let _other = connections.try_hold(b).unwrap();
        drop(first);
        let _again = connections.try_hold(a).unwrap();
        assert!(connections.try_hold(a).is_none());
        drop(_again);
        drop(_second);
        let held = connections.held.lock().unwrap();
        assert_eq!(held.len(), 1, "a has no entry left");
    }
}
