//! How a key's leases are written into a Redis string value.
//!
//! ```text
//! 0x02                      LEASE_V1: never a digit, 0x01 (tiers form) or 0xF8.. (short
//!                           form), so no RL.HIT state is read as leases nor the reverse
//! varint tier_len           0: no tier state
//! tier_len bytes            the tiers' state, as RL.HIT stores it in a key of its own
//! i64 LE tier_expires_at    that state's absolute expiry (only when tier_len > 0)
//! varint count              leases, at most MAX_LEASES
//! count times:
//!   u8 tag                  0x80: a 16-byte id follows; 1..=64: that many id bytes
//!   id bytes
//!   i64 LE expires_at_ms    the lease's absolute expiry
//! ```
//!
//! A generated lease costs 25 bytes (1 + 16 + 8); one with an id of `n` other bytes
//! costs `9 + n`. Nothing may follow the last lease.

use super::{LeaseId, GENERATED_ID_LEN, MAX_ID_LEN, MAX_LEASES};
use crate::codec::{put_i64, put_varint, Bytes, Reader};

/// The first byte of a lease value, version 1.
pub const LEASE_V1: u8 = 0x02;
const RAW_ID: u8 = 0x80;

/// The bytes one lease takes in the value with a generated id.
pub const GENERATED_LEASE_BYTES: usize = 1 + GENERATED_ID_LEN + 8;

/// A key's tier state inside its lease value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierState<'a> {
    /// The state as RL.HIT would store it.
    pub bytes: &'a [u8],
    /// Its absolute expiry (what the key's expiry would be).
    pub expires_at_ms: i64,
}

/// One lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease<'a> {
    /// Its id.
    pub id: LeaseId<'a>,
    /// When it frees, absolute ms.
    pub expires_at_ms: i64,
}

/// A decoded lease value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Value<'a> {
    /// The tiers' state, if the key has one.
    pub tier: Option<TierState<'a>>,
    /// The leases, held or expired, in the order they were taken.
    pub leases: Vec<Lease<'a>>,
}

/// Whether `bytes` start like a lease value (RL.RESET and error messages tell it apart).
pub fn is_lease(bytes: &[u8]) -> bool {
    decode(bytes).is_some()
}

/// Reads a lease value; `None` for anything this module did not write as leases.
pub fn decode(bytes: &[u8]) -> Option<Value<'_>> {
    let (&LEASE_V1, rest) = bytes.split_first()? else {
        return None;
    };
    let mut body = Reader::new(rest);
    let tier_len = usize::try_from(body.varint()?).ok()?;
    let tier = if tier_len == 0 {
        None
    } else {
        let bytes = body.take(tier_len)?;
        let expires_at_ms = body.i64()?;
        Some(TierState {
            bytes,
            expires_at_ms,
        })
    };
    let count = body.varint()?;
    if count > MAX_LEASES {
        return None;
    }
    // Never more room than the bytes left could hold: a lying count allocates nothing.
    let room = usize::try_from(count).ok()?.min(body.len() / 10);
    let mut leases = Vec::with_capacity(room);
    for _ in 0..count {
        let id = match body.byte()? {
            RAW_ID => {
                let raw = body.take(GENERATED_ID_LEN)?;
                LeaseId::Raw(raw.try_into().ok()?)
            }
            len @ 1..=64 => {
                let given = body.take(usize::from(len))?;
                // Canonical only: 32 lowercase hex digits are always stored raw.
                if LeaseId::parse(given) != LeaseId::Given(given) {
                    return None;
                }
                LeaseId::Given(given)
            }
            _ => return None,
        };
        leases.push(Lease {
            id,
            expires_at_ms: body.i64()?,
        });
    }
    body.is_empty().then_some(Value { tier, leases })
}

/// Writes a lease value.
pub fn encode(value: &Value<'_>) -> Bytes {
    let mut out = Bytes::new();
    let ids: usize = value
        .leases
        .iter()
        .map(|lease| match lease.id {
            LeaseId::Raw(_) => GENERATED_ID_LEN,
            LeaseId::Given(bytes) => bytes.len(),
        })
        .sum();
    let tier_len = value.tier.map_or(0, |tier| tier.bytes.len() + 8);
    out.reserve(16 + tier_len + ids + 9 * value.leases.len());
    out.push(LEASE_V1);
    match value.tier {
        Some(tier) if !tier.bytes.is_empty() => {
            put_varint(&mut out, tier.bytes.len() as i64);
            out.extend_from_slice(tier.bytes);
            put_i64(&mut out, tier.expires_at_ms);
        }
        _ => put_varint(&mut out, 0),
    }
    let count = value.leases.len().min(MAX_LEASES as usize);
    put_varint(&mut out, count as i64);
    for lease in value.leases.iter().take(count) {
        match &lease.id {
            LeaseId::Raw(raw) => {
                out.push(RAW_ID);
                out.extend_from_slice(raw);
            }
            LeaseId::Given(bytes) => {
                let bytes = &bytes[..bytes.len().min(MAX_ID_LEN)];
                // 1..=64, checked by the argument parser and clipped above.
                out.push(bytes.len() as u8);
                out.extend_from_slice(bytes);
            }
        }
        put_i64(&mut out, lease.expires_at_ms);
    }
    out
}
