//! Stacked rules: one call per slot, in rule order, and what was counted given back when a
//! later rule denies or closes.

use super::*;

/// What each applying rule came to, by name: "allowed", "uncounted", "denied", ...
fn kinds(stacked: &Stacked) -> Vec<&'static str> {
    stacked
        .outcomes
        .iter()
        .map(|o| match o {
            RuleOutcome::Unlimited => "unlimited",
            RuleOutcome::NotAsked => "not asked",
            RuleOutcome::Allowed(_) => "allowed",
            RuleOutcome::Uncounted(_) => "uncounted",
            RuleOutcome::Denied { .. } => "denied",
            RuleOutcome::ShadowDenied => "shadow denied",
            RuleOutcome::Local { .. } => "local",
            RuleOutcome::Failed(_) => "failed",
        })
        .collect()
}

fn three_slots() -> [Applied; 3] {
    let rules = [
        rule("a", 5, RedisFailure::Open),
        rule("b", 5, RedisFailure::Open),
        rule("c", 5, RedisFailure::Open),
    ];
    [
        applied(&rules[0], "rl:{1}:a"),
        applied(&rules[1], "rl:{2}:b"),
        applied(&rules[2], "rl:{3}:c"),
    ]
}

#[tokio::test]
async fn a_denial_in_the_third_slot_gives_back_the_two_allowed_before_it() {
    let redis = Scripted::new(|words| match (words[0].as_str(), words[1].as_str()) {
        ("RL.HIT", "rl:{3}:c") => Step::Reply(hit(false, 5, 0, 700)),
        ("RL.HIT", _) => Step::Reply(hit(true, 5, 3, 0)),
        ("RL.REFUND", _) => Step::Reply(hit(true, 5, 4, 0)),
        _ => Step::Refused,
    })
    .cluster();
    let decider = decider(&redis);
    let applying = three_slots();
    let stacked = decider.decide(&applying, None).await;
    assert_eq!(
        stacked.end,
        End::Denied {
            binding: 2,
            cached: false
        }
    );
    assert_eq!(kinds(&stacked), ["uncounted", "uncounted", "denied"]);
    // Each given-back rule shows what it holds after the refund, not after the hit.
    for outcome in &stacked.outcomes[..2] {
        let RuleOutcome::Uncounted(verdict) = outcome else {
            unreachable!()
        };
        assert_eq!(verdict.binding().remaining, 4);
    }
    let hits: Vec<String> = redis.sent("RL.HIT").iter().map(|c| c[1].clone()).collect();
    assert_eq!(hits, ["rl:{1}:a", "rl:{2}:b", "rl:{3}:c"], "in rule order");
    let refunds: Vec<String> = redis
        .sent("RL.REFUND")
        .iter()
        .map(|c| c[1].clone())
        .collect();
    assert_eq!(refunds, ["rl:{1}:a", "rl:{2}:b"]);
    assert_eq!(metric(&decider, "rl_gateway_refunds_total{rule=\"a\"}"), 1);
    assert_eq!(metric(&decider, "rl_gateway_refunds_total{rule=\"b\"}"), 1);
    assert_eq!(metric(&decider, "rl_gateway_refunds_total{rule=\"c\"}"), 0);
}

#[tokio::test]
async fn a_denial_in_the_first_slot_asks_no_later_slot() {
    let redis = Scripted::new(|_| Step::Reply(denied())).cluster();
    let decider = decider(&redis);
    let stacked = decider.decide(&three_slots(), None).await;
    assert_eq!(kinds(&stacked), ["denied", "not asked", "not asked"]);
    assert_eq!(redis.all_sent().len(), 1, "one hit, nothing to give back");
}

#[tokio::test]
async fn a_group_charged_together_is_given_back_together() {
    // On a cluster, {1} holds two rules (one RL.MHIT), {2} the third, which denies.
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.MHIT" => Step::Reply(multi(true, 0, vec![allowed(), allowed()])),
        "RL.HIT" => Step::Reply(denied()),
        "RL.MREFUND" => Step::Reply(multi(true, 0, vec![allowed(), allowed()])),
        _ => Step::Refused,
    })
    .cluster();
    let decider = decider(&redis);
    let rules = [
        rule("a", 5, RedisFailure::Open),
        rule("b", 5, RedisFailure::Open),
        rule("c", 5, RedisFailure::Open),
    ];
    let applying = [
        applied(&rules[0], "rl:{1}:a"),
        applied(&rules[1], "rl:{1}:b"),
        applied(&rules[2], "rl:{2}:c"),
    ];
    let stacked = decider.decide(&applying, None).await;
    assert_eq!(kinds(&stacked), ["uncounted", "uncounted", "denied"]);
    let mhit = redis.sent("RL.MHIT");
    assert_eq!(mhit.len(), 1);
    assert_eq!(mhit[0][1..4], ["2", "rl:{1}:a", "rl:{1}:b"]);
    let refunds = redis.sent("RL.MREFUND");
    assert_eq!(refunds.len(), 1, "one RL.MREFUND for the group");
    assert_eq!(refunds[0][1..4], ["2", "rl:{1}:a", "rl:{1}:b"]);
    assert!(redis.sent("RL.REFUND").is_empty());
}

#[tokio::test]
async fn a_key_denied_in_a_multi_key_call_counts_none_of_the_others() {
    let redis = Scripted::new(|_| Step::Reply(multi(false, 1, vec![allowed(), denied()])));
    let decider = decider(&redis);
    let (a, b) = (
        rule("a", 5, RedisFailure::Open),
        rule("b", 5, RedisFailure::Open),
    );
    let applying = [applied(&a, "rl:{x}:a"), applied(&b, "rl:{x}:b")];
    let stacked = decider.decide(&applying, None).await;
    assert_eq!(
        stacked.end,
        End::Denied {
            binding: 1,
            cached: false
        }
    );
    assert_eq!(kinds(&stacked), ["uncounted", "denied"]);
    assert_eq!(
        redis.all_sent().len(),
        1,
        "nothing counted: nothing given back"
    );
}

#[tokio::test]
async fn a_fail_closed_rule_in_a_later_slot_gives_back_the_earlier_and_closes() {
    let redis = Scripted::new(|words| match (words[0].as_str(), words[1].as_str()) {
        ("RL.HIT", "rl:{1}:a") => Step::Reply(allowed()),
        ("RL.HIT", _) => Step::Refused,
        ("RL.REFUND", _) => Step::Reply(hit(true, 5, 5, 0)),
        _ => Step::Refused,
    })
    .cluster();
    let decider = Decider::new(redis.clone(), &settings(1000), 100);
    let (a, b) = (
        rule("a", 5, RedisFailure::Open),
        rule("b", 5, RedisFailure::Closed),
    );
    let applying = [applied(&a, "rl:{1}:a"), applied(&b, "rl:{2}:b")];
    let stacked = decider.decide(&applying, None).await;
    assert_eq!(
        stacked.end,
        End::Closed {
            rule: 1,
            failure: Failure::Connection
        }
    );
    assert_eq!(kinds(&stacked), ["uncounted", "failed"]);
    assert_eq!(redis.sent("RL.REFUND").len(), 1);
    assert_eq!(redis.sent("RL.REFUND")[0][1], "rl:{1}:a");
}

#[tokio::test]
async fn a_shadow_rule_is_charged_alone_and_never_denies() {
    let redis = Scripted::new(|words| match words[1].as_str() {
        "rl:{x}:shadow" => Step::Reply(denied()),
        _ => Step::Reply(allowed()),
    });
    let decider = decider(&redis);
    let mut shadow = Rule::clone(&rule("shadow", 5, RedisFailure::Open));
    shadow.shadow = true;
    let shadow = Arc::new(shadow);
    let enforced = rule("enforced", 5, RedisFailure::Open);
    let applying = [
        applied(&enforced, "rl:{x}:enforced"),
        applied(&shadow, "rl:{x}:shadow"),
    ];
    let stacked = decider.decide(&applying, None).await;
    assert_eq!(stacked.end, End::Allowed);
    assert_eq!(kinds(&stacked), ["allowed", "shadow denied"]);
    assert_eq!(
        redis.sent("RL.HIT").len(),
        2,
        "one server, one slot, yet two calls: the shadow rule's denial is its own"
    );
    assert!(redis.sent("RL.MHIT").is_empty());
    // A shadow denial is not remembered: the next request asks again.
    decider.decide(&applying, None).await;
    assert_eq!(redis.sent("RL.HIT").len(), 4);
}

#[tokio::test]
async fn an_error_of_a_multi_key_call_asks_each_rule_alone_and_each_fails_as_it_says() {
    // RL.MHIT answers an error (one rule names a missing policy): each rule alone then.
    let redis = Scripted::new(|words| match (words[0].as_str(), words[1].as_str()) {
        ("RL.MHIT", _) => Step::Error("ERR policy 'gone' does not exist"),
        ("RL.HIT", "rl:{x}:broken") => Step::Error("ERR policy 'gone' does not exist"),
        ("RL.HIT", _) => Step::Reply(allowed()),
        _ => Step::Refused,
    });
    let decider = decider(&redis);
    let good = rule("good", 5, RedisFailure::Open);
    let broken = with_error_closed(&rule("broken", 5, RedisFailure::Open), false);
    let applying = [
        applied(&good, "rl:{x}:good"),
        applied(&broken, "rl:{x}:broken"),
    ];
    let stacked = decider.decide(&applying, None).await;
    assert_eq!(stacked.end, End::Allowed, "the broken rule fails open");
    assert_eq!(kinds(&stacked), ["allowed", "failed"]);
    let hits: Vec<String> = redis.sent("RL.HIT").iter().map(|c| c[1].clone()).collect();
    assert_eq!(
        hits,
        ["rl:{x}:good", "rl:{x}:broken"],
        "each alone, in order"
    );
    assert_eq!(
        metric(&decider, "rl_gateway_module_errors_total{rule=\"broken\"}"),
        1
    );
    assert_eq!(
        metric(&decider, "rl_gateway_module_errors_total{rule=\"good\"}"),
        0
    );
}

#[tokio::test]
async fn unlimited_rules_ask_nothing() {
    let redis = Scripted::new(|_| Step::Refused);
    let decider = decider(&redis);
    let mut free = Rule::clone(&rule("free", 5, RedisFailure::Closed));
    free.limit = crate::rules::Limit::Unlimited;
    let free = Arc::new(free);
    let stacked = decider.decide(&[applied(&free, "rl:{x}:free")], None).await;
    assert_eq!(stacked.end, End::Unlimited);
    assert_eq!(kinds(&stacked), ["unlimited"]);
    assert!(redis.all_sent().is_empty());
}
