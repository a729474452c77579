//! Target `lease`: the lease commands' argument parser and their value decoder, and the
//! lease operations over whatever a key holds.
//!
//! The input's first byte picks the part: even, the rest is RL.ACQUIRE's arguments split at
//! spaces (`3 30s 5 1m ID job`), which must parse to values within their bounds or to one
//! `ERR` line; odd, a stored value (its length in two little-endian bytes, then its bytes)
//! followed by a clock and the operations' parameters, from which every decoded
//! value must re-encode to exactly its bytes, and every write must be a lease value that
//! decodes, holds no more than `max` leases taken, all held, and expires with the last of
//! them or with its tier state.

use crate::words::split_words;
use arbitrary::{Result, Unstructured};
use ratelimit_core::args::{parse_limits, Settings};
use ratelimit_core::lease::args::{parse_acquire, parse_id, parse_ttl};
use ratelimit_core::lease::layout::{decode, encode};
use ratelimit_core::lease::{
    acquire, peek, release, renew, Acquire, LeaseId, GENERATED_ID_LEN, MAX_ID_LEN, MAX_LEASES,
};
use ratelimit_core::limiter::Write;

fn check_arguments(data: &[u8]) {
    let words = split_words(data);
    for cap in [MAX_LEASES, 3] {
        for settings in [
            Settings::default(),
            Settings {
                max_window_ms: 60_000,
                ..Settings::default()
            },
        ] {
            match parse_acquire(&words, &settings, cap) {
                Ok(parsed) => {
                    assert!((1..=cap).contains(&parsed.max), "{parsed:?}");
                    assert!((1..=settings.max_window_ms).contains(&parsed.ttl_ms));
                    if let Some(LeaseId::Given(id)) = parsed.id {
                        assert!((1..=MAX_ID_LEN).contains(&id.len()));
                    }
                }
                Err(err) => {
                    let message = err.message();
                    assert!(message.starts_with("ERR "), "{message:?}");
                    assert!(message.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
                }
            }
        }
    }
    if let Some(first) = words.first() {
        let _ = parse_id(first);
        let _ = parse_ttl(first, &Settings::default());
    }
}

/// Checks a write against the leases it must hold.
fn check_write(write: &Write, now_ms: i64, max: Option<i64>) {
    let Write::Set {
        value,
        expires_at_ms,
    } = write
    else {
        return;
    };
    let decoded = decode(value).unwrap_or_else(|| panic!("wrote no lease value: {value:?}"));
    assert_eq!(encode(&decoded).as_slice(), value.as_slice());
    assert!(
        decoded.leases.iter().all(|l| l.expires_at_ms > now_ms),
        "kept an ended lease"
    );
    if let Some(max) = max {
        assert!(
            decoded.leases.len() as i64 <= max,
            "{} > {max}",
            decoded.leases.len()
        );
    }
    let last = decoded.leases.iter().map(|l| l.expires_at_ms).max();
    let tier = decoded.tier.map(|t| t.expires_at_ms);
    assert_eq!(Some(*expires_at_ms), last.max(tier), "the key's expiry");
}

fn check_value(value: &[u8], u: &mut Unstructured<'_>) -> Result<()> {
    let now_ms: i64 = u.arbitrary()?;
    let max: i64 = u.int_in_range(1..=8)?;
    let ttl_ms: i64 = u.int_in_range(1..=1_000_000)?;
    let raw: [u8; GENERATED_ID_LEN] = u.arbitrary()?;
    let given: Vec<u8> = u.arbitrary()?;
    let with_tiers: bool = u.arbitrary()?;
    if let Some(decoded) = decode(value) {
        assert_eq!(encode(&decoded).as_slice(), value, "not the canonical form");
    }
    let words: [&[u8]; 2] = [b"3", b"1m"];
    let limits = parse_limits(words.into_iter(), &Settings::default()).ok();
    let tiers = limits
        .as_ref()
        .filter(|_| with_tiers)
        .map(|l| (&l.limits, 1));
    let ids = [
        LeaseId::Raw(raw),
        LeaseId::parse(&given[..given.len().min(MAX_ID_LEN)]),
    ];
    for id in ids {
        if matches!(id, LeaseId::Given(bytes) if bytes.is_empty()) {
            continue;
        }
        let request = Acquire {
            max,
            ttl_ms,
            id: id.clone(),
            tiers,
        };
        if let Ok(taken) = acquire(Some(value), now_ms, &request) {
            // The value may have held more than `max` (written under another max): what
            // a taken lease writes still never passes the max it was taken under.
            let bound = taken.acquired.then_some(max);
            check_write(&taken.write, now_ms, bound);
            if !taken.acquired && taken.write != Write::Nothing {
                assert!(with_tiers, "a refused lease without tiers wrote");
            }
        }
        if let Ok(done) = release(Some(value), now_ms, &id) {
            check_write(&done.write, now_ms, None);
            assert_eq!(done.held, done.write != Write::Nothing);
        }
        if let Ok(done) = renew(Some(value), now_ms, &id, ttl_ms) {
            check_write(&done.write, now_ms, None);
        }
    }
    if let Ok(held) = peek(Some(value), now_ms, max) {
        assert!(held.held >= 0 && held.free >= 0 && held.free <= max);
        assert!(held.retry_after_ms >= 0 && held.reset_after_ms >= held.retry_after_ms);
    }
    Ok(())
}

pub fn fuzz(data: &[u8]) {
    match data.split_first() {
        Some((mode, rest)) if mode % 2 == 0 => check_arguments(rest),
        Some((_, rest)) => {
            let (len, rest) = rest.split_at(rest.len().min(2));
            let len = match *len {
                [low, high] => usize::from(u16::from_le_bytes([low, high])),
                _ => 0,
            };
            let (value, rest) = rest.split_at(len.min(rest.len()));
            let _ = check_value(value, &mut Unstructured::new(rest));
        }
        None => {}
    }
}
