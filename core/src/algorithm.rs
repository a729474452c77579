//! What every rate-limiting algorithm provides, so that multi-tier checks, parameter
//! changes and storage are written once for all of them (see `limiter`).
//!
//! Every function is pure: the state a key holds, the server's clock reading and the
//! request's parameters in; a decision and the next state out.

use super::calendar::Calendar;
use super::codec::{Bytes, Reader};
use super::decision::Decision;

// Defined in `checked`, below `calendar`, which needs it too (see there); re-exported
// here, next to the trait whose functions return it.
pub use super::checked::OutOfRange;

/// The parameters of one tier: `limit` units per `window_ms`, with a `burst` capacity
/// that only the bucket algorithms (token, gcra) use; elsewhere it equals `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Units allowed per window, >= 1.
    pub limit: i64,
    /// Window length in ms, >= 1.
    pub window_ms: i64,
    /// Units that may be taken at once (bucket capacity), >= 1.
    pub burst: i64,
    /// For a calendar window (`day`, `week`, `month`, `year`), its period and zone; then
    /// `window_ms` is the period's nominal length and windows end at the calendar's
    /// boundaries instead of multiples of `window_ms` (fixed window only).
    pub calendar: Option<Calendar>,
}

impl Quota {
    /// `limit` per `window_ms`, with the default burst (= limit).
    pub fn new(limit: i64, window_ms: i64) -> Self {
        Quota {
            limit,
            window_ms,
            burst: limit,
            calendar: None,
        }
    }

    /// `limit` per period of `calendar`.
    pub fn calendar(limit: i64, calendar: Calendar) -> Self {
        Quota {
            calendar: Some(calendar),
            ..Quota::new(limit, calendar.period.nominal_ms())
        }
    }
}

/// The result of checking one tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierCheck<S> {
    /// What the tier answers. When allowed, `remaining` and the times are as after
    /// counting; when denied, as now.
    pub decision: Decision,
    /// The state after counting the cost; `Some` exactly when allowed.
    pub charged: Option<S>,
}

/// How a tier looks at some moment without counting anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    /// Units that could be taken now.
    pub remaining: i64,
    /// Milliseconds until the state is the same as no state (0 if it already is).
    pub reset_after_ms: i64,
}

/// One rate-limiting algorithm. Implemented by unit structs; `limiter` is generic over it.
pub trait Algorithm {
    /// The per-tier state a key stores for this algorithm. It may borrow the stored value
    /// it was decoded from (`'a`): the exact log keeps its entries where they are stored,
    /// so that a call copies none it leaves alone.
    type State<'a>: Clone + std::fmt::Debug + PartialEq;

    /// The byte that identifies this algorithm in a stored value.
    const ID: u8;

    /// Checks whether `cost` (>= 1) units fit at `now_ms` and returns the decision plus, when
    /// they fit, the state with them counted. The decision's `limit` is
    /// [`capacity`](Self::capacity); `retry_after_ms` is the wait after which the same
    /// check succeeds if nothing else is counted meanwhile, or `NEVER` if cost > capacity. `state` is `None` for a key with no state.
    /// A state that has ended by `now_ms` must read as no state; a `now_ms` earlier than
    /// the state's times (the clock went back) counts as no time passed.
    fn check<'a>(
        state: Option<&Self::State<'a>>,
        now_ms: i64,
        quota: &Quota,
        cost: i64,
    ) -> Result<TierCheck<Self::State<'a>>, OutOfRange>;

    /// How the tier looks at `now_ms` without counting: the `remaining` and
    /// `reset_after_ms` a denied check would report.
    fn view(
        state: Option<&Self::State<'_>>,
        now_ms: i64,
        quota: &Quota,
    ) -> Result<View, OutOfRange>;

    /// The most units the tier can hold: `limit`, or `burst` for the bucket algorithms.
    /// It is the `limit` field of the reply.
    fn capacity(quota: &Quota) -> i64 {
        quota.limit
    }

    /// How far past `now_ms` a state made at `now_ms` may legitimately expire. A stored
    /// state that expires later than `now + span_ms` comes from a clock that went back or
    /// from other parameters; `limiter` then starts the key afresh from its usage.
    fn span_ms(quota: &Quota) -> i64 {
        quota.window_ms
    }

    /// Gives back up to `amount` (>= 1) units counted in the current window or bucket,
    /// never below empty. `None` when there is nothing to give back (nothing is written).
    fn refund<'a>(
        state: Option<&Self::State<'a>>,
        now_ms: i64,
        quota: &Quota,
        amount: i64,
    ) -> Option<Self::State<'a>>;

    /// Units this state counts against the limit at `now_ms`, rounded up; 0 for an ended
    /// state. Used to carry usage over when a key's parameters change.
    fn used(state: &Self::State<'_>, now_ms: i64, quota: &Quota) -> i64;

    /// A state that counts `used` units (0..=capacity) at `now_ms`, and lets them go
    /// within one window: the start of a key whose parameters changed.
    fn seeded<'a>(used: i64, now_ms: i64, quota: &Quota) -> Result<Self::State<'a>, OutOfRange>;

    /// The absolute time (ms, rounded up) from which `state` is the same as no state: the
    /// key's expiry.
    fn expires_at_ms(state: &Self::State<'_>, quota: &Quota) -> i64;

    /// The state a plain decimal count with the key's expiry stands for (see `encoding`).
    /// Only the fixed window writes that form; for the others it is another algorithm's
    /// state, whose usage `limiter` carries over.
    fn from_plain_count<'a>(_count: i64, _expires_at_ms: i64) -> Option<Self::State<'a>> {
        None
    }

    /// Whether a state stored without its parameters (a plain count) can be read under
    /// `quota` as it is; if not, `limiter` renews it from its usage.
    fn fits_unrecorded(_state: &Self::State<'_>, _quota: &Quota) -> bool {
        true
    }

    /// The plain decimal count that stands for `state` when it is a key's only tier (see
    /// `encoding`), or `None` if this algorithm does not use that form.
    fn to_plain_count(_state: &Self::State<'_>) -> Option<i64> {
        None
    }

    /// For a key's only tier: a small number (>= 0) that, together with the key's expiry
    /// ([`expires_at_ms`](Self::expires_at_ms)), stands for `state`, so that the stored
    /// value need not repeat the time (the short form in `encoding`). `None` if the
    /// algorithm has no such form.
    fn to_short(_state: &Self::State<'_>, _expires_at_ms: i64) -> Option<i64> {
        None
    }

    /// The state that [`to_short`](Self::to_short) gave `short` for, with the key's expiry.
    fn from_short<'a>(_short: i64, _expires_at_ms: i64) -> Option<Self::State<'a>> {
        None
    }

    /// Appends the state's bytes (see `codec`).
    fn encode(state: &Self::State<'_>, out: &mut Bytes);

    /// Reads a state written by [`encode`](Self::encode); `None` if the bytes are not one.
    fn decode<'a>(reader: &mut Reader<'a>) -> Option<Self::State<'a>>;
}
