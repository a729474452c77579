//! Local quota on a request that several rules with it apply to: each busy rule short of
//! units takes a batch (a call of its own), so that the next requests are decided from
//! held units; a request denied by one rule leaves the units another took held.

use super::quota_tests::{quota_decider, quota_rule, take_reply, upto};
use super::*;

/// Two rules with local quota, their keys in one slot (one RL.MHIT without local quota).
fn two_rules() -> (Arc<Rule>, Arc<Rule>) {
    let limit = 1_000_000;
    (
        quota_rule("a", limit, "fixed"),
        quota_rule("b", limit, "fixed"),
    )
}

/// The calls sent since `before` that are not takes (refills go out in the background).
fn other_than_takes(redis: &Scripted, before: usize) -> Vec<Vec<String>> {
    let sent = redis.all_sent();
    sent[before..]
        .iter()
        .filter(|c| c[0] != "RL.TAKE")
        .cloned()
        .collect()
}

/// The remaining an allowed outcome shows.
fn shown(outcome: &RuleOutcome) -> i64 {
    match outcome {
        RuleOutcome::Allowed(verdict) => verdict.binding().remaining as i64,
        other => panic!("not allowed: {other:?}"),
    }
}

#[tokio::test]
async fn two_busy_rules_take_a_batch_each_and_their_next_requests_need_no_call() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.TAKE" => Step::Reply(take_reply(1_000_000, 900_000, 1_800_000, upto(words))),
        "RL.MHIT" => Step::Reply(multi(true, 0, vec![allowed(), allowed()])),
        _ => Step::Refused,
    });
    let decider = quota_decider(&redis, Duration::from_secs(60));
    let (a, b) = two_rules();
    let both = [applied(&a, "rl:{x}:a"), applied(&b, "rl:{x}:b")];
    // Quiet keys: one RL.MHIT each, as without local quota.
    for _ in 0..3 {
        assert_eq!(decider.decide(&both, None).await.end, End::Allowed);
    }
    assert_eq!(redis.sent("RL.MHIT").len(), 3);
    assert!(redis.sent("RL.TAKE").is_empty());
    // The fourth: both keys asked for 4 in the interval, each takes a batch of 4.
    let fourth = decider.decide(&both, None).await;
    assert_eq!(fourth.end, End::Allowed);
    assert_eq!(redis.sent("RL.MHIT").len(), 3, "no RL.MHIT");
    let takes = redis.sent("RL.TAKE");
    let keys: Vec<&str> = takes.iter().map(|t| t[1].as_str()).collect();
    assert_eq!(keys, ["rl:{x}:a", "rl:{x}:b"]);
    assert!(takes.iter().all(|t| upto(t) == 4), "{takes:?}");
    // Each shows Redis's remaining and the three it holds.
    assert_eq!(shown(&fourth.outcomes[0]), 900_003);
    assert_eq!(shown(&fourth.outcomes[1]), 900_003);
    // The next ones are decided from them: only refills go out.
    let before = redis.all_sent().len();
    let fifth = decider.decide(&both, None).await;
    assert_eq!(fifth.end, End::Allowed);
    assert_eq!(shown(&fifth.outcomes[0]), 900_002);
    assert_eq!(decider.decide(&both, None).await.end, End::Allowed);
    assert_eq!(other_than_takes(&redis, before), Vec::<Vec<String>>::new());
    assert_eq!(
        metric(&decider, "rl_gateway_local_quota_decisions_total"),
        2
    );
}

/// A Redis whose takes of `a` grant what they ask for, and whose takes of `b` are denied
/// (30 s to wait); quiet requests are allowed by RL.MHIT.
fn b_denies() -> Scripted {
    Scripted::new(|words| match (words[0].as_str(), words[1].as_str()) {
        ("RL.TAKE", "rl:{x}:a") => {
            Step::Reply(take_reply(1_000_000, 900_000, 1_800_000, upto(words)))
        }
        ("RL.TAKE", _) => Step::Reply(take_reply(1_000_000, 0, 30_000, 0)),
        ("RL.HIT", _) => Step::Reply(hit(true, 1_000_000, 900_000, 0)),
        ("RL.MHIT", _) => Step::Reply(multi(true, 0, vec![allowed(), allowed()])),
        ("RL.REFUND", _) => Step::Reply(hit(true, 1_000_000, 900_000, 0)),
        _ => Step::Refused,
    })
}

#[tokio::test]
async fn a_request_another_rule_denies_leaves_the_units_one_took_held() {
    let redis = b_denies();
    let decider = quota_decider(&redis, Duration::from_secs(60));
    let (a, b) = two_rules();
    let both = [applied(&a, "rl:{x}:a"), applied(&b, "rl:{x}:b")];
    for _ in 0..3 {
        decider.decide(&both, None).await;
    }
    // `a` takes 4, then `b`'s take is denied: the request is denied by `b`, exactly.
    let denied = decider.decide(&both, None).await;
    let (binding, cached) = (1, false);
    assert_eq!(denied.end, End::Denied { binding, cached });
    match &denied.outcomes[1] {
        RuleOutcome::Denied { verdict, .. } => {
            assert_eq!(verdict.binding().retry_after_ms, 30_000);
            assert_eq!(verdict.binding().remaining, 0);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(denied.outcomes[0], RuleOutcome::Uncounted(_)));
    // The request's unit of `a` went back into what `a` holds, not to Redis.
    assert!(redis.sent("RL.REFUND").is_empty());
    // `b`'s denial is in the deny cache; a request of `a` alone spends a held unit.
    let before = redis.all_sent().len();
    let (binding, cached) = (1, true);
    assert_eq!(
        decider.decide(&both, None).await.end,
        End::Denied { binding, cached }
    );
    let alone = decider.decide(&[applied(&a, "rl:{x}:a")], None).await;
    assert_eq!(alone.end, End::Allowed);
    assert_eq!(shown(&alone.outcomes[0]), 900_003);
    assert_eq!(redis.all_sent().len(), before, "no call");
    // What is left goes back whole on a reload: 4 taken, 1 spent.
    decider.forget_denials();
    eventually("the units back", || !redis.sent("RL.REFUND").is_empty()).await;
    let refunds = redis.sent("RL.REFUND");
    assert_eq!(refunds.len(), 1);
    assert_eq!(&refunds[0][..2], ["RL.REFUND", "rl:{x}:a"]);
    assert_eq!(&refunds[0][refunds[0].len() - 2..], ["COST", "3"]);
}

#[tokio::test]
async fn a_take_never_sent_for_a_denied_request_lets_its_key_take_later() {
    let redis = b_denies();
    let decider = quota_decider(&redis, Duration::from_secs(60));
    let (a, b) = two_rules();
    // `b` first: its take is denied, and `a`'s planned take is never sent.
    let both = [applied(&b, "rl:{x}:b"), applied(&a, "rl:{x}:a")];
    for _ in 0..3 {
        decider.decide(&both, None).await;
    }
    let (binding, cached) = (0, false);
    let denied = decider.decide(&both, None).await;
    assert_eq!(denied.end, End::Denied { binding, cached });
    assert!(matches!(denied.outcomes[1], RuleOutcome::NotAsked));
    let takes = redis.sent("RL.TAKE");
    assert_eq!(takes.len(), 1);
    assert_eq!(takes[0][1], "rl:{x}:b");
    // `a` alone, still busy, takes its batch: no take is left marked on its way.
    let alone = decider.decide(&[applied(&a, "rl:{x}:a")], None).await;
    assert_eq!(alone.end, End::Allowed);
    let takes = redis.sent("RL.TAKE");
    assert_eq!(takes.len(), 2, "{takes:?}");
    assert_eq!(takes[1][1], "rl:{x}:a");
}

#[tokio::test]
async fn a_take_granting_fewer_than_asked_holds_what_it_granted() {
    // `a`'s takes grant at most 2 of what they ask for.
    let redis = Scripted::new(|words| match (words[0].as_str(), words[1].as_str()) {
        ("RL.TAKE", "rl:{x}:a") => {
            Step::Reply(take_reply(1_000_000, 2, 1_800_000, upto(words).min(2)))
        }
        ("RL.TAKE", _) => Step::Reply(take_reply(1_000_000, 2, 1_800_000, upto(words))),
        ("RL.MHIT", _) => Step::Reply(multi(true, 0, vec![allowed(), allowed()])),
        _ => Step::Refused,
    });
    let decider = quota_decider(&redis, Duration::from_secs(60));
    let (a, b) = two_rules();
    let both = [applied(&a, "rl:{x}:a"), applied(&b, "rl:{x}:b")];
    for _ in 0..3 {
        decider.decide(&both, None).await;
    }
    let fourth = decider.decide(&both, None).await;
    assert_eq!(fourth.end, End::Allowed);
    assert_eq!(shown(&fourth.outcomes[0]), 3, "2 left in Redis and 1 held");
    assert_eq!(shown(&fourth.outcomes[1]), 5, "2 left in Redis and 3 held");
    // The fifth spends the one `a` holds, without a call but its refills.
    let before = redis.all_sent().len();
    let fifth = decider.decide(&both, None).await;
    assert_eq!(fifth.end, End::Allowed);
    assert_eq!(shown(&fifth.outcomes[0]), 2);
    assert_eq!(other_than_takes(&redis, before), Vec::<Vec<String>>::new());
}
