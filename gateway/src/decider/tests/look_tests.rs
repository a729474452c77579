//! Looks (`RL.PEEK`): one call per slot, counting nothing; an error of a call for several
//! keys asks each alone, and each rule answers for itself.

use super::*;

/// Each rule's answer, as the remaining count or the failure.
fn said(answers: &crate::decider::look::LookAnswers) -> Vec<Result<Option<u64>, Failure>> {
    answers
        .iter()
        .map(|a| match a {
            Ok(verdict) => Ok(verdict.as_ref().map(|v| v.binding().remaining)),
            Err(failure) => Err(*failure),
        })
        .collect()
}

#[tokio::test]
async fn a_peek_is_one_call_per_slot_and_skips_rules_without_limits() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.MPEEK" => Step::Reply(multi(true, 0, vec![hit(true, 5, 3, 0), hit(true, 5, 2, 0)])),
        "RL.PEEK" => Step::Reply(hit(true, 5, 1, 0)),
        _ => Step::Refused,
    })
    .cluster();
    let decider = decider(&redis);
    let mut free = Rule::clone(&rule("free", 5, RedisFailure::Open));
    free.limit = crate::rules::Limit::Unlimited;
    let free = Arc::new(free);
    let (a, b, c) = (
        rule("a", 5, RedisFailure::Open),
        rule("b", 5, RedisFailure::Open),
        rule("c", 5, RedisFailure::Open),
    );
    let applying = [
        applied(&a, "rl:{1}:a"),
        applied(&free, "rl:{1}:free"),
        applied(&b, "rl:{2}:b"),
        applied(&c, "rl:{1}:c"),
    ];
    let answers = decider.look(&applying, Look::Peek).await;
    assert_eq!(
        said(&answers),
        [Ok(Some(3)), Ok(None), Ok(Some(1)), Ok(Some(2))]
    );
    let mpeek = redis.sent("RL.MPEEK");
    assert_eq!(mpeek.len(), 1);
    assert_eq!(mpeek[0][1..4], ["2", "rl:{1}:a", "rl:{1}:c"]);
    assert_eq!(redis.sent("RL.PEEK").len(), 1);
    assert!(redis.sent("RL.HIT").is_empty() && redis.sent("RL.MHIT").is_empty());
}

#[tokio::test]
async fn an_error_of_a_multi_key_peek_asks_each_rule_alone() {
    let redis = Scripted::new(|words| match (words[0].as_str(), words[1].as_str()) {
        ("RL.MPEEK", _) => Step::Error("ERR policy 'gone' does not exist"),
        ("RL.PEEK", "rl:{x}:a") => Step::Error("ERR policy 'gone' does not exist"),
        ("RL.PEEK", _) => Step::Reply(hit(true, 5, 4, 0)),
        _ => Step::Refused,
    });
    let decider = decider(&redis);
    let (a, b) = (
        rule("a", 5, RedisFailure::Open),
        rule("b", 5, RedisFailure::Open),
    );
    let applying = [applied(&a, "rl:{x}:a"), applied(&b, "rl:{x}:b")];
    let answers = decider.look(&applying, Look::Peek).await;
    assert_eq!(said(&answers), [Err(Failure::Error), Ok(Some(4))]);
    let peeks: Vec<String> = redis.sent("RL.PEEK").iter().map(|c| c[1].clone()).collect();
    assert_eq!(peeks, ["rl:{x}:a", "rl:{x}:b"]);
    assert_eq!(
        metric(&decider, "rl_gateway_module_errors_total{rule=\"a\"}"),
        1
    );
}

#[tokio::test]
async fn a_look_goes_through_the_breaker() {
    let redis = Scripted::new(|_| Step::Refused);
    let decider = Decider::new(redis.clone(), &settings(1), 100);
    let rule = rule("r", 5, RedisFailure::Open);
    let applying = [applied(&rule, "rl:{a}:r")];
    let first = decider.look(&applying, Look::Peek).await;
    let second = decider.look(&applying, Look::Peek).await;
    assert_eq!(said(&first), [Err(Failure::Connection)]);
    assert_eq!(said(&second), [Err(Failure::Breaker)]);
    assert_eq!(redis.all_sent().len(), 1);
}
