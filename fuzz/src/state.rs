//! Target `state`: the stored-state decoders of every encoding, over arbitrary bytes with
//! an arbitrary expiry and clock. Each decoder must refuse or decode, never panic; what it
//! decodes must re-encode to bytes that decode to the same thing, never longer than the
//! input (the encoder writes the shortest form); and the limiter must refuse a value as not
//! ours exactly when `is_state` (what RL.RESET trusts) says it is not a state.

use arbitrary::{Result, Unstructured};
use ratelimit_core::algorithm::{Algorithm, Quota};

use ratelimit_core::encoding::{
    classify, decode_count, decode_tiers, encode_count, encode_short, encode_tiers, StoredForm,
    TiersBody,
};
use ratelimit_core::gcra::Gcra;
use ratelimit_core::limiter::{is_state, run, Action, AlgorithmKind, LimiterError, Limits, Write};
use ratelimit_core::token_bucket::Token;

fn kind_of_id(id: u8) -> Option<AlgorithmKind> {
    AlgorithmKind::from_id(id)
}

/// The tiers of algorithm `A` in `body` re-encoded, if they decode: checks the round trip
/// and returns their parameters.
fn tiers_round_trip<A: Algorithm>(
    body: TiersBody<'_>,
    count: usize,
    len: usize,
) -> Option<Vec<Quota>> {
    let tiers = decode_tiers::<A>(body, count)?;
    let (quotas, states): (Vec<Quota>, Vec<A::State<'_>>) = tiers.iter().cloned().unzip();
    let bytes = encode_tiers::<A>(&quotas, &states);
    assert!(bytes.len() <= len, "re-encoded longer: {len} -> {bytes:?}");
    let Some(StoredForm::Tiers {
        algorithm,
        count: again_count,
        body,
    }) = classify(&bytes)
    else {
        panic!("re-encoded tiers are not the tiers form: {bytes:?}");
    };
    assert_eq!((algorithm, again_count), (A::ID, count));
    // Decoded states borrow the bytes they come from, so those of `bytes` are compared
    // with the first ones through what they encode to.
    let again = decode_tiers::<A>(body, count)
        .unwrap_or_else(|| panic!("re-encoded tiers do not decode: {bytes:?}"));
    let (again_quotas, again_states): (Vec<Quota>, Vec<A::State<'_>>) =
        again.iter().cloned().unzip();
    assert_eq!(again_quotas, quotas, "{bytes:?}");
    let bytes_again = encode_tiers::<A>(&again_quotas, &again_states);
    assert_eq!(bytes_again, bytes, "the round trip changed the states");
    Some(quotas)
}

fn short_round_trip<A: Algorithm>(quota: &Quota, short: i64, len: usize) {
    let Some(bytes) = encode_short::<A>(quota, short) else {
        panic!("algorithm {} read a short form it cannot write", A::ID);
    };
    assert!(bytes.len() <= len, "re-encoded longer: {len} -> {bytes:?}");
    let expected = StoredForm::Short {
        algorithm: A::ID,
        quota: *quota,
        short,
    };
    assert_eq!(classify(&bytes), Some(expected), "{bytes:?}");
}

/// Checks the decoders on `value`; returns the parameters it was written with, if any.
fn check_decoders(value: &[u8]) -> Option<Vec<Quota>> {
    if let Some(count) = decode_count(value) {
        assert!(count >= 1);
        assert_eq!(encode_count(count, &mut [0u8; 20]), value, "not canonical");
    }
    match classify(value)? {
        StoredForm::PlainCount(count) => {
            assert_eq!(decode_count(value), Some(count));
            None
        }
        StoredForm::Short {
            algorithm,
            quota,
            short,
        } => {
            assert!(quota.limit >= 1 && quota.window_ms >= 1 && quota.burst >= 1 && short >= 0);
            match kind_of_id(algorithm) {
                Some(AlgorithmKind::Gcra) => short_round_trip::<Gcra>(&quota, short, value.len()),
                Some(AlgorithmKind::Token) => short_round_trip::<Token>(&quota, short, value.len()),
                other => panic!("short form of algorithm {other:?}"),
            }
            Some(vec![quota])
        }
        StoredForm::Tiers {
            algorithm,
            count,
            body,
        } => {
            let kind = kind_of_id(algorithm)?;
            ratelimit_core::with_algorithm!(kind, tiers_round_trip(body, count, value.len()))
        }
    }
}

/// One request on the stored value: a refusal as not ours exactly when it is no state.
fn check_request(
    limits: &Limits,
    action: Action,
    value: &[u8],
    expiry: Option<i64>,
    now_ms: i64,
    state: bool,
) {
    match run(limits, action, Some(value), || expiry, now_ms) {
        Err(LimiterError::NotOurs) => assert!(!state, "a state refused as not ours"),
        Err(LimiterError::OutOfRange) => {}
        Ok(outcome) => {
            assert!(state, "a value that is no state was used as one");
            if let Write::Set {
                value,
                expires_at_ms,
            } = &outcome.write
            {
                assert!(*expires_at_ms > now_ms);
                assert!(is_state(value, Some(*expires_at_ms)), "{value:?}");
            }
            if let Action::Peek { .. } = action {
                assert_eq!(outcome.write, Write::Nothing);
            }
        }
    }
}

fn fuzz_state(u: &mut Unstructured<'_>) -> Result<()> {
    let flags: u8 = u.arbitrary()?;
    let expiry: Option<i64> = (flags & 1 == 0).then(|| u.arbitrary()).transpose()?;
    let now_ms: i64 = u.arbitrary()?;
    let amount: i64 = u.int_in_range(1..=i64::MAX)?;
    let value = u.bytes(u.len())?;
    let written_with = check_decoders(value);
    let state = is_state(value, expiry);
    let tiers = written_with
        .filter(|quotas| !quotas.is_empty())
        .unwrap_or_else(|| vec![Quota::new(10, 60_000)]);
    let action = match (flags >> 1) % 3 {
        0 => Action::Hit { cost: amount },
        1 => Action::Peek { cost: amount },
        _ => Action::Refund { amount },
    };
    for (algorithm, _) in AlgorithmKind::ALL {
        let limits = Limits {
            algorithm,
            tiers: tiers.iter().copied().collect(),
        };
        check_request(&limits, action, value, expiry, now_ms, state);
    }
    Ok(())
}

pub fn fuzz(data: &[u8]) {
    let _ = fuzz_state(&mut Unstructured::new(data));
}
