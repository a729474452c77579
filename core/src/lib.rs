//! ratelimit-core: the pure rate-limiting core of redis-ratelimit.
//!
//! The algorithms ([`fixed_window`], [`sliding_window`], [`sliding_log`],
//! [`token_bucket`], [`gcra`]), window [`duration`]s and [`calendar`] windows, the rule
//! grammar and its validation ([`args`], [`cell`] for `CL.THROTTLE`), how a state is stored
//! ([`encoding`]) and what a check answers ([`decision`]), tied together by
//! [`limiter::run`]. The Redis module, the
//! HTTP gateway and the fuzz targets all link this one crate, so a rule means the same in
//! each of them.
//!
//! Nothing in here knows about Redis: this crate does not depend on `redis-module` (its
//! dependencies are `smallvec`, and `chrono` with `chrono-tz` for the calendar windows'
//! time zones), has no clock and does no I/O, and `unsafe` code is
//! forbidden in it. Commands parse their arguments with [`args`], read the stored state,
//! hand the core plain numbers together with the server's clock reading, and store what the
//! core returns. That keeps every decision unit- and property-testable with a clock the
//! test controls.
//!
//! # Example
//!
//! Two hits per second on a key kept in memory: the third hit in the same second is denied
//! and told when to retry.
//!
//! ```
//! use ratelimit_core::algorithm::Quota;
//! use ratelimit_core::limiter::{run, Action, AlgorithmKind, Limits, Write};
//!
//! let tiers = [Quota::new(2, 1_000)].into_iter().collect();
//! let limits = Limits { algorithm: AlgorithmKind::Fixed, tiers };
//! let now_ms = 1_796_083_200_250; // the server's clock, 250 ms into a second
//! let mut key: Option<(Vec<u8>, i64)> = None; // the stored value and its absolute expiry
//! let mut answers = Vec::new();
//! for _ in 0..3 {
//!     let stored = key.clone();
//!     let value = stored.as_ref().map(|(value, _)| value.as_slice());
//!     let expiry = || stored.as_ref().map(|&(_, expires_at_ms)| expires_at_ms);
//!     let outcome = run(&limits, Action::Hit { cost: 1 }, value, expiry, now_ms)?;
//!     if let Write::Set { value, expires_at_ms } = outcome.write {
//!         key = Some((value.to_vec(), expires_at_ms));
//!     }
//!     answers.push((outcome.decision.allowed, outcome.decision.retry_after_ms));
//! }
//! assert_eq!(answers, [(true, 0), (true, 0), (false, 750)]);
//! // A plain count, as INCR would have written it, expiring with its window.
//! assert_eq!(key, Some((b"2".to_vec(), 1_796_083_201_000)));
//! # Ok::<(), ratelimit_core::limiter::LimiterError>(())
//! ```
//!
//! [`limiter::MemoryKey`] keeps that value and expiry for a caller without a server.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod algorithm;
pub mod args;
pub mod bucket;
pub mod calendar;
pub mod cell;
mod checked;
pub mod codec;
pub mod decision;
pub mod duration;
pub mod encoding;
pub mod fixed_window;
pub mod gcra;
pub mod lease;
pub mod limiter;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

#[cfg(test)]
mod accuracy;
#[cfg(test)]
mod scenario;
