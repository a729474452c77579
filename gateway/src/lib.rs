//! rl-gateway as a library: everything but the binary's start-up, so that the fuzz targets
//! and the benchmarks reach the same request parsing, rule matching and key building that
//! the service runs. `src/main.rs` is the binary. Items are `pub(crate)` unless the binary
//! needs them (the `pub` modules below) or the fuzz targets do ([`fuzzing`]).

#![warn(missing_docs)]

pub mod app;
pub mod config;
pub mod decider;
pub(crate) mod failure;
pub mod front;
pub(crate) mod headers;
pub mod healthcheck;
pub mod heartbeat;
pub mod logging;
pub(crate) mod metrics;
pub(crate) mod module_grammar;
pub mod net;
pub mod reload;
pub(crate) mod request_body;
pub(crate) mod rules;
pub(crate) mod upstream;
pub(crate) mod verdict;

/// What the fuzz targets (`fuzz/`) drive: the request parsing, rule matching, key building
/// and Envoy descriptor lookup the service runs, reached here so that the modules holding
/// them can stay private to the crate.
pub mod fuzzing {
    pub use crate::config::{parse, parse_rules, Mode};
    pub use crate::front::envoy::descriptors::{self, Unit};
    pub use crate::front::envoy::{MAX_ENTRIES, MAX_ENTRY_KEY_BYTES, MAX_ENTRY_VALUE_BYTES};
    pub use crate::rules::canonical::{canonicalize, EscapedSlashes, PathParameters, PathPolicy};
    pub use crate::rules::client_ip::{client_ip, is_trusted};
    pub use crate::rules::pattern::PathPattern;
    pub use crate::rules::{
        Counting, KeySource, Limit, OnFailure, RedisFailure, RequestFacts, Rule, RuleSet,
        MAX_KEY_BYTES, MAX_KEY_PREFIX_BYTES, MAX_RULE_NAME_BYTES,
    };
}
