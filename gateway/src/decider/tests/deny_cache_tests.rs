//! The deny cache: a denial is answered without Redis until its retry time, then Redis is
//! asked again; only denials that will last are remembered.

use super::*;
use std::time::Instant;

#[tokio::test]
async fn a_denial_is_answered_from_memory_until_its_retry_time_then_asked_again() {
    // Denied for 200 ms, then allowed.
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = asked.clone();
    let redis =
        Scripted::new(
            move |_| match count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
                0 => Step::Reply(hit(false, 5, 0, 200)),
                _ => Step::Reply(allowed()),
            },
        );
    let decider = decider(&redis);
    let rule = rule("r", 5, RedisFailure::Open);
    let applying = [applied(&rule, "rl:{a}:r")];
    let started = Instant::now();
    let first = decider.decide(&applying, None).await;
    assert_eq!(
        first.end,
        End::Denied {
            binding: 0,
            cached: false
        }
    );
    // Answered from memory while the denial holds; the first answer that is not cached
    // comes from Redis, which allows by then.
    let after = loop {
        let stacked = decider.decide(&applying, None).await;
        if !matches!(stacked.end, End::Denied { cached: true, .. }) {
            break stacked;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "not before its retry time"
    );
    assert_eq!(after.end, End::Allowed);
    assert_eq!(
        redis.sent("RL.HIT").len(),
        2,
        "Redis asked once more, after the wait"
    );
}

#[tokio::test]
async fn a_cached_denial_shows_its_wait_shortened_by_the_time_passed() {
    let redis = Scripted::new(|_| Step::Reply(hit(false, 5, 0, 60_000)));
    let decider = decider(&redis);
    let rule = rule("r", 5, RedisFailure::Open);
    let applying = [applied(&rule, "rl:{a}:r")];
    decider.decide(&applying, None).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cached = decider.decide(&applying, None).await;
    let RuleOutcome::Denied {
        verdict,
        cached: true,
    } = &cached.outcomes[0]
    else {
        panic!("not from the cache: {:?}", cached.outcomes[0]);
    };
    let wait = verdict.binding().retry_after_ms;
    assert!(wait <= 60_000 - 20 && wait > 0, "aged: {wait}");
}

#[tokio::test]
async fn of_two_cached_denials_the_longer_wait_binds() {
    let redis = Scripted::new(|_| {
        Step::Reply(multi(
            false,
            1,
            vec![hit(false, 5, 0, 1_000), hit(false, 5, 0, 50_000)],
        ))
    });
    let decider = decider(&redis);
    let (a, b) = (
        rule("a", 5, RedisFailure::Open),
        rule("b", 5, RedisFailure::Open),
    );
    let applying = [applied(&a, "rl:{x}:a"), applied(&b, "rl:{x}:b")];
    decider.decide(&applying, None).await;
    let cached = decider.decide(&applying, None).await;
    assert_eq!(
        cached.end,
        End::Denied {
            binding: 1,
            cached: true
        }
    );
    assert_eq!(redis.all_sent().len(), 1);
}

#[tokio::test]
async fn denials_that_may_not_last_are_not_remembered() {
    let redis = Scripted::new(|_| Step::Reply(denied()));
    let decider = decider(&redis);
    let rule = rule("r", 5, RedisFailure::Open);
    // A cost of 3 denied says nothing of a request of 1.
    let costly = [Applied {
        rule: rule.clone(),
        key: "rl:{a}:costly".into(),
        cost: Some(3),
    }];
    // A key named twice (Envoy descriptors repeated) counted the call's own other hit.
    let twice = [
        applied(&rule, "rl:{a}:twice"),
        applied(&rule, "rl:{a}:twice"),
    ];
    for applying in [&costly[..], &twice[..]] {
        for _ in 0..2 {
            let stacked = decider.decide(applying, None).await;
            assert!(matches!(stacked.end, End::Denied { cached: false, .. }));
        }
    }
    assert_eq!(redis.sent("RL.HIT").len(), 4, "every one asked Redis");
}

#[tokio::test]
async fn new_rules_and_refunds_forget_denials() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.REFUND" => Step::Reply(hit(true, 5, 1, 0)),
        _ => Step::Reply(denied()),
    });
    let decider = decider(&redis);
    let rule = rule("r", 5, RedisFailure::Open);
    let applying = [applied(&rule, "rl:{a}:r")];
    decider.decide(&applying, None).await;
    decider.forget_denials();
    let after_reload = decider.decide(&applying, None).await;
    assert!(matches!(
        after_reload.end,
        End::Denied { cached: false, .. }
    ));
    decider.look(&applying, Look::Refund).await;
    let after_refund = decider.decide(&applying, None).await;
    assert!(matches!(
        after_refund.end,
        End::Denied { cached: false, .. }
    ));
    assert_eq!(redis.sent("RL.HIT").len(), 3);
}
