//! The circuit breaker as the decision meets it: opened by failures in a row, not by error
//! replies; while open no call is sent; after its open time one request probes, and the
//! probe's answer closes it or opens it again.

use super::*;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// A Redis that refuses connections until `up` is set, then allows.
fn switchable(up: &Arc<AtomicBool>) -> Scripted {
    let answering = up.clone();
    Scripted::new(move |_| match answering.load(Relaxed) {
        true => Step::Reply(allowed()),
        false => Step::Refused,
    })
}

/// Decides until the breaker lets a call through (the probe), at most a second.
async fn until_probed(decider: &Decider<Scripted>, applying: &[Applied]) -> Stacked {
    for _ in 0..200 {
        let stacked = decider.decide(applying, None).await;
        if !matches!(stacked.outcomes[0], RuleOutcome::Failed(Failure::Breaker)) {
            return stacked;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("never probed");
}

#[tokio::test]
async fn a_probe_answered_closes_the_breaker() {
    let up = Arc::new(AtomicBool::new(false));
    let redis = switchable(&up);
    let decider = Decider::new(
        redis.clone(),
        &settings_open_for(2, Duration::from_millis(50)),
        100,
    );
    let open = rule("open", 5, RedisFailure::Open);
    let applying = [applied(&open, "rl:{a}:open")];
    for _ in 0..2 {
        decider.decide(&applying, None).await;
    }
    assert!(decider.breaker_open());
    up.store(true, Relaxed);
    let probe = until_probed(&decider, &applying).await;
    assert!(matches!(probe.outcomes[0], RuleOutcome::Allowed(_)));
    assert!(!decider.breaker_open());
    assert_eq!(metric(&decider, "rl_gateway_breaker_open"), 0);
    let sent = redis.sent("RL.HIT").len();
    decider.decide(&applying, None).await;
    assert_eq!(
        redis.sent("RL.HIT").len(),
        sent + 1,
        "closed: every call goes"
    );
}

#[tokio::test]
async fn a_probe_that_fails_opens_the_breaker_again() {
    let up = Arc::new(AtomicBool::new(false));
    let redis = switchable(&up);
    let decider = Decider::new(
        redis.clone(),
        &settings_open_for(2, Duration::from_millis(50)),
        100,
    );
    let open = rule("open", 5, RedisFailure::Open);
    let applying = [applied(&open, "rl:{a}:open")];
    for _ in 0..2 {
        decider.decide(&applying, None).await;
    }
    let probe = until_probed(&decider, &applying).await;
    assert!(matches!(
        probe.outcomes[0],
        RuleOutcome::Failed(Failure::Connection)
    ));
    assert!(decider.breaker_open());
    assert_eq!(redis.sent("RL.HIT").len(), 3, "two failures and one probe");
}

#[tokio::test]
async fn error_replies_never_open_the_breaker() {
    let redis = Scripted::new(|_| Step::Error("ERR unknown command 'RL.HIT'"));
    let decider = Decider::new(redis.clone(), &settings(2), 100);
    let rule = with_error_closed(&rule("r", 5, RedisFailure::Open), false);
    let applying = [applied(&rule, "rl:{a}:r")];
    for _ in 0..5 {
        let stacked = decider.decide(&applying, None).await;
        assert!(matches!(
            stacked.outcomes[0],
            RuleOutcome::Failed(Failure::Error)
        ));
    }
    assert!(!decider.breaker_open());
    assert_eq!(redis.sent("RL.HIT").len(), 5, "every one reached Redis");
}

#[tokio::test]
async fn a_server_that_cannot_take_writes_opens_the_breaker() {
    let redis =
        Scripted::new(|_| Step::Error("READONLY You can't write against a read only replica."));
    let decider = Decider::new(redis.clone(), &settings(2), 100);
    let rule = rule("r", 5, RedisFailure::Open);
    let applying = [applied(&rule, "rl:{a}:r")];
    let mut failures = Vec::new();
    for _ in 0..3 {
        if let RuleOutcome::Failed(f) = decider.decide(&applying, None).await.outcomes[0] {
            failures.push(f);
        }
    }
    assert_eq!(
        failures,
        [Failure::Unavailable, Failure::Unavailable, Failure::Breaker]
    );
    assert!(decider.breaker_open());
    assert_eq!(metric(&decider, "rl_gateway_breaker_open"), 1);
}

#[tokio::test]
async fn a_release_goes_past_an_open_breaker() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.RELEASE" => Step::Reply(Value::Int(1)),
        _ => Step::Refused,
    });
    let decider = Decider::new(redis.clone(), &settings(1), 100);
    let leased = rule("r", 5, RedisFailure::Open);
    decider.decide(&[applied(&leased, "rl:{a}:r")], None).await;
    assert!(decider.breaker_open());
    let released = decider.release(&leased, "rl:{a}:r", "id-1").await;
    assert_eq!(released, Released::Freed);
    assert_eq!(
        redis.sent("RL.RELEASE"),
        [["RL.RELEASE", "rl:{a}:r", "id-1"]]
    );
}
