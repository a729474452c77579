//! Target `args`: the argument parser of every command, over arbitrary argv (the input
//! split at spaces). RL.HIT / RL.PEEK / RL.REFUND (`parse_limits`), RL.POLICY SET
//! (`parse_policy`), a call naming a policy (`parse_policy_call`) and CL.THROTTLE
//! (`parse_throttle`) all see the same words, and so do RL.MHIT / RL.MPEEK / RL.MREFUND
//! (`parse_multi`), whose every accepted rule must be one that `parse_limits` or
//! `parse_policy_call` takes on its own, and RL.TAKE (`parse_take`), whose `UPTO` is >= 1
//! and whose written-out rule is one `parse_limits` accepts.

use crate::words::split_words;
use ratelimit_core::args::{
    parse_limits, parse_multi, parse_policy, parse_policy_call, parse_take, policy_arguments,
    KeyRule, Settings, TakeRule, MAX_KEYS,
};
use ratelimit_core::cell::parse_throttle;
use ratelimit_core::duration::{LARGEST_WINDOW_MS, MAX_WINDOW_MS};
use ratelimit_core::encoding::MAX_TIERS;
use ratelimit_core::limiter::{Action, AlgorithmKind, Limits};

/// The default configs, and stricter ones with another default algorithm.
fn settings() -> [Settings; 2] {
    [
        Settings::default(),
        Settings {
            default_algorithm: AlgorithmKind::Gcra,
            max_window_ms: 60_000,
            max_log_limit: 50,
        },
    ]
}

/// An error reply is one protocol-safe line starting with `ERR `.
fn assert_error_reply(message: &str) {
    assert!(message.starts_with("ERR "), "{message:?}");
    assert!(
        message.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
        "{message:?}"
    );
}

/// What every accepted rule satisfies under `settings`.
fn assert_valid_limits(limits: &Limits, settings: &Settings) {
    assert!((1..=MAX_TIERS).contains(&limits.tiers.len()), "{limits:?}");
    for quota in &limits.tiers {
        assert!(quota.limit >= 1 && quota.burst >= 1, "{limits:?}");
        assert!(
            (1..=settings.max_window_ms).contains(&quota.window_ms),
            "{limits:?}"
        );
        if !limits.algorithm.has_burst() || limits.tiers.len() > 1 {
            assert_eq!(quota.burst, quota.limit, "{limits:?}");
        }
        if limits.algorithm == AlgorithmKind::Log {
            assert!(quota.limit <= settings.max_log_limit, "{limits:?}");
        }
        // A calendar window counts as a fixed window, of its period's nominal length.
        if let Some(calendar) = quota.calendar {
            assert_eq!(limits.algorithm, AlgorithmKind::Fixed, "{limits:?}");
            assert_eq!(quota.window_ms, calendar.period.nominal_ms(), "{limits:?}");
            assert!(calendar.zone.name().is_some(), "{limits:?}");
        }
    }
}

pub fn fuzz(data: &[u8]) {
    let words = split_words(data);
    for settings in settings() {
        match parse_limits(words.iter().copied(), &settings) {
            Ok(call) => {
                assert!(call.cost >= 1);
                assert_valid_limits(&call.limits, &settings);
            }
            Err(err) => assert_error_reply(&err.message()),
        }
        match parse_policy(words.iter().copied(), &settings) {
            Ok(policy) => {
                assert_valid_limits(&policy.limits, &settings);
                // RL.POLICY GET shows, and persistence stores, these arguments: they must
                // give the same policy back.
                let shown = policy_arguments(&policy);
                let again = parse_policy(shown.iter().map(|s| s.as_bytes()), &settings);
                assert_eq!(again.as_ref(), Ok(&policy), "{shown:?}");
            }
            Err(err) => assert_error_reply(&err.message()),
        }
        match parse_take(words.iter().copied(), &settings) {
            Ok(take) => {
                assert!(take.upto >= 1);
                match take.rule {
                    TakeRule::Limits(limits) => assert_valid_limits(&limits, &settings),
                    TakeRule::Policy(name) => assert!(words.contains(&name)),
                }
            }
            Err(err) => assert_error_reply(&err.message()),
        }
        match parse_multi(words.iter().copied(), &settings) {
            Ok(call) => {
                assert!((1..=MAX_KEYS).contains(&call.keys.len()));
                assert_eq!(call.keys.len(), call.rules.len());
                for (i, key) in call.keys.iter().enumerate() {
                    assert!(!call.keys[..i].contains(key), "{:?} twice", key);
                }
                for rule in &call.rules {
                    match rule {
                        KeyRule::Limits(given) => {
                            assert!(given.cost >= 1);
                            assert_valid_limits(&given.limits, &settings);
                        }
                        KeyRule::Policy { cost, .. } => assert!(*cost >= 1),
                    }
                }
            }
            Err(err) => assert_error_reply(&err.message()),
        }
    }
    match parse_policy_call(words.iter().copied()) {
        None => assert!(!words
            .first()
            .is_some_and(|w| w.eq_ignore_ascii_case(b"POLICY"))),
        Some(Ok((_, cost))) => assert!(cost >= 1),
        Some(Err(err)) => assert_error_reply(&err.message()),
    }
    match parse_throttle(&words) {
        Ok(throttle) => {
            let quota = throttle.quota;
            assert!(quota.limit >= 1 && quota.burst >= 1 && throttle.quantity >= 0);
            assert!(quota.window_ms >= 1_000 && quota.window_ms <= MAX_WINDOW_MS);
            assert!(quota.window_ms <= LARGEST_WINDOW_MS);
            let (limits, action) = throttle.request();
            assert_eq!(limits.algorithm, AlgorithmKind::Gcra);
            match action {
                Action::Peek { cost } => assert_eq!((cost, throttle.quantity), (0, 0)),
                Action::Hit { cost } => assert!(cost >= 1 && cost == throttle.quantity),
                Action::Refund { .. } => panic!("CL.THROTTLE never refunds"),
            }
        }
        Err(err) => assert_error_reply(&err.message()),
    }
}
