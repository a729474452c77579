//! Concurrency leases: at most `max` holders of a key at once, each for a `ttl`, freed by
//! release or by the server's clock at an absolute time (RL.ACQUIRE, RL.RELEASE, RL.RENEW,
//! RL.LEASES).
//!
//! Every operation here is pure: the key's stored value and the server's clock reading in;
//! an answer and the [`Write`] that the key must get out. A lease is held while
//! `now_ms < expires_at_ms`: it frees at exactly its absolute expiry, and a clock that goes
//! back only keeps it held longer, never frees it early. RL.RENEW never shortens a lease.
//!
//! When a call gives tiers (`limit window ...`, as RL.HIT takes them), their state lives in
//! the same value ([`layout`]), checked by [`limiter::run`] like a key of its own: a lease
//! is taken and the hit counted in all tiers, or neither. The key expires when the last of
//! its leases does, or when its tier state ends, whichever is later.
//!
//! **Bounds.** A value holds at most [`MAX_LEASES`] leases, expired ones included: every
//! write drops all the expired leases, and an acquire needs fewer than `max` (at most
//! `ratelimit.max-leases`, at most [`MAX_LEASES`]) held ones. So a call reads and writes at
//! most [`MAX_LEASES`] records however many have expired since the last write.
//!
//! # Example
//!
//! ```
//! use ratelimit_core::lease::{acquire, release, Acquire, LeaseId};
//! use ratelimit_core::limiter::{MemoryKey, Write};
//!
//! let now = 1_796_083_200_000;
//! let mut key = MemoryKey::default();
//! let ask = |id: &'static [u8]| Acquire { max: 2, ttl_ms: 1_000, id: LeaseId::parse(id), tiers: None };
//! for (id, at) in [(b"a", now), (b"b", now + 10), (b"c", now + 20)] {
//!     let taken = acquire(key.value(), at, &ask(id))?;
//!     key.apply(&taken.write);
//!     assert_eq!(taken.acquired, id != b"c", "the third waits");
//! }
//! // The first lease ends at now + 1000: the third is told to come back then.
//! let third = acquire(key.value(), now + 20, &ask(b"c"))?;
//! assert_eq!(third.retry_after_ms, 980);
//! assert_eq!(key.expires_at_ms(), Some(now + 10 + 1_000), "the last lease's end");
//! // Released by its id, the slot is free at once.
//! let released = release(key.value(), now + 30, &LeaseId::parse(b"a"))?;
//! assert!(released.held);
//! key.apply(&released.write);
//! assert!(acquire(key.value(), now + 30, &ask(b"c"))?.acquired);
//! # Ok::<(), ratelimit_core::lease::LeaseError>(())
//! ```

pub mod args;
pub mod layout;

use self::layout::{scan, stored_id, Edit, Parsed, TierState};
use crate::codec::Bytes;
use crate::decision::NEVER;
use crate::limiter::{self, Action, LimiterError, Limits, Outcome, Write};

pub use self::layout::is_lease;

/// The most leases one key holds, and the largest `ratelimit.max-leases`.
pub const MAX_LEASES: i64 = 10_000;
/// The longest lease id a client may give, in bytes.
pub const MAX_ID_LEN: usize = 64;
/// The bytes of a generated lease id (128 random bits), before hex encoding.
pub const GENERATED_ID_LEN: usize = 16;

/// A lease's id in its canonical form: 32 lowercase hex digits are stored as the 16 bytes
/// they spell (a generated id, or one a client gave in that form), anything else as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseId<'a> {
    /// 16 bytes, shown as 32 lowercase hex digits.
    Raw([u8; GENERATED_ID_LEN]),
    /// The client's bytes (1 to [`MAX_ID_LEN`]).
    Given(&'a [u8]),
}

impl<'a> LeaseId<'a> {
    /// The canonical form of an id a client gave (checked for length by [`args`]).
    pub fn parse(id: &'a [u8]) -> Self {
        match hex_decode(id) {
            Some(raw) => LeaseId::Raw(raw),
            None => LeaseId::Given(id),
        }
    }

    /// The id as replies show it.
    pub fn display(&self) -> Vec<u8> {
        match self {
            LeaseId::Raw(raw) => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                raw.iter()
                    .flat_map(|byte| [HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 15)]])
                    .collect()
            }
            LeaseId::Given(bytes) => bytes.to_vec(),
        }
    }
}

fn hex_decode(text: &[u8]) -> Option<[u8; GENERATED_ID_LEN]> {
    if text.len() != 2 * GENERATED_ID_LEN {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut raw = [0u8; GENERATED_ID_LEN];
    for (out, pair) in raw.iter_mut().zip(text.chunks_exact(2)) {
        *out = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(raw)
}

/// Why a lease call could not be answered; nothing is written.
///
/// [`Display`](std::fmt::Display) gives the reply's text without its error code and
/// [`LeaseError::message`] the reply (`ERR ` and that text), as for the argument errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseError {
    /// The key holds a value that is not leases (an RL.HIT state, or text).
    NotLeases,
    /// A held lease already has the id the call gives.
    DuplicateId,
    /// `now + ttl` or a tier's arithmetic leaves the clock's range.
    OutOfRange,
}

impl LeaseError {
    /// The error reply: `ERR ` and then the [`Display`](std::fmt::Display) text.
    pub fn message(self) -> String {
        format!("ERR {self}")
    }
}

/// The reply's text without the `ERR ` that only a reply carries (see
/// [`LeaseError::message`]).
impl std::fmt::Display for LeaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LeaseError::NotLeases => {
                "key holds a value that is not leases (a rate-limit state of RL.HIT, or \
                 another string)"
            }
            LeaseError::DuplicateId => "ID is already held on this key: release or renew it",
            LeaseError::OutOfRange => "ttl or the tiers are too large for the server clock",
        })
    }
}

impl std::error::Error for LeaseError {}

impl From<LimiterError> for LeaseError {
    fn from(err: LimiterError) -> Self {
        match err {
            // The tier state inside a lease value is only ever written by this module.
            LimiterError::NotOurs => LeaseError::NotLeases,
            LimiterError::OutOfRange => LeaseError::OutOfRange,
        }
    }
}

/// What RL.ACQUIRE asks for.
#[derive(Debug, Clone)]
pub struct Acquire<'a> {
    /// How many leases may be held at once, >= 1.
    pub max: i64,
    /// How long the new lease lasts, in ms, >= 1.
    pub ttl_ms: i64,
    /// The new lease's id (given or generated).
    pub id: LeaseId<'a>,
    /// Tiers to count the hit in, with the cost, when the call gives some.
    pub tiers: Option<(&'a Limits, i64)>,
}

/// What RL.ACQUIRE answers, and the change to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    /// Whether the lease was taken (and the hit counted in the tiers).
    pub acquired: bool,
    /// The call's `max`.
    pub max: i64,
    /// Slots still free after this call.
    pub free: i64,
    /// Milliseconds until the new lease expires; 0 when none was taken.
    pub ttl_ms: i64,
    /// 0 when taken; else when the earliest held lease expires, or the tiers' wait when a
    /// tier denied (the longer of the two; [`NEVER`] when the cost is above a limit).
    pub retry_after_ms: i64,
    /// The tiers' answer, when the call gave tiers and they were checked.
    pub tiers: Option<Outcome>,
    /// The change to store.
    pub write: Write,
}

/// What one pass over a key's records found at `now_ms`.
#[derive(Debug, Clone, Copy, Default)]
struct Found {
    /// Leases held now.
    held: usize,
    /// The earliest and the latest end among them.
    earliest: Option<i64>,
    latest: Option<i64>,
    /// The held lease with the id looked for: its offset and end.
    lease: Option<(usize, i64)>,
}

/// Reads the key's value (`None`: no key) at `now_ms`, looking for the held lease `id`.
fn look<'a>(
    stored: Option<&'a [u8]>,
    now_ms: i64,
    id: Option<&[u8]>,
) -> Result<(Option<Parsed<'a>>, Found), LeaseError> {
    let mut found = Found::default();
    let Some(bytes) = stored else {
        return Ok((None, found));
    };
    let parsed = scan(bytes, |record| {
        if record.expires_at_ms <= now_ms {
            return;
        }
        found.held += 1;
        found.earliest = Some(
            found
                .earliest
                .map_or(record.expires_at_ms, |e| e.min(record.expires_at_ms)),
        );
        found.latest = found.latest.max(Some(record.expires_at_ms));
        if found.lease.is_none() && id.is_some_and(|id| same_id(record.id, id)) {
            found.lease = Some((record.offset, record.expires_at_ms));
        }
    })
    .ok_or(LeaseError::NotLeases)?;
    Ok((Some(parsed), found))
}

/// Whether two stored ids are the same. Most differ in their first 8 bytes after the tag
/// (random ones always do), which one integer comparison settles.
#[inline]
fn same_id(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let head = |id: &[u8]| id.get(1..9).and_then(|h| <[u8; 8]>::try_from(h).ok());
    if let (Some(x), Some(y)) = (head(a), head(b)) {
        if x != y {
            return false;
        }
    }
    a == b
}

/// Takes one of `request.max` slots at `now_ms`, on a key holding `stored`.
pub fn acquire(
    stored: Option<&[u8]>,
    now_ms: i64,
    request: &Acquire<'_>,
) -> Result<Acquired, LeaseError> {
    let id = stored_id(&request.id);
    let (parsed, found) = look(stored, now_ms, Some(&id))?;
    if found.lease.is_some() {
        return Err(LeaseError::DuplicateId);
    }
    let held = i64::try_from(found.held).unwrap_or(i64::MAX);
    let expires_at_ms = now_ms
        .checked_add(request.ttl_ms)
        .ok_or(LeaseError::OutOfRange)?;
    let tier_now = parsed
        .and_then(|p| p.tier)
        .filter(|tier| tier.expires_at_ms > now_ms);
    let denied = |retry_after_ms, tiers, write| Acquired {
        acquired: false,
        max: request.max,
        free: (request.max - held).max(0),
        ttl_ms: 0,
        retry_after_ms,
        tiers,
        write,
    };
    if held >= request.max {
        let mut retry = slot_wait(stored, now_ms, &found, request.max);
        let mut tiers: Option<Outcome> = None;
        if let Some((limits, cost)) = request.tiers {
            let look = run_tiers(limits, Action::Peek { cost }, tier_now, now_ms)?;
            let wait = look.decision.retry_after_ms;
            retry = if wait == NEVER {
                NEVER
            } else {
                retry.max(wait)
            };
            tiers = Some(look);
        }
        return Ok(denied(retry, tiers, Write::Nothing));
    }
    let rebuild = |tier: Option<TierState<'_>>, edit: Edit<'_>| {
        let (value, last) = match parsed {
            Some(parsed) => parsed.rebuild(tier, now_ms, found.held, edit),
            None => Parsed::EMPTY.rebuild(tier, now_ms, 0, edit),
        };
        store(value, last, tier)
    };
    let Some((limits, cost)) = request.tiers else {
        let write = rebuild(tier_now, Edit::Append(&id, expires_at_ms));
        return Ok(taken(request, held, write, None));
    };
    let hit = run_tiers(limits, Action::Hit { cost }, tier_now, now_ms)?;
    let tier = match &hit.write {
        Write::Nothing => tier_now,
        Write::Delete => None,
        Write::Set {
            value,
            expires_at_ms,
        } => Some(TierState {
            bytes: value,
            expires_at_ms: *expires_at_ms,
        }),
    };
    if !hit.decision.allowed {
        // A denied hit writes only what the tiers must keep (a renewal after a rule
        // change, see `limiter`), with the leases as they are.
        let write = if hit.write == Write::Nothing {
            Write::Nothing
        } else {
            rebuild(tier, Edit::None)
        };
        let retry = hit.decision.retry_after_ms;
        return Ok(denied(retry, Some(hit), write));
    }
    let write = rebuild(tier, Edit::Append(&id, expires_at_ms));
    Ok(taken(request, held, write, Some(hit)))
}

fn taken(request: &Acquire<'_>, held: i64, write: Write, tiers: Option<Outcome>) -> Acquired {
    Acquired {
        acquired: true,
        max: request.max,
        free: (request.max - held - 1).max(0),
        ttl_ms: request.ttl_ms,
        retry_after_ms: 0,
        tiers,
        write,
    }
}

fn run_tiers(
    limits: &Limits,
    action: Action,
    tier: Option<TierState<'_>>,
    now_ms: i64,
) -> Result<Outcome, LeaseError> {
    let stored = tier.map(|t| t.bytes);
    let expiry = || tier.map(|t| t.expires_at_ms);
    Ok(limiter::run(limits, action, stored, expiry, now_ms)?)
}

/// Ms until fewer than `max` leases are held: the earliest end when exactly `max` are held,
/// else the end of the `held - max + 1`-th earliest (a lowered `max`, or callers giving
/// different ones). 0 when a slot is free.
fn slot_wait(stored: Option<&[u8]>, now_ms: i64, found: &Found, max: i64) -> i64 {
    let held = i64::try_from(found.held).unwrap_or(i64::MAX);
    if held < max {
        return 0;
    }
    let earliest = found.earliest.map_or(0, |end| end.saturating_sub(now_ms));
    let Some(rank) = usize::try_from(held - max).ok().filter(|r| *r > 0) else {
        return earliest;
    };
    let mut ends = Vec::with_capacity(found.held);
    if let Some(bytes) = stored {
        let _ = scan(bytes, |record| {
            if record.expires_at_ms > now_ms {
                ends.push(record.expires_at_ms);
            }
        });
    }
    match ends.get(..).filter(|e| rank < e.len()) {
        Some(_) => *ends.select_nth_unstable(rank).1 - now_ms,
        None => earliest,
    }
}

/// What RL.RELEASE and RL.RENEW answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// Whether a lease with that id was held (and so released or renewed).
    pub held: bool,
    /// The change to store: [`Write::Nothing`] when no lease was held.
    pub write: Write,
}

/// Releases the held lease `id`; nothing changes when none is held.
pub fn release(
    stored: Option<&[u8]>,
    now_ms: i64,
    id: &LeaseId<'_>,
) -> Result<Changed, LeaseError> {
    change(stored, now_ms, id, |offset, _| Edit::Remove(offset))
}

/// Extends the held lease `id` to expire `ttl_ms` from now, or later if it already does
/// (a renewal never shortens a lease); nothing changes when none is held.
pub fn renew(
    stored: Option<&[u8]>,
    now_ms: i64,
    id: &LeaseId<'_>,
    ttl_ms: i64,
) -> Result<Changed, LeaseError> {
    let until = now_ms.checked_add(ttl_ms).ok_or(LeaseError::OutOfRange)?;
    change(stored, now_ms, id, |offset, end| {
        Edit::Renew(offset, end.max(until))
    })
}

fn change(
    stored: Option<&[u8]>,
    now_ms: i64,
    id: &LeaseId<'_>,
    edit: impl FnOnce(usize, i64) -> Edit<'static>,
) -> Result<Changed, LeaseError> {
    let id = stored_id(id);
    let (parsed, found) = look(stored, now_ms, Some(&id))?;
    let (Some(parsed), Some((offset, end))) = (parsed, found.lease) else {
        return Ok(Changed {
            held: false,
            write: Write::Nothing,
        });
    };
    let edit = edit(offset, end);
    if matches!(edit, Edit::Renew(_, until) if until == end) {
        // Already ends then or later: nothing to write.
        return Ok(Changed {
            held: true,
            write: Write::Nothing,
        });
    }
    let tier = parsed.tier.filter(|tier| tier.expires_at_ms > now_ms);
    let (value, last) = parsed.rebuild(tier, now_ms, found.held, edit);
    Ok(Changed {
        held: true,
        write: store(value, last, tier),
    })
}

/// What RL.LEASES answers: the key's leases for a `max`, without writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The `max` asked about.
    pub max: i64,
    /// Leases held now.
    pub held: i64,
    /// Slots free now (0 when more are held than `max`).
    pub free: i64,
    /// 0 when a slot is free; else ms until the earliest held lease expires.
    pub retry_after_ms: i64,
    /// Ms until the last held lease expires; 0 when none is held.
    pub reset_after_ms: i64,
}

/// Reads the leases of a key holding `stored` at `now_ms` for `max` slots. On a replica
/// a key past its expiry may still be there: its leases read as expired.
pub fn peek(stored: Option<&[u8]>, now_ms: i64, max: i64) -> Result<Held, LeaseError> {
    let (_, found) = look(stored, now_ms, None)?;
    let held = i64::try_from(found.held).unwrap_or(i64::MAX);
    let free = (max - held).max(0);
    let retry_after_ms = if free > 0 {
        0
    } else {
        slot_wait(stored, now_ms, &found, max)
    };
    Ok(Held {
        max,
        held,
        free,
        retry_after_ms,
        reset_after_ms: found.latest.map_or(0, |end| end.saturating_sub(now_ms)),
    })
}

/// The write for a rebuilt `value` whose held leases end at the latest at `last`: the
/// key expires with its last lease or its tier state, whichever ends later; with neither
/// it goes.
fn store(value: Bytes, last: Option<i64>, tier: Option<TierState<'_>>) -> Write {
    match last.max(tier.map(|t| t.expires_at_ms)) {
        None => Write::Delete,
        Some(expires_at_ms) => Write::Set {
            value,
            expires_at_ms,
        },
    }
}

#[cfg(test)]
mod tests;
