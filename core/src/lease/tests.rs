use super::args::{parse_acquire, LeaseArgError};
use super::layout::{decode, encode, GENERATED_LEASE_BYTES};
use super::*;
use crate::args::{parse_limits, ArgError, Settings};
use crate::limiter::MemoryKey;
use proptest::prelude::*;

const T0: i64 = 1_796_083_200_000;

fn ask(max: i64, ttl_ms: i64, id: &[u8]) -> Acquire<'_> {
    Acquire {
        max,
        ttl_ms,
        id: LeaseId::parse(id),
        tiers: None,
    }
}

fn raw(n: u8) -> LeaseId<'static> {
    LeaseId::Raw([n; GENERATED_ID_LEN])
}

/// Runs an acquire on `key` and stores its write.
fn take(key: &mut MemoryKey, now: i64, request: &Acquire<'_>) -> Acquired {
    let taken = acquire(key.value(), now, request).expect("acquire");
    key.apply(&taken.write);
    taken
}

#[test]
fn never_more_than_max_and_the_earliest_end_is_the_wait() {
    let mut key = MemoryKey::default();
    let ids: Vec<Vec<u8>> = (0..5).map(|i| format!("c{i}").into_bytes()).collect();
    let answers: Vec<(bool, i64, i64)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let a = take(&mut key, T0 + i as i64, &ask(3, 1_000, id));
            (a.acquired, a.free, a.retry_after_ms)
        })
        .collect();
    assert_eq!(
        answers,
        [
            (true, 2, 0),
            (true, 1, 0),
            (true, 0, 0),
            (false, 0, 997),
            (false, 0, 996)
        ]
    );
    assert_eq!(key.expires_at_ms(), Some(T0 + 2 + 1_000));
    let held = peek(key.value(), T0 + 5, 3).expect("peek");
    assert_eq!((held.held, held.free, held.retry_after_ms), (3, 0, 995));
    assert_eq!(held.reset_after_ms, 997);
}

#[test]
fn a_lease_frees_at_exactly_its_absolute_expiry() {
    let mut key = MemoryKey::default();
    take(&mut key, T0, &ask(1, 200, b"a"));
    let end = T0 + 200;
    assert!(!take(&mut key, end - 1, &ask(1, 200, b"b")).acquired);
    assert_eq!(peek(key.value(), end - 1, 1).map(|h| h.held), Ok(1));
    assert_eq!(peek(key.value(), end, 1).map(|h| h.held), Ok(0));
    assert!(take(&mut key, end, &ask(1, 200, b"b")).acquired);
}

#[test]
fn a_clock_that_goes_back_never_frees_early() {
    let mut key = MemoryKey::default();
    take(&mut key, T0, &ask(1, 1_000, b"a"));
    for back in [1, 500, 60_000, T0] {
        let at = T0 - back;
        let other = take(&mut key, at, &ask(1, 1_000, b"b"));
        assert!(!other.acquired, "{back}");
        assert_eq!(
            other.retry_after_ms,
            1_000 + back,
            "the wait grows, never lies"
        );
    }
}

#[test]
fn release_and_renew_by_id_only() {
    let mut key = MemoryKey::default();
    take(&mut key, T0, &ask(2, 1_000, b"a"));
    take(&mut key, T0, &ask(2, 1_000, b"b"));
    let before = key.clone();
    for wrong in [&b"c"[..], b"A", b"a ", b"b\0"] {
        let id = LeaseId::parse(wrong);
        let released = release(key.value(), T0 + 1, &id).expect("release");
        assert_eq!(
            released,
            Changed {
                held: false,
                write: Write::Nothing
            }
        );
        let renewed = renew(key.value(), T0 + 1, &id, 5_000).expect("renew");
        assert_eq!(renewed.write, Write::Nothing);
    }
    assert_eq!(key, before);
    let renewed = renew(key.value(), T0 + 10, &LeaseId::parse(b"a"), 5_000).expect("renew");
    assert!(renewed.held);
    key.apply(&renewed.write);
    assert_eq!(key.expires_at_ms(), Some(T0 + 5_010));
    let released = release(key.value(), T0 + 20, &LeaseId::parse(b"a")).expect("release");
    assert!(released.held);
    key.apply(&released.write);
    assert_eq!(key.expires_at_ms(), Some(T0 + 1_000), "b's end again");
    let last = release(key.value(), T0 + 20, &LeaseId::parse(b"b")).expect("release");
    assert_eq!(last.write, Write::Delete, "no lease left: the key goes");
}

#[test]
fn a_renewal_never_shortens_and_an_expired_lease_is_gone() {
    let mut key = MemoryKey::default();
    take(&mut key, T0, &ask(1, 10_000, b"a"));
    let shorter = renew(key.value(), T0 + 1, &LeaseId::parse(b"a"), 100).expect("renew");
    key.apply(&shorter.write);
    assert_eq!(key.expires_at_ms(), Some(T0 + 10_000));
    let late = renew(key.value(), T0 + 10_000, &LeaseId::parse(b"a"), 100).expect("renew");
    assert!(!late.held);
    let late = release(key.value(), T0 + 10_000, &LeaseId::parse(b"a")).expect("release");
    assert!(!late.held);
}

#[test]
fn a_duplicate_id_is_refused_only_while_held() {
    let mut key = MemoryKey::default();
    take(&mut key, T0, &ask(5, 100, b"a"));
    assert_eq!(
        acquire(key.value(), T0 + 99, &ask(5, 100, b"a")),
        Err(LeaseError::DuplicateId)
    );
    assert!(take(&mut key, T0 + 100, &ask(5, 100, b"a")).acquired);
}

#[test]
fn hex_ids_are_stored_raw_and_shown_as_given() {
    let hex = b"00112233445566778899aabbccddeeff";
    let id = LeaseId::parse(hex);
    assert!(matches!(id, LeaseId::Raw(_)));
    assert_eq!(id.display(), hex.to_vec());
    assert!(matches!(
        LeaseId::parse(b"00112233445566778899AABBCCDDEEFF"),
        LeaseId::Given(_)
    ));
    let mut key = MemoryKey::default();
    take(&mut key, T0, &ask(1, 100, hex));
    assert_eq!(
        key.value().map(<[u8]>::len),
        Some(3 + GENERATED_LEASE_BYTES)
    );
}

#[test]
fn a_lease_with_a_generated_id_takes_25_bytes() {
    let mut key = MemoryKey::default();
    for n in 0..100u8 {
        let request = Acquire {
            id: raw(n),
            ..ask(10_000, 1_000, b"")
        };
        take(&mut key, T0, &request);
    }
    let len = key.value().map(<[u8]>::len).unwrap_or(0);
    assert_eq!(len, 1 + 1 + 1 + 100 * GENERATED_LEASE_BYTES);
    assert_eq!(GENERATED_LEASE_BYTES, 25);
}

#[test]
fn tiers_count_only_with_a_lease_and_live_in_the_same_value() {
    let settings = Settings::default();
    let words: [&[u8]; 2] = [b"2", b"1h"];
    let limits = parse_limits(words.into_iter(), &settings)
        .expect("tiers")
        .limits;
    let with_tiers = |max, id: &'static [u8]| Acquire {
        tiers: Some((&limits, 1)),
        ..ask(max, 1_000, id)
    };
    let mut key = MemoryKey::default();
    assert!(take(&mut key, T0, &with_tiers(1, b"a")).acquired);
    // The slot is taken: the tier is looked at, not counted.
    let full = take(&mut key, T0 + 1, &with_tiers(1, b"b"));
    assert!(!full.acquired);
    assert_eq!(full.write, Write::Nothing);
    assert_eq!(
        full.tiers.map(|t| t.decision.remaining),
        Some(0),
        "as RL.PEEK says"
    );
    assert_eq!(full.retry_after_ms, 999);
    release_id(&mut key, T0 + 2, b"a");
    assert!(take(&mut key, T0 + 3, &with_tiers(1, b"b")).acquired);
    release_id(&mut key, T0 + 4, b"b");
    // Two hits per hour: the third is denied by the tier, with a slot free.
    let denied = take(&mut key, T0 + 5, &with_tiers(1, b"c"));
    assert!(!denied.acquired);
    assert_eq!(denied.free, 1);
    assert!(
        denied.retry_after_ms > 1_000,
        "the hour's wait: {}",
        denied.retry_after_ms
    );
    assert_eq!(denied.write, Write::Nothing);
    // The key lasts as long as its tier state, with no lease left.
    let tier_end = key.expires_at_ms().expect("expiry");
    assert!(tier_end > T0 + 1_000);
    let value = key.value().map(|v| decode(v).expect("leases"));
    assert_eq!(value.map(|v| v.leases.len()), Some(0));
}

fn release_id(key: &mut MemoryKey, now: i64, id: &[u8]) {
    let released = release(key.value(), now, &LeaseId::parse(id)).expect("release");
    assert!(released.held);
    key.apply(&released.write);
}

#[test]
fn refuses_values_that_are_not_leases() {
    for foreign in [
        &b"5"[..],
        b"hello",
        b"\x01\x01\x01\x02\x02\x02",
        b"\x02",
        b"\x02\x00\x01",
    ] {
        assert_eq!(
            acquire(Some(foreign), T0, &ask(1, 1, b"a")),
            Err(LeaseError::NotLeases),
            "{foreign:?}"
        );
        assert_eq!(peek(Some(foreign), T0, 1), Err(LeaseError::NotLeases));
    }
    // A count above the bound is refused before anything is read.
    let mut lying = vec![LEASE_V1_FOR_TESTS, 0];
    crate::codec::put_varint(&mut crate::codec::Bytes::new(), 0);
    lying.extend_from_slice(&[0x91, 0x4e]); // 10001
    assert_eq!(decode(&lying), None);
}

const LEASE_V1_FOR_TESTS: u8 = layout::LEASE_V1;

#[test]
fn acquire_arguments() {
    fn parse<'a>(words: &[&'a [u8]]) -> Result<super::args::AcquireArgs<'a>, LeaseArgError> {
        parse_acquire(words, &Settings::default(), 10)
    }
    assert_eq!(parse(&[b"0", b"1s"]).unwrap_err(), LeaseArgError::Max(10));
    assert_eq!(parse(&[b"11", b"1s"]).unwrap_err(), LeaseArgError::Max(10));
    assert_eq!(parse(&[b"-1", b"1s"]).unwrap_err(), LeaseArgError::Max(10));
    for ttl in [&b"0"[..], b"-5", b"0ms", b"367d", b"1.5s", b""] {
        assert!(
            matches!(parse(&[b"3", ttl]), Err(LeaseArgError::Ttl(_))),
            "{ttl:?}"
        );
    }
    assert_eq!(
        parse(&[b"3", b"1s", b"ID", b""]).unwrap_err(),
        LeaseArgError::Id
    );
    assert_eq!(
        parse(&[b"3", b"1s", b"ID", &[b'x'; 65]]).unwrap_err(),
        LeaseArgError::Id
    );
    assert_eq!(parse(&[b"3", b"1s", b"ID"]).unwrap_err(), LeaseArgError::Id);
    assert_eq!(
        parse(&[b"3", b"1s", b"ID", b"a", b"ID", b"b"]).unwrap_err(),
        LeaseArgError::RepeatedId
    );
    assert_eq!(
        parse(&[b"3", b"1s", b"COST", b"2"]).unwrap_err(),
        LeaseArgError::OptionsWithoutTiers
    );
    // A mistyped option is named, before the tiers or after them.
    for args in [
        &[&b"3"[..], b"1s", b"IDS", b"x"][..],
        &[b"3", b"1s", b"5", b"1m", b"IDS", b"x"],
    ] {
        let refused = parse(args).unwrap_err();
        assert_eq!(refused, LeaseArgError::UnknownOption("IDS".into()));
        assert_eq!(
            refused.message(),
            "ERR unknown option 'IDS' (expected ALGO, BURST, COST, TZ, ANCHOR or ID)"
        );
    }
    let ok = parse(&[
        b"3", b"250ms", b"ID", b"ALGO", b"5", b"1m", b"ALGO", b"gcra",
    ])
    .expect("ok");
    assert_eq!(ok.id, Some(LeaseId::Given(b"ALGO")));
    assert_eq!(ok.ttl_ms, 250);
    assert!(ok.tiers.is_some());
    assert!(parse(&[b"3", b"1s", b"5"]).is_err());
    let id64 = [b'y'; 64];
    assert!(parse(&[b"3", b"1s", b"id", &id64]).is_ok());
}

/// One step of a random history on one key.
#[derive(Debug, Clone)]
enum Step {
    Acquire { id: u8, ttl_ms: i64 },
    Release { id: u8 },
    Renew { id: u8, ttl_ms: i64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..12u8, 1..2_000i64).prop_map(|(id, ttl_ms)| Step::Acquire { id, ttl_ms }),
        (0..12u8).prop_map(|id| Step::Release { id }),
        (0..12u8, 1..2_000i64).prop_map(|(id, ttl_ms)| Step::Renew { id, ttl_ms }),
    ]
}

proptest! {
    /// Whatever happens, and however the clock jumps (backwards too): never more than
    /// `max` held; a lease stays held until its absolute end unless released; the key
    /// expires exactly with its last lease; the value decodes.
    #[test]
    fn never_more_than_max_and_never_freed_early(
        max in 1..5i64,
        steps in proptest::collection::vec((step(), -500..600i64), 1..80),
    ) {
        let mut key = MemoryKey::default();
        let mut now = T0;
        // The model: id -> absolute end of each lease the value holds. A write drops the
        // leases ended by then; until one, a lease read as ended reads as held again if
        // the clock goes back before its end (never freed early).
        let mut model: std::collections::BTreeMap<u8, i64> = Default::default();
        for (step, jump) in steps {
            now += jump;
            let before = key.clone();
            // Ids of every length class: raw (32 hex digits), 1 to 12 bytes.
            let id_bytes = |id: u8| -> Vec<u8> {
                if id.is_multiple_of(3) {
                    format!("{:032x}", u128::from(id) * 0x0101_0101_0101_0101).into_bytes()
                } else {
                    vec![b'a' + id; usize::from(id)]
                }
            };
            match step {
                Step::Acquire { id, ttl_ms } => {
                    let bytes = id_bytes(id);
                    let request = Acquire { max, ttl_ms, id: LeaseId::parse(&bytes), tiers: None };
                    let live = model.values().filter(|&&end| end > now).count() as i64;
                    match acquire(key.value(), now, &request) {
                        Err(LeaseError::DuplicateId) => {
                            prop_assert!(model.get(&id).is_some_and(|&end| end > now));
                        }
                        Ok(taken) => {
                            prop_assert_eq!(taken.acquired, live < max);
                            if taken.acquired {
                                model.insert(id, now + ttl_ms);
                            } else {
                                let earliest = model.values().filter(|&&e| e > now).min();
                                prop_assert_eq!(Some(taken.retry_after_ms), earliest.map(|e| e - now));
                            }
                            key.apply(&taken.write);
                        }
                        Err(other) => prop_assert!(false, "{other:?}"),
                    }
                }
                Step::Release { id } => {
                    let bytes = id_bytes(id);
                    let done = release(key.value(), now, &LeaseId::parse(&bytes)).expect("release");
                    let held = model.get(&id).is_some_and(|&end| end > now);
                    prop_assert_eq!(done.held, held);
                    if held { model.remove(&id); }
                    key.apply(&done.write);
                }
                Step::Renew { id, ttl_ms } => {
                    let bytes = id_bytes(id);
                    let done = renew(key.value(), now, &LeaseId::parse(&bytes), ttl_ms).expect("renew");
                    let held = model.get(&id).is_some_and(|&end| end > now);
                    prop_assert_eq!(done.held, held);
                    if let Some(end) = model.get_mut(&id).filter(|_| held) {
                        *end = (*end).max(now + ttl_ms);
                    }
                    key.apply(&done.write);
                }
            }
            if key != before {
                model.retain(|_, end| *end > now);
            }
            let held = peek(key.value(), now, max).expect("peek");
            prop_assert!(held.held <= max);
            prop_assert_eq!(held.held, model.values().filter(|&&end| end > now).count() as i64);
            if let Some(value) = key.value() {
                let decoded = decode(value).expect("decodes");
                prop_assert!(decoded.leases.len() as i64 <= max);
                let last = decoded.leases.iter().map(|l| l.expires_at_ms).max();
                prop_assert_eq!(key.expires_at_ms(), last);
                let again = encode(&decoded);
                prop_assert_eq!(again.as_slice(), value);
            }
        }
    }

    #[test]
    fn decoding_junk_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut with_tag = vec![layout::LEASE_V1];
        with_tag.extend_from_slice(&bytes);
        for value in [&bytes[..], &with_tag[..]] {
            prop_assert_eq!(decode(value).is_some(), is_lease(value), "the two readers agree");
            if let Some(decoded) = decode(value) {
                let again = encode(&decoded);
                prop_assert_eq!(again.as_slice(), value);
            }
            let _ = peek(Some(value), T0, 3);
            let _ = acquire(Some(value), T0, &ask(3, 100, b"x"));
            let _ = release(Some(value), T0, &LeaseId::parse(b"x"));
        }
    }
}

#[test]
fn a_lower_max_waits_for_enough_leases_to_end() {
    // Five held (ends T0+100..T0+500); a caller with max 3 needs three of them to end.
    let mut key = MemoryKey::default();
    for i in 0..5u8 {
        take(&mut key, T0, &ask(5, 100 * (i64::from(i) + 1), &[b'a' + i]));
    }
    let denied = acquire(key.value(), T0, &ask(3, 1_000, b"z")).expect("acquire");
    assert!(!denied.acquired);
    assert_eq!(
        denied.retry_after_ms, 300,
        "three must end before a slot of 3 frees"
    );
    let held = peek(key.value(), T0, 3).expect("peek");
    assert_eq!(held.retry_after_ms, 300);
    let after = acquire(key.value(), T0 + 300, &ask(3, 1_000, b"z")).expect("acquire");
    assert!(after.acquired, "free at exactly that wait");
}

/// The replies of the lease commands (`message`) are `ERR ` and the Display text.
#[test]
fn lease_errors_display_the_reply_without_err() {
    let texts = [
        (
            LeaseError::NotLeases,
            "key holds a value that is not leases (a rate-limit state of RL.HIT, or another \
             string)",
        ),
        (
            LeaseError::DuplicateId,
            "ID is already held on this key: release or renew it",
        ),
        (
            LeaseError::OutOfRange,
            "ttl or the tiers are too large for the server clock",
        ),
    ];
    for (err, text) in texts {
        assert_eq!(err.to_string(), text);
        assert_eq!(err.message(), format!("ERR {text}"));
    }
    let tiers = LeaseArgError::Tiers(ArgError::Cost);
    assert_eq!(tiers.to_string(), "COST must be a positive integer");
    assert_eq!(tiers.message(), "ERR COST must be a positive integer");
}
