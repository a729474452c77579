//! What a rate-limit check answers.

/// `retry_after_ms` when waiting can never help: the cost is above the limit.
pub const NEVER: i64 = -1;

/// The answer to one check, in the order of the RESP2 reply.
///
/// # Example
///
/// A fixed window of 3 per minute, 15 s into the minute: one hit is allowed, four at once
/// never can be.
///
/// ```
/// use ratelimit_core::algorithm::{Algorithm, Quota};
/// use ratelimit_core::decision::{Decision, NEVER};
/// use ratelimit_core::fixed_window::Fixed;
///
/// let quota = Quota::new(3, 60_000);
/// let now_ms = 1_796_083_215_000;
/// let hit = Fixed::check(None, now_ms, &quota, 1)?.decision;
/// let expected = Decision {
///     allowed: true,
///     limit: 3,
///     remaining: 2,
///     reset_after_ms: 45_000,
///     retry_after_ms: 0,
/// };
/// assert_eq!(hit, expected);
/// assert_eq!(hit.values(), [1, 3, 2, 45_000, 0], "the reply's five integers");
/// let too_big = Fixed::check(None, now_ms, &quota, 4)?.decision;
/// assert_eq!((too_big.allowed, too_big.retry_after_ms), (false, NEVER));
/// # Ok::<(), ratelimit_core::algorithm::OutOfRange>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the hit was allowed (and, for RL.HIT, counted).
    pub allowed: bool,
    /// The limit the hit was checked against.
    pub limit: i64,
    /// Units still available in the current window after this call.
    pub remaining: i64,
    /// Milliseconds until the whole limit is available again; 0 when nothing is counted.
    pub reset_after_ms: i64,
    /// 0 when allowed; otherwise milliseconds after which the same call can succeed, or
    /// [`NEVER`] when it never can.
    pub retry_after_ms: i64,
}

impl Decision {
    /// The five fields as integers, in reply order.
    pub fn values(&self) -> [i64; 5] {
        [
            i64::from(self.allowed),
            self.limit,
            self.remaining,
            self.reset_after_ms,
            self.retry_after_ms,
        ]
    }
}
