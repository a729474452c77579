//! ratelimit-core: the pure rate-limiting core of redis-ratelimit.
//!
//! Nothing in here knows about Redis: no import of the Redis module API, no clock, no I/O.
//! Commands parse their arguments with [`args`], read the stored state, hand the core plain
//! numbers together with the server's clock reading, and store what the core returns. That
//! keeps every decision unit- and property-testable with a clock the test controls.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod algorithm;
pub mod args;
pub mod bucket;
pub mod cell;
pub mod codec;
pub mod decision;
pub mod duration;
pub mod encoding;
pub mod fixed_window;
pub mod gcra;
pub mod limiter;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

#[cfg(test)]
mod accuracy;
#[cfg(test)]
mod scenario;
