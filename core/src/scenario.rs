//! Table-driven scenario tests, shared by every algorithm's tests: a sequence of hits on
//! one key, each with the time, the cost and the whole decision expected.

use super::algorithm::{Algorithm, Quota};
use super::decision::Decision;
use proptest::prelude::*;

/// One hit and what it must answer.
pub struct Case {
    at: i64,
    cost: i64,
    allowed: bool,
    remaining: i64,
    reset_after_ms: i64,
    retry_after_ms: i64,
}

/// A hit at `at` of `cost`, expected to answer `allowed`, `remaining`, `reset` and `retry`.
#[rustfmt::skip]
pub fn case(at: i64, cost: i64, allowed: bool, remaining: i64, reset: i64, retry: i64) -> Case {
    Case { at, cost, allowed, remaining, reset_after_ms: reset, retry_after_ms: retry }
}

/// Runs `cases` against one key of algorithm `A`, storing what the core returns as RL.HIT
/// would (a state exactly when allowed), and returns the last stored state. The expected
/// `limit` is the algorithm's capacity.
pub fn run<A: Algorithm>(quota: Quota, cases: &[Case]) -> Option<A::State<'static>> {
    let mut stored = None;
    for (n, c) in cases.iter().enumerate() {
        let hit = A::check(stored.as_ref(), c.at, &quota, c.cost).expect("time in range");
        let expected = Decision {
            allowed: c.allowed,
            limit: A::capacity(&quota),
            remaining: c.remaining,
            reset_after_ms: c.reset_after_ms,
            retry_after_ms: c.retry_after_ms,
        };
        assert_eq!(hit.decision, expected, "case {n} at {}", c.at);
        assert_eq!(
            hit.charged.is_some(),
            c.allowed,
            "case {n} writes iff allowed"
        );
        if let Some(state) = hit.charged {
            stored = Some(state);
        }
    }
    stored
}

/// One step of a property test's random sequence: a hit of a cost, or a refund.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// RL.HIT with this cost.
    Hit(i64),
    /// RL.REFUND of this many units.
    Refund(i64),
}

/// Mostly hits, some refunds.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1i64..25).prop_map(Op::Hit),
        1 => (1i64..30).prop_map(Op::Refund),
    ]
}
