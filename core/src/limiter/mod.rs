//! Multi-tier, all-or-nothing checks over any algorithm, and what a key's stored value
//! means for the request at hand.
//!
//! A request names an algorithm and one or more tiers (`limit` per `window`). Every tier is
//! checked; the units are counted in all of them or in none. The reply is the binding tier:
//! the smallest `remaining`, the longest `retry_after_ms`, the latest reset.
//!
//! **Changed parameters.** A key keeps the parameters it was written with. When a request
//! names other ones (another algorithm, window, limit or burst, or another number of
//! tiers), or when a stored state lasts longer than the algorithm's span from now (the
//! clock went back by more than a window), the key starts afresh from its usage: the units
//! the old state still counts (the largest over its tiers, at most each new tier's
//! capacity) are counted again under the new parameters, at `now`. So a change never grants
//! more than the new limit allows on top of what was already used, and never makes a client
//! wait longer than one new window. That renewal is written even when the hit is denied, so
//! the announced `retry_after_ms` holds. A limit change on a single-tier fixed window needs
//! no renewal: the count simply meets the new limit.
//!
//! The module is in three parts: [`AlgorithmKind`] and its dispatch ([`with_algorithm!`]),
//! what a stored value means ([`is_state`] and the reading of a key's prior state), and the
//! tiered check, refund and renewal. [`run`] ties them together.

mod algorithm_kind;
#[cfg(test)]
mod calendar_tests;
mod grant;
mod memory_key;
mod multi;
mod stored_value;
#[cfg(test)]
mod test_key;
mod tiered_check;

pub use self::algorithm_kind::AlgorithmKind;
pub use self::grant::{take, Grant};
pub use self::memory_key::MemoryKey;
pub use self::multi::{run_all, KeyCall, KeyOutcome, MultiAction, MultiOutcome};
pub use self::stored_value::is_state;
pub use crate::codec::Bytes as Value;
pub use crate::with_algorithm;

use self::stored_value::read_prior;
use self::tiered_check::{check, refund, starting_states, Counting};
use crate::algorithm::{Algorithm, OutOfRange, Quota};
use crate::decision::{Decision, NEVER};
use smallvec::SmallVec;

/// A request's tiers. Inline up to two, the common cases, so that a call allocates nothing.
pub type Tiers = SmallVec<[Quota; 2]>;

/// One item per tier, inline like [`Tiers`].
type PerTier<T> = SmallVec<[T; 2]>;

/// What a request asks for: an algorithm and its tiers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The algorithm.
    pub algorithm: AlgorithmKind,
    /// One or more tiers, all checked.
    pub tiers: Tiers,
}

/// What to do with the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Check and, when every tier allows, count `cost` units (RL.HIT).
    Hit {
        /// Units to count, >= 1.
        cost: i64,
    },
    /// Answer what [`Action::Hit`] would, writing nothing (RL.PEEK).
    Peek {
        /// Units to check, >= 1; 0 only for GCRA (CL.THROTTLE's quantity 0).
        cost: i64,
    },
    /// Give back up to `amount` units counted earlier (RL.REFUND).
    Refund {
        /// Units to give back, >= 1.
        amount: i64,
    },
}

/// What the key must become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Nothing changes: nothing is written or propagated.
    Nothing,
    /// Store `value`, expiring at the absolute `expires_at_ms`.
    Set {
        /// The encoded state.
        value: Value,
        /// Absolute expiry in ms: when the state is the same as no state.
        expires_at_ms: i64,
    },
    /// Remove the key: its state is now the same as no state.
    Delete,
}

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The binding tier's answer (see the module docs).
    pub decision: Decision,
    /// Each tier's own answer, in request order.
    pub tiers: PerTier<Decision>,
    /// The change to store.
    pub write: Write,
}

/// Why a request could not be answered.
///
/// [`Display`](std::fmt::Display) gives the text of the module's reply to RL.HIT and its
/// kin without its error code, and [`LimiterError::message`] the reply (`ERR ` and that
/// text), as for the argument errors. RL.MHIT quotes the Display text after the key it is
/// about; the lease commands answer with their own [`LeaseError`](crate::lease::LeaseError).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimiterError {
    /// The key holds a value this module did not write.
    NotOurs,
    /// The clock or a parameter is beyond what the arithmetic supports.
    OutOfRange,
}

impl LimiterError {
    /// The error reply: `ERR ` and then the [`Display`](std::fmt::Display) text.
    pub fn message(self) -> String {
        format!("ERR {self}")
    }
}

impl std::fmt::Display for LimiterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimiterError::NotOurs => "key holds a string that is not a ratelimit state",
            LimiterError::OutOfRange => {
                "limit, window, BURST and COST are too large together for the server clock"
            }
        })
    }
}

impl std::error::Error for LimiterError {}

impl From<OutOfRange> for LimiterError {
    fn from(_: OutOfRange) -> Self {
        LimiterError::OutOfRange
    }
}

/// Answers `action` for `limits` on a key holding `stored` (`None`: no key) at `now_ms`.
/// `expiry` gives the key's absolute expiry; it is asked only when a form keeps a time
/// there (a plain count, the short form) or a look needs the old state's end.
pub fn run(
    limits: &Limits,
    action: Action,
    stored: Option<&[u8]>,
    expiry: impl Fn() -> Option<i64>,
    now_ms: i64,
) -> Result<Outcome, LimiterError> {
    let step = match action {
        Action::Hit { cost } => Step::Hit(cost),
        Action::Peek { cost } => Step::Peek { cost, held: false },
        Action::Refund { amount } => Step::Refund(amount),
    };
    with_algorithm!(
        limits.algorithm,
        run_with(&limits.tiers, step, stored, expiry, now_ms)
    )
}

/// What RL.PEEK answers for `cost`, except that no tier counts it even when every tier
/// allows: a tier that allows reports what it has now, as a tier does when another tier
/// of its key denies. The answer for a key of a several-keys call that another key
/// denies ([`run_all`]). Writes nothing.
pub fn run_held(
    limits: &Limits,
    cost: i64,
    stored: Option<&[u8]>,
    expiry: impl Fn() -> Option<i64>,
    now_ms: i64,
) -> Result<Outcome, LimiterError> {
    let step = Step::Peek { cost, held: true };
    with_algorithm!(
        limits.algorithm,
        run_with(&limits.tiers, step, stored, expiry, now_ms)
    )
}

/// [`Action`] as [`run_with`] takes it: a look may also be held (see [`run_held`]).
#[derive(Debug, Clone, Copy)]
enum Step {
    Hit(i64),
    Peek { cost: i64, held: bool },
    Refund(i64),
}

fn run_with<A: Algorithm>(
    tiers: &[Quota],
    step: Step,
    stored: Option<&[u8]>,
    expiry: impl Fn() -> Option<i64>,
    now_ms: i64,
) -> Result<Outcome, LimiterError> {
    let (prior, lost_expiry) = read_prior::<A>(stored, &expiry, now_ms)?;
    let start = starting_states::<A>(prior, tiers, now_ms, lost_expiry)?;
    Ok(match step {
        Step::Hit(cost) => check::<A>(start, tiers, now_ms, cost, Counting::Writes)?,
        Step::Peek { cost, held } => {
            let renewed = start.renewed;
            let counting = if held {
                Counting::Held
            } else {
                Counting::Looks
            };
            let mut outcome = check::<A>(start, tiers, now_ms, cost, counting)?;
            // A look cannot write the renewal, so every later call renews again from the
            // old state: the wait that surely works lasts until the old state is gone.
            let decision = &mut outcome.decision;
            if renewed && !decision.allowed && decision.retry_after_ms != NEVER {
                let old_state_left = expiry().map_or(0, |end| end.saturating_sub(now_ms));
                decision.retry_after_ms = decision.retry_after_ms.max(old_state_left);
            }
            outcome
        }
        Step::Refund(amount) => refund::<A>(start, tiers, now_ms, amount)?,
    })
}

#[cfg(test)]
mod tests {
    use super::test_key::{fixed, Key, HOUR, T0};
    use super::*;

    #[test]
    fn peek_answers_like_hit_and_writes_nothing() {
        let limits = fixed(&[(3, HOUR)]);
        let mut key = Key::default();
        key.run(&limits, Action::Hit { cost: 1 }, T0);
        let peek = key.run(&limits, Action::Peek { cost: 2 }, T0 + 1);
        assert_eq!(peek.write, Write::Nothing);
        let hit = key.run(&limits, Action::Hit { cost: 2 }, T0 + 1);
        assert_eq!(peek.decision, hit.decision);
    }

    #[test]
    fn a_look_after_a_rule_change_waits_until_the_old_state_is_gone() {
        let mut key = Key::default();
        key.run(&fixed(&[(5, HOUR)]), Action::Hit { cost: 5 }, T0 + 10);
        let second = fixed(&[(5, 1_000)]);
        let look = key.run(&second, Action::Peek { cost: 1 }, T0 + 20);
        assert_eq!(look.write, Write::Nothing);
        assert_eq!(
            look.decision.retry_after_ms,
            HOUR - 20,
            "the old hour must pass"
        );
        // A hit renews and writes, so its own wait is one new window.
        let hit = key.run(&second, Action::Hit { cost: 1 }, T0 + 20);
        assert_eq!(hit.decision.retry_after_ms, 980);
    }

    /// The texts the module replies with to RL.HIT and its kin (`message`), and quotes
    /// after a key's SPEC for RL.MHIT (Display).
    #[test]
    fn errors_display_the_reply_without_err() {
        let texts = [
            (
                LimiterError::NotOurs,
                "key holds a string that is not a ratelimit state",
            ),
            (
                LimiterError::OutOfRange,
                "limit, window, BURST and COST are too large together for the server clock",
            ),
        ];
        for (err, text) in texts {
            assert_eq!(err.to_string(), text);
            assert_eq!(err.message(), format!("ERR {text}"));
            let _: Box<dyn std::error::Error> = Box::new(err);
        }
        assert_eq!(
            OutOfRange.to_string(),
            "a computation left the range of a 64-bit integer"
        );
    }
}
