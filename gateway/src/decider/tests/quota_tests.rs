//! Local quota through the decider: batches taken with `RL.TAKE`, requests decided from
//! the units held without a call, refills, denials and short grants answered exactly, and
//! the units that go back (`RL.REFUND ... COST n`).

use super::*;
use crate::decider::quota::QuotaSettings;

/// RL.TAKE's RESP2 reply: RL.HIT's five fields and the units granted.
pub(super) fn take_reply(limit: i64, remaining: i64, reset_after_ms: i64, granted: i64) -> Value {
    let allowed = i64::from(granted > 0);
    let retry = if granted > 0 { 0 } else { reset_after_ms };
    let fields = [allowed, limit, remaining, reset_after_ms, retry, granted];
    Value::Array(fields.into_iter().map(Value::Int).collect())
}

/// The `UPTO` of a sent RL.TAKE.
pub(super) fn upto(words: &[String]) -> i64 {
    let at = words.iter().position(|w| w == "UPTO").expect("UPTO");
    words[at + 1].parse().expect("a count")
}

/// A Redis whose takes grant what they ask for out of a limit of 1,000,000 an hour.
fn granting() -> Scripted {
    Scripted::new(|words| match words[0].as_str() {
        "RL.TAKE" => Step::Reply(take_reply(1_000_000, 900_000, 1_800_000, upto(words))),
        "RL.HIT" => Step::Reply(hit(true, 1_000_000, 900_000, 0)),
        "RL.REFUND" => Step::Reply(hit(true, 1_000_000, 900_000, 0)),
        _ => Step::Refused,
    })
}

/// A decider whose intervals are long enough that a test's requests are all in one.
pub(super) fn quota_decider(redis: &Scripted, hold: Duration) -> Decider<Scripted> {
    Decider::new(redis.clone(), &settings(5), 100).with_quota_settings(QuotaSettings {
        interval: Duration::from_secs(1),
        hold,
        max_batch_percent: 1,
    })
}

pub(super) fn quota_rule(name: &str, limit: u64, algorithm: &str) -> Arc<Rule> {
    let rule = test_rule(
        name,
        limit,
        3_600_000,
        Some(algorithm),
        1,
        RedisFailure::Open,
    );
    Arc::new(rule.with_local_quota(true))
}

#[tokio::test]
async fn a_busy_key_is_decided_from_a_batch_without_redis() {
    let redis = granting();
    let decider = quota_decider(&redis, Duration::from_secs(60));
    let rule = quota_rule("api", 1_000_000, "fixed");
    let applying = [applied(&rule, "rl:{a}:api")];
    for _ in 0..3 {
        let stacked = decider.decide(&applying, None).await;
        assert_eq!(stacked.end, End::Allowed);
    }
    assert_eq!(
        redis.sent("RL.HIT").len(),
        3,
        "a key seen thrice takes its own units"
    );
    // The fourth request takes what the key asked for in the interval: 4.
    let fourth = decider.decide(&applying, None).await;
    assert_eq!(fourth.end, End::Allowed);
    let takes = redis.sent("RL.TAKE");
    assert_eq!(takes.len(), 1);
    assert_eq!(
        &takes[0][..4],
        ["RL.TAKE", "rl:{a}:api", "1000000", "3600000ms"]
    );
    assert_eq!(upto(&takes[0]), 4);
    // Three held: Redis's remaining and those show in the headers.
    match &fourth.outcomes[0] {
        RuleOutcome::Allowed(verdict) => assert_eq!(verdict.binding().remaining, 900_003),
        other => panic!("{other:?}"),
    }
    // The fifth spends one of them: half of the grant of 4 is gone, so a refill of what
    // the key asked for in the interval (5) goes out in the background, and nothing else.
    let before = redis.all_sent().len();
    let fifth = decider.decide(&applying, None).await;
    assert_eq!(fifth.end, End::Allowed);
    match &fifth.outcomes[0] {
        RuleOutcome::Allowed(verdict) => assert_eq!(verdict.binding().remaining, 900_002),
        other => panic!("{other:?}"),
    }
    eventually("the refill", || redis.sent("RL.TAKE").len() == 2).await;
    let calls = redis.all_sent()[before..].to_vec();
    assert_eq!(calls.len(), 1, "the refill alone: {calls:?}");
    assert_eq!(upto(&calls[0]), 5);
    assert_eq!(
        metric(&decider, "rl_gateway_local_quota_decisions_total"),
        1
    );
    eventually("the refill counted", || {
        metric(&decider, "rl_gateway_local_quota_units_taken_total") == 9
    })
    .await;
    // 2 + 5 held now: seven more requests, and only refills go out.
    let before = redis.all_sent().len();
    for _ in 0..7 {
        assert_eq!(decider.decide(&applying, None).await.end, End::Allowed);
    }
    let calls: Vec<_> = redis.all_sent()[before..].to_vec();
    assert!(
        calls.iter().all(|c| c[0] == "RL.TAKE"),
        "only refills go out: {calls:?}"
    );
    assert_eq!(
        metric(&decider, "rl_gateway_local_quota_decisions_total"),
        8
    );
}

#[tokio::test]
async fn a_take_that_grants_nothing_is_an_exact_denial() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.TAKE" => Step::Reply(take_reply(1_000, 0, 30_000, 0)),
        "RL.HIT" => Step::Reply(hit(true, 1_000, 3, 0)),
        _ => Step::Refused,
    });
    let decider = quota_decider(&redis, Duration::from_secs(60));
    let rule = quota_rule("api", 1_000, "fixed");
    let applying = [applied(&rule, "rl:{a}:api")];
    for _ in 0..3 {
        decider.decide(&applying, None).await;
    }
    // 1 % of 1,000 is 10 and the key asked for 4: a take of 4, none granted.
    let denied = decider.decide(&applying, None).await;
    assert_eq!(
        denied.end,
        End::Denied {
            binding: 0,
            cached: false
        }
    );
    match &denied.outcomes[0] {
        RuleOutcome::Denied { verdict, .. } => {
            assert_eq!(verdict.binding().retry_after_ms, 30_000);
            assert_eq!(verdict.binding().remaining, 0);
        }
        other => panic!("{other:?}"),
    }
    // Remembered like any denial: the next request is answered from the deny cache.
    let next = decider.decide(&applying, None).await;
    assert_eq!(
        next.end,
        End::Denied {
            binding: 0,
            cached: true
        }
    );
    assert_eq!(redis.sent("RL.TAKE").len(), 1);
}

#[tokio::test]
async fn a_grant_short_of_the_cost_goes_back_and_the_request_is_charged_as_a_hit() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.TAKE" => Step::Reply(take_reply(1_000, 0, 30_000, 2)),
        // Three units do not fit; one did.
        "RL.HIT" if words.contains(&"COST".to_string()) => {
            Step::Reply(hit(false, 1_000, 2, 30_000))
        }
        "RL.HIT" => Step::Reply(hit(true, 1_000, 5, 0)),
        "RL.REFUND" => Step::Reply(hit(true, 1_000, 2, 0)),
        _ => Step::Refused,
    });
    let decider = quota_decider(&redis, Duration::from_secs(60));
    let rule = quota_rule("api", 1_000, "fixed");
    let costly = |n| Applied {
        rule: rule.clone(),
        key: "rl:{a}:api".into(),
        cost: Some(n),
    };
    // Four units asked for in the interval (1 + 3): the fourth asks for a batch of 4 and is
    // granted 2 of its 3.
    decider.decide(&[costly(1)], None).await;
    let stacked = decider.decide(&[costly(3)], None).await;
    assert_eq!(upto(&redis.sent("RL.TAKE")[0]), 4);
    assert_eq!(
        stacked.end,
        End::Denied {
            binding: 0,
            cached: false
        }
    );
    let hits = redis.sent("RL.HIT");
    assert_eq!(
        hits.last().map(|h| h[h.len() - 2..].to_vec()),
        Some(vec!["COST".into(), "3".into()])
    );
    eventually("the two units back", || !redis.sent("RL.REFUND").is_empty()).await;
    let refund = &redis.sent("RL.REFUND")[0];
    assert_eq!(&refund[refund.len() - 2..], ["COST", "2"]);
}

#[tokio::test]
async fn unused_units_go_back_after_the_hold_and_on_a_reload() {
    let redis = granting();
    let decider = quota_decider(&redis, Duration::from_secs(1));
    let rule = quota_rule("api", 1_000_000, "gcra");
    let applying = [applied(&rule, "rl:{a}:api")];
    for _ in 0..4 {
        decider.decide(&applying, None).await;
    }
    // A take of 4: three held, none spent; given back at the hold (less a quarter).
    assert!(redis.sent("RL.REFUND").is_empty());
    eventually_long("the three units back", || {
        !redis.sent("RL.REFUND").is_empty()
    })
    .await;
    let refund = &redis.sent("RL.REFUND")[0];
    assert_eq!(&refund[..2], ["RL.REFUND", "rl:{a}:api"]);
    assert_eq!(&refund[refund.len() - 2..], ["COST", "3"]);
    eventually("counted", || {
        metric(&decider, "rl_gateway_local_quota_units_given_back_total") == 3
    })
    .await;
    // Held again, then the rules change: everything goes back at once.
    let long = quota_decider(&redis, Duration::from_secs(60));
    for _ in 0..4 {
        long.decide(&applying, None).await;
    }
    let before = redis.sent("RL.REFUND").len();
    long.forget_denials();
    eventually("given back on the reload", || {
        redis.sent("RL.REFUND").len() == before + 1
    })
    .await;
}

#[tokio::test]
async fn a_take_redis_runs_after_the_deadline_is_given_back_whole() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.TAKE" => Step::Later(
            Duration::from_millis(200),
            take_reply(1_000_000, 9, 1_800_000, upto(words)),
        ),
        "RL.HIT" => Step::Reply(hit(true, 1_000_000, 900_000, 0)),
        "RL.REFUND" => Step::Reply(hit(true, 1_000_000, 900_000, 0)),
        _ => Step::Refused,
    });
    let decider = quota_decider(&redis, Duration::from_secs(60));
    let rule = quota_rule("api", 1_000_000, "fixed");
    let mut local = Rule::clone(&rule);
    local.on_failure.redis = RedisFailure::Local;
    let rule = Arc::new(local);
    let applying = [applied(&rule, "rl:{a}:api")];
    for _ in 0..3 {
        decider.decide(&applying, None).await;
    }
    // The take of 4 misses the 20 ms deadline: the local limit decides the request, and the
    // take, when it lands, is given back whole (its 4 units, not the request's 1).
    let stacked = decider.decide(&applying, None).await;
    assert!(matches!(stacked.outcomes[0], RuleOutcome::Local { .. }));
    eventually_long("the late take given back", || {
        !redis.sent("RL.REFUND").is_empty()
    })
    .await;
    let refund = &redis.sent("RL.REFUND")[0];
    assert_eq!(&refund[refund.len() - 2..], ["COST", "4"]);
    // The key may take again.
    let next = decider.decide(&applying, None).await;
    assert!(!matches!(next.end, End::Closed { .. }));
    assert_eq!(redis.sent("RL.TAKE").len(), 2);
}

#[tokio::test]
async fn several_rules_are_decided_here_only_when_each_holds_units() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.TAKE" => Step::Reply(take_reply(1_000_000, 900_000, 1_800_000, upto(words))),
        "RL.HIT" => Step::Reply(hit(true, 1_000_000, 900_000, 0)),
        "RL.MHIT" => Step::Reply(multi(true, 0, vec![allowed(), allowed()])),
        _ => Step::Refused,
    });
    let decider = quota_decider(&redis, Duration::from_secs(60));
    let (a, b) = (
        quota_rule("a", 1_000_000, "fixed"),
        quota_rule("b", 1_000_000, "fixed"),
    );
    let both = [applied(&a, "rl:{x}:a"), applied(&b, "rl:{x}:b")];
    // Neither holds units: one RL.MHIT, as without local quota.
    let stacked = decider.decide(&both, None).await;
    assert_eq!(stacked.end, End::Allowed);
    assert_eq!(redis.sent("RL.MHIT").len(), 1);
    // Each alone gets busy and holds units (its third request alone takes a batch of 4)...
    for (rule, key) in [(&a, "rl:{x}:a"), (&b, "rl:{x}:b")] {
        for _ in 0..3 {
            decider.decide(&[applied(rule, key)], None).await;
        }
    }
    assert_eq!(redis.sent("RL.TAKE").len(), 2);
    // ...and the request both apply to is decided here (only refills may go out).
    let (hits, multis) = (redis.sent("RL.HIT").len(), redis.sent("RL.MHIT").len());
    let stacked = decider.decide(&both, None).await;
    assert_eq!(stacked.end, End::Allowed);
    assert!(stacked
        .outcomes
        .iter()
        .all(|o| matches!(o, RuleOutcome::Allowed(_))));
    assert_eq!(redis.sent("RL.HIT").len(), hits);
    assert_eq!(redis.sent("RL.MHIT").len(), multis);
    // A rule without local quota beside them: Redis decides the whole request.
    let plain = rule("plain", 5, RedisFailure::Open);
    let mixed = [applied(&a, "rl:{x}:a"), applied(&plain, "rl:{x}:plain")];
    decider.decide(&mixed, None).await;
    assert_eq!(redis.sent("RL.MHIT").len(), 2);
}

/// [`eventually`], for what happens after a hold of a second.
async fn eventually_long(what: &str, done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {what}");
}
