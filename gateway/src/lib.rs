//! rl-gateway as a library: everything but the binary's start-up, so that the fuzz targets
//! and the benchmarks reach the same request parsing, rule matching and key building that
//! the service runs. `src/main.rs` is the binary.

pub mod app;
pub mod config;
pub mod decider;
pub mod failure;
pub mod front;
pub mod headers;
pub mod heartbeat;
pub mod logging;
pub mod metrics;
pub mod module_grammar;
pub mod net;
pub mod reload;
pub mod request_body;
pub mod rules;
pub mod upstream;
pub mod verdict;
