//! Each way a call can fail, as the failure it is taken for, and what each rule's
//! `on_redis_failure` (and `on_module_error`) makes of it.

use super::*;

/// A way Redis fails: what it is, what the scripted Redis does, and the failure the
/// decider must take it for.
type Case = (&'static str, fn() -> Step, Failure);

fn failing_redis() -> [Case; 6] {
    [
        (
            "no answer before the deadline",
            || Step::Later(Duration::from_millis(150), allowed()),
            Failure::Timeout,
        ),
        ("the client timed out", || Step::TimedOut, Failure::Timeout),
        ("connection refused", || Step::Refused, Failure::Connection),
        (
            "loading",
            || Step::Error("LOADING Redis is loading the dataset in memory"),
            Failure::Unavailable,
        ),
        (
            "a module error",
            || Step::Error("ERR policy 'gone' does not exist"),
            Failure::Error,
        ),
        (
            "the module not loaded",
            || Step::Error("ERR unknown command 'RL.HIT', with args beginning with: "),
            Failure::Error,
        ),
    ]
}

#[tokio::test]
async fn each_failure_is_classified_and_decided_as_the_rule_says() {
    for (what, step, failure) in failing_redis() {
        for redis_failure in [
            RedisFailure::Open,
            RedisFailure::Closed,
            RedisFailure::Local,
        ] {
            for error_closed in [false, true] {
                let redis = Scripted::new(move |_| step());
                // Never opened: each case starts with a breaker of its own anyway.
                let decider = Decider::new(redis.clone(), &settings(1000), 100);
                let rule = with_error_closed(&rule("r", 5, redis_failure), error_closed);
                let stacked = decider.decide(&[applied(&rule, "rl:{a}:r")], None).await;
                let case = format!("{what}, {redis_failure:?}, error_closed {error_closed}");
                let closes = match failure {
                    Failure::Error => error_closed,
                    _ => redis_failure == RedisFailure::Closed,
                };
                let local = failure != Failure::Error && redis_failure == RedisFailure::Local;
                match (closes, local) {
                    (true, _) => {
                        assert_eq!(stacked.end, End::Closed { rule: 0, failure }, "{case}")
                    }
                    (false, true) => {
                        assert_eq!(stacked.end, End::Allowed, "{case}");
                        assert!(
                            matches!(stacked.outcomes[0], RuleOutcome::Local { failure: f, .. } if f == failure),
                            "{case}: {:?}",
                            stacked.outcomes[0]
                        );
                    }
                    (false, false) => {
                        assert_eq!(stacked.end, End::Allowed, "{case}");
                        assert!(
                            matches!(stacked.outcomes[0], RuleOutcome::Failed(f) if f == failure),
                            "{case}: {:?}",
                            stacked.outcomes[0]
                        );
                    }
                }
                assert_eq!(redis.sent("RL.HIT").len(), 1, "{case}: one call");
                let errors = metric(&decider, "rl_gateway_module_errors_total{rule=\"r\"}");
                let expected = u64::from(failure == Failure::Error);
                assert_eq!(errors, expected, "{case}: module errors counted");
            }
        }
    }
}

#[tokio::test]
async fn a_reply_that_is_no_decision_is_a_module_error() {
    let redis = Scripted::new(|_| Step::Reply(Value::SimpleString("OK".into())));
    let decider = decider(&redis);
    let rule = with_error_closed(&rule("r", 5, RedisFailure::Closed), false);
    let stacked = decider.decide(&[applied(&rule, "rl:{a}:r")], None).await;
    assert!(matches!(
        stacked.outcomes[0],
        RuleOutcome::Failed(Failure::Error)
    ));
    assert_eq!(stacked.end, End::Allowed, "on_module_error = open");
    assert_eq!(
        metric(&decider, "rl_gateway_module_errors_total{rule=\"r\"}"),
        1
    );
}

#[tokio::test]
async fn a_fail_closed_rule_closes_before_a_local_rule_in_the_same_call() {
    let redis = Scripted::new(|_| Step::Refused);
    let decider = Decider::new(redis.clone(), &settings(1000), 100);
    let (local, closed) = (
        rule("local", 5, RedisFailure::Local),
        rule("closed", 5, RedisFailure::Closed),
    );
    let applying = [
        applied(&local, "rl:{a}:local"),
        applied(&closed, "rl:{a}:closed"),
    ];
    let stacked = decider.decide(&applying, None).await;
    assert_eq!(
        stacked.end,
        End::Closed {
            rule: 1,
            failure: Failure::Connection
        }
    );
    assert_eq!(redis.sent("RL.MHIT").len(), 1, "one call for the slot");
    // Nothing was counted locally: the local rule's whole budget is still there.
    let alone = [applied(&local, "rl:{a}:local")];
    for _ in 0..5 {
        assert_eq!(decider.decide(&alone, None).await.end, End::Allowed);
    }
    assert!(matches!(
        decider.decide(&alone, None).await.end,
        End::Denied { .. }
    ));
}
