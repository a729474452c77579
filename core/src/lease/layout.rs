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
use crate::codec::{put_i64, put_varint, varint_len, Bytes, Reader};
use smallvec::SmallVec;

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

/// Whether `bytes` are a whole lease value (RL.RESET and error messages tell it apart).
pub fn is_lease(bytes: &[u8]) -> bool {
    scan(bytes, |_| {}).is_some()
}

/// A varint in its shortest form: the one this module writes, so that every value read
/// is the one encoding of its leases.
fn minimal_varint(body: &mut Reader<'_>) -> Option<i64> {
    let before = body.len();
    let value = body.varint()?;
    (before - body.len() == varint_len(value)).then_some(value)
}

/// Reads a lease value; `None` for anything this module did not write as leases.
pub fn decode(bytes: &[u8]) -> Option<Value<'_>> {
    let (&LEASE_V1, rest) = bytes.split_first()? else {
        return None;
    };
    let mut body = Reader::new(rest);
    let tier_len = usize::try_from(minimal_varint(&mut body)?).ok()?;
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
    let count = minimal_varint(&mut body)?;
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

/// A lease value checked whole, read without building its leases: the operations make
/// one pass over the records to count and find ([`scan`]) and, when they write, one more to
/// copy the records they keep ([`Parsed::rebuild`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Parsed<'a> {
    /// The tiers' state, if any.
    pub tier: Option<TierState<'a>>,
    /// The records' bytes: `count` of them, back to back.
    records: &'a [u8],
}

/// One record as it is stored.
#[derive(Debug, Clone, Copy)]
pub(super) struct Record<'a> {
    /// The id as stored: its tag byte, then its bytes (what [`stored_id`] gives for a
    /// [`LeaseId`]).
    pub id: &'a [u8],
    /// When it frees.
    pub expires_at_ms: i64,
    /// Where the record starts in the records' bytes.
    pub offset: usize,
}

impl Record<'_> {
    /// The record's length in bytes.
    pub fn len(&self) -> usize {
        self.id.len() + 8
    }
}

/// The id `id` as a record stores it: tag, then bytes.
pub(super) fn stored_id(id: &LeaseId<'_>) -> SmallVec<[u8; 1 + MAX_ID_LEN]> {
    let mut out = SmallVec::new();
    match id {
        LeaseId::Raw(raw) => {
            out.push(RAW_ID);
            out.extend_from_slice(raw);
        }
        LeaseId::Given(bytes) => {
            let bytes = &bytes[..bytes.len().min(MAX_ID_LEN)];
            out.push(bytes.len() as u8);
            out.extend_from_slice(bytes);
        }
    }
    out
}

/// Checks a whole lease value, calling `visit` on each record in order; `None` for
/// anything [`decode`] refuses.
pub(super) fn scan<'a>(bytes: &'a [u8], mut visit: impl FnMut(Record<'a>)) -> Option<Parsed<'a>> {
    let (&LEASE_V1, rest) = bytes.split_first()? else {
        return None;
    };
    let mut body = Reader::new(rest);
    let tier_len = usize::try_from(minimal_varint(&mut body)?).ok()?;
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
    let count = minimal_varint(&mut body)?;
    if count > MAX_LEASES {
        return None;
    }
    let records = body.take(body.len())?;
    let mut offset = 0;
    for _ in 0..count {
        let rest = records.get(offset..)?;
        let (&tag, _) = rest.split_first()?;
        let id_len = match tag {
            RAW_ID => GENERATED_ID_LEN,
            1..=64 => usize::from(tag),
            _ => return None,
        };
        let id = rest.get(..1 + id_len)?;
        let end = rest.get(1 + id_len..1 + id_len + 8)?;
        // Canonical only: 32 lowercase hex digits are always stored raw.
        if tag != RAW_ID && matches!(LeaseId::parse(&id[1..]), LeaseId::Raw(_)) {
            return None;
        }
        let expires_at_ms = i64::from_le_bytes(end.try_into().ok()?);
        visit(Record {
            id,
            expires_at_ms,
            offset,
        });
        offset += 1 + id_len + 8;
    }
    (offset == records.len()).then_some(Parsed { tier, records })
}

/// A change to the records, made while copying them.
#[derive(Debug, Clone, Copy)]
pub(super) enum Edit<'a> {
    /// Keep the held ones.
    None,
    /// Add a lease (stored id, end) after the held ones.
    Append(&'a [u8], i64),
    /// Leave out the record at this offset.
    Remove(usize),
    /// Give the record at this offset this end.
    Renew(usize, i64),
}

impl Parsed<'_> {
    /// No tier state and no lease: a key that does not exist.
    pub const EMPTY: Parsed<'static> = Parsed {
        tier: None,
        records: &[],
    };

    /// The value holding `tier` and the records that are held at `now_ms` (`held` of them,
    /// as [`scan`] counted), changed by `edit`; with the latest end among them.
    pub fn rebuild(
        &self,
        tier: Option<TierState<'_>>,
        now_ms: i64,
        held: usize,
        edit: Edit<'_>,
    ) -> (Bytes, Option<i64>) {
        let count = match edit {
            Edit::Append(..) => held + 1,
            Edit::Remove(_) => held.saturating_sub(1),
            Edit::None | Edit::Renew(..) => held,
        };
        let mut out = Bytes::new();
        let tier_len = tier.map_or(0, |t| t.bytes.len() + 8);
        out.reserve(12 + tier_len + self.records.len() + 1 + MAX_ID_LEN + 8);
        out.push(LEASE_V1);
        match tier {
            Some(tier) if !tier.bytes.is_empty() => {
                put_varint(&mut out, tier.bytes.len() as i64);
                out.extend_from_slice(tier.bytes);
                put_i64(&mut out, tier.expires_at_ms);
            }
            _ => put_varint(&mut out, 0),
        }
        put_varint(&mut out, count as i64);
        // Runs of kept records are copied at once.
        let mut last: Option<i64> = None;
        let mut run = 0..0;
        let records = self.records;
        let flush = |out: &mut Bytes, run: &std::ops::Range<usize>| {
            out.extend_from_slice(records.get(run.clone()).unwrap_or_default());
        };
        let mut renewed_at = None;
        let _ = scan_records(records, |record| {
            let kept = record.expires_at_ms > now_ms
                && !matches!(edit, Edit::Remove(at) if at == record.offset);
            if !kept {
                flush(&mut out, &run);
                run = record.offset + record.len()..record.offset + record.len();
                return;
            }
            if run.end != record.offset {
                flush(&mut out, &run);
                run = record.offset..record.offset;
            }
            let mut end = record.expires_at_ms;
            if let Edit::Renew(at, until) = edit {
                if at == record.offset {
                    end = until;
                    let pending = record.offset - run.start;
                    renewed_at = Some(out.len() + pending + record.id.len());
                }
            }
            last = last.max(Some(end));
            run.end = record.offset + record.len();
        });
        flush(&mut out, &run);
        if let (Some(at), Edit::Renew(_, until)) = (renewed_at, edit) {
            if let Some(slot) = out.get_mut(at..at + 8) {
                slot.copy_from_slice(&until.to_le_bytes());
            }
        }
        if let Edit::Append(id, end) = edit {
            out.extend_from_slice(id);
            put_i64(&mut out, end);
            last = last.max(Some(end));
        }
        (out, last)
    }
}

/// The records of a value [`scan`] accepted, again.
fn scan_records<'a>(records: &'a [u8], mut visit: impl FnMut(Record<'a>)) -> Option<()> {
    let mut offset = 0;
    while offset < records.len() {
        let rest = &records[offset..];
        let tag = *rest.first()?;
        let id_len = if tag == RAW_ID {
            GENERATED_ID_LEN
        } else {
            usize::from(tag)
        };
        let id = rest.get(..1 + id_len)?;
        let end = rest.get(1 + id_len..1 + id_len + 8)?;
        visit(Record {
            id,
            expires_at_ms: i64::from_le_bytes(end.try_into().ok()?),
            offset,
        });
        offset += 1 + id_len + 8;
    }
    Some(())
}
