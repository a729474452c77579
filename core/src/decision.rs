//! What a rate-limit check answers.

/// `retry_after_ms` when waiting can never help: the cost is above the limit.
pub const NEVER: i64 = -1;

/// The answer to one check, in the order of the RESP2 reply.
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
