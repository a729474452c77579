//! The network side of the service: the listeners, where they bind (`listen`: an address
//! or a host name), what bounds them (connections in all and per client, with the
//! open-file limit they need), and the watch over each connection (idle, slow heads and
//! bodies). The front ends only see requests.

pub(crate) mod client_connections;
pub mod connection_limits;
pub(crate) mod connection_watch;
pub mod listen;
pub mod server;
