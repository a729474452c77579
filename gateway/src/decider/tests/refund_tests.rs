//! Refunds by status (`Decider::refund`, `Decider::look` with `Look::Refund`): past the
//! breaker, retried while Redis cannot take them, never sent twice once they went out.

use super::*;

#[tokio::test]
async fn a_refund_by_status_gives_back_the_rules_cost_and_shows_what_is_left() {
    let redis = Scripted::new(|_| Step::Reply(hit(true, 30, 29, 0)));
    let decider = decider(&redis);
    let costly = Arc::new(test_rule("costly", 30, 60_000, None, 3, RedisFailure::Open));
    let after = decider.refund(&costly, "rl:{a}:costly").await;
    assert_eq!(after.map(|v| v.binding().remaining), Some(29));
    let sent = redis.sent("RL.REFUND");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0][1], "rl:{a}:costly");
    assert_eq!(
        sent[0].iter().filter(|w| *w == "COST").count(),
        1,
        "the rule's own cost, once: {:?}",
        sent[0]
    );
    assert_eq!(sent[0].last().map(String::as_str), Some("3"));
    assert_eq!(
        metric(&decider, "rl_gateway_refunds_total{rule=\"costly\"}"),
        1
    );
}

#[tokio::test]
async fn a_refund_refused_before_it_ran_is_sent_again_until_answered() {
    let tries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = tries.clone();
    let redis =
        Scripted::new(
            move |_| match count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
                0 => Step::Refused,
                1 => Step::Error("LOADING Redis is loading the dataset in memory"),
                _ => Step::Reply(hit(true, 5, 5, 0)),
            },
        );
    let decider = decider(&redis);
    let rule = rule("login", 5, RedisFailure::Closed);
    decider.refund(&rule, "rl:{a}:login").await;
    eventually("the third try", || redis.sent("RL.REFUND").len() == 3).await;
}

#[tokio::test]
async fn a_refund_answered_with_an_error_is_not_sent_again() {
    // The refund's task ends on an error reply, dropping the answer `refund` waits for:
    // once `refund` returns, no other try can come.
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.REFUND" => Step::Error("ERR policy 'gone' does not exist"),
        _ => Step::Reply(allowed()),
    });
    let decider = decider(&redis);
    let rule = rule("login", 5, RedisFailure::Closed);
    let after = decider.refund(&rule, "rl:{a}:login").await;
    assert!(after.is_none(), "no verdict in an error reply");
    assert_eq!(redis.sent("RL.REFUND").len(), 1);
    assert_eq!(
        metric(&decider, "rl_gateway_refunds_total{rule=\"login\"}"),
        0
    );
}

#[tokio::test]
async fn a_look_refund_answers_each_rule_and_counts_only_what_was_given_back() {
    let redis = Scripted::new(|_| {
        Step::Reply(multi(
            false,
            1,
            vec![hit(true, 5, 5, 0), hit(false, 5, 0, 100)],
        ))
    });
    let decider = decider(&redis);
    let (a, b) = (
        rule("a", 5, RedisFailure::Open),
        rule("b", 5, RedisFailure::Open),
    );
    let applying = [applied(&a, "rl:{x}:a"), applied(&b, "rl:{x}:b")];
    let answers = decider.look(&applying, Look::Refund).await;
    let remaining: Vec<Option<u64>> = answers
        .iter()
        .map(|a| a.as_ref().ok()?.as_ref().map(|v| v.binding().remaining))
        .collect();
    assert_eq!(remaining, [Some(5), Some(0)]);
    let sent = redis.sent("RL.MREFUND");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0][1..4], ["2", "rl:{x}:a", "rl:{x}:b"]);
    assert_eq!(metric(&decider, "rl_gateway_refunds_total{rule=\"a\"}"), 1);
    assert_eq!(metric(&decider, "rl_gateway_refunds_total{rule=\"b\"}"), 0);
}

#[tokio::test]
async fn a_local_count_is_given_back_to_the_local_limit() {
    // Redis is down: the local limit of 2 decides; giving one back lets one more in.
    let redis = Scripted::new(|_| Step::Refused);
    let decider = Decider::new(redis.clone(), &settings(1000), 100);
    let local = rule("local", 2, RedisFailure::Local);
    let applying = [applied(&local, "rl:{a}:local")];
    for _ in 0..2 {
        assert_eq!(decider.decide(&applying, None).await.end, End::Allowed);
    }
    assert!(matches!(
        decider.decide(&applying, None).await.end,
        End::Denied { .. }
    ));
    decider.refund_locally(&applying[0]);
    assert_eq!(decider.decide(&applying, None).await.end, End::Allowed);
    assert!(redis.sent("RL.REFUND").is_empty(), "nothing of it in Redis");
}
