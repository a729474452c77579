//! The store of local quota, with the time passed in: batch sizes, spending, refills, how
//! long units count, and what goes back.

use super::*;
use crate::rules::{test_rule, RedisFailure};
use crate::verdict::TierState;

const MS: Duration = Duration::from_millis(1);

/// A rule of 100,000 an hour under `algorithm`, named `name`.
fn rule_named(name: &str, algorithm: Option<&str>) -> Arc<Rule> {
    let rule = test_rule(name, 100_000, 3_600_000, algorithm, 1, RedisFailure::Open);
    Arc::new(rule.with_local_quota(true))
}

fn rule(limit: u64, window_ms: u64, algorithm: Option<&str>) -> Arc<Rule> {
    let rule = test_rule("q", limit, window_ms, algorithm, 1, RedisFailure::Open);
    Arc::new(rule.with_local_quota(true))
}

/// A take's verdict: allowed, `remaining` left in Redis, the window's `reset_after_ms`.
fn granted_verdict(limit: u64, remaining: u64, reset_after_ms: u64) -> Verdict {
    Verdict::single(TierState {
        allowed: true,
        limit,
        remaining,
        reset_after_ms,
        retry_after_ms: 0,
    })
}

fn quotas() -> Quotas {
    Quotas::new(QuotaSettings::default())
}

/// Plans `n` requests of one unit on `key`, 1 ms apart from `t0`: the first take
/// planned (the key's requests after it take their own units while it is out), else the
/// last plan.
fn requests(q: &Quotas, rule: &Arc<Rule>, key: &str, n: u32, t0: Instant) -> Plan {
    let mut first_take = None;
    let mut last = Plan::Hit;
    for i in 0..n {
        last = q.plan(rule, key, 1, t0 + i * MS);
        if matches!(last, Plan::Take(_)) && first_take.is_none() {
            first_take = Some(last.clone());
        }
    }
    first_take.unwrap_or(last)
}

#[test]
fn a_cold_key_takes_only_its_own_units() {
    let q = quotas();
    let rule = rule(100_000, 60_000, Some("fixed"));
    let t0 = Instant::now();
    assert_eq!(q.plan(&rule, "k", 1, t0), Plan::Hit);
    // Three requests in an interval: still under the batch's floor.
    assert_eq!(requests(&q, &rule, "k2", 3, t0), Plan::Hit);
    // A key asking again only after two quiet intervals starts over.
    assert_eq!(q.plan(&rule, "k", 1, t0 + 100 * MS), Plan::Hit);
}

#[test]
fn a_busy_key_takes_what_it_asked_for_in_the_last_interval() {
    let q = quotas();
    let rule = rule(100_000, 60_000, Some("fixed"));
    let t0 = Instant::now();
    assert_eq!(requests(&q, &rule, "k", 4, t0), Plan::Take(4));
    // While that take is on its way, the key's other requests take their own units.
    assert_eq!(q.plan(&rule, "k", 1, t0 + 4 * MS), Plan::Hit);
}

#[test]
fn a_batch_is_at_most_the_share_of_the_smallest_limit() {
    let t0 = Instant::now();
    // While a take of 4 is out the key asks for 11 more; it comes to nothing, and the next
    // request finds 16 asked for in the interval.
    let busy = |q: &Quotas, rule: &Arc<Rule>, key: &str| {
        assert_eq!(requests(q, rule, key, 4, t0), Plan::Take(4));
        assert_eq!(requests(q, rule, key, 11, t0 + 4 * MS), Plan::Hit);
        q.take_ended(key);
        q.plan(rule, key, 1, t0 + 15 * MS)
    };
    // 1 % of 1000 is 10.
    let small = rule(1_000, 60_000, Some("fixed"));
    assert_eq!(busy(&quotas(), &small, "a"), Plan::Take(10));
    // 1 % of 300 is 3, under the floor: the rule never batches.
    let tiny = rule(300, 60_000, Some("fixed"));
    assert_eq!(requests(&quotas(), &tiny, "b", 15, t0), Plan::Hit);
    let wide = Quotas::new(QuotaSettings {
        max_batch_percent: 50,
        ..QuotaSettings::default()
    });
    assert_eq!(busy(&wide, &tiny, "b"), Plan::Take(16));
}

#[test]
fn units_held_are_spent_here_and_refilled_at_half() {
    let q = quotas();
    let rule = rule(100_000, 3_600_000, Some("fixed"));
    let t0 = Instant::now();
    assert_eq!(requests(&q, &rule, "k", 4, t0), Plan::Take(4));
    // Say the take granted 10: one for its request, 9 held.
    q.granted(
        &rule,
        "k",
        10,
        9,
        granted_verdict(100_000, 50_000, 1_800_000),
        t0,
    );
    let t = t0 + 10 * MS;
    let mut refills = Vec::new();
    for i in 0..9 {
        match q.plan(&rule, "k", 1, t + i * MS / 10) {
            Plan::Spent(verdict, refill) => {
                // Redis's remaining and what is held here after this request.
                assert_eq!(verdict.binding().remaining, 50_000 + 8 - u64::from(i));
                refills.extend(refill.map(|units| (i, units)));
            }
            other => panic!("request {i}: {other:?}"),
        }
    }
    // Half of the 10 spent at the fourth request from what was held (5 left): one
    // refill, of the key's rate over the last interval, and no other while it is out.
    assert_eq!(refills.len(), 1, "{refills:?}");
    assert_eq!(refills[0].0, 3);
    // The 4 requests before the take and the 4 since, all in this interval.
    assert_eq!(refills[0].1, 8, "{refills:?}");
    assert_eq!(
        q.plan(&rule, "k", 1, t + MS),
        Plan::Hit,
        "nothing held, a take out"
    );
}

#[test]
fn a_fixed_window_s_units_stop_counting_before_its_end() {
    let q = quotas();
    let rule = rule(100_000, 1_000, Some("fixed"));
    let t0 = Instant::now();
    requests(&q, &rule, "k", 4, t0);
    // The window ends 60 ms after the take was sent: the units are spent until an interval
    // (20 ms) before, then given back.
    q.granted(&rule, "k", 4, 3, granted_verdict(100_000, 10, 60), t0);
    assert!(matches!(
        q.plan(&rule, "k", 1, t0 + 39 * MS),
        Plan::Spent(..)
    ));
    assert!(q.due(t0 + 39 * MS).is_empty());
    // The window's last interval: a busy key's requests take their own units, since a
    // batch could neither be spent nor safely given back before the end.
    assert_eq!(q.plan(&rule, "k", 1, t0 + 40 * MS), Plan::Hit);
    let due = q.due(t0 + 40 * MS);
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].key.as_str(), due[0].units), ("k", 2));
    assert!(q.due(t0 + 45 * MS).is_empty(), "given back once");
    assert_eq!(q.plan(&rule, "k", 1, t0 + 59 * MS), Plan::Hit);
    // The next window: batches again.
    assert!(matches!(
        requests(&q, &rule, "k", 4, t0 + 61 * MS),
        Plan::Take(_)
    ));
}

#[test]
fn a_window_s_units_found_too_late_to_go_back_safely_end_with_it() {
    let q = quotas();
    let rule = rule(100_000, 1_000, Some("fixed"));
    let t0 = Instant::now();
    requests(&q, &rule, "k", 4, t0);
    q.granted(&rule, "k", 4, 3, granted_verdict(100_000, 10, 60), t0);
    // Looked at less than half an interval before the end (the machine stalled): a refund
    // now could run in the next window, which never counted these units.
    assert!(q.due(t0 + 51 * MS).is_empty());
    assert!(q.due(t0 + 70 * MS).is_empty(), "dropped, not kept");
    // A bucket's units go back however late.
    let bucket = rule_named("b", Some("gcra"));
    requests(&q, &bucket, "b", 4, t0);
    q.granted(&bucket, "b", 4, 3, granted_verdict(100_000, 10, 60), t0);
    assert_eq!(q.due(t0 + 500 * MS).iter().map(|g| g.units).sum::<u64>(), 3);
}

#[test]
fn a_sliding_window_s_units_count_until_its_current_window_ends() {
    let q = quotas();
    let rule = rule(100_000, 1_000, Some("sliding"));
    let t0 = Instant::now();
    requests(&q, &rule, "k", 4, t0);
    // A sliding window's reset is its end plus one window: 1060 ms is an end in 60 ms.
    q.granted(&rule, "k", 4, 3, granted_verdict(100_000, 10, 1_060), t0);
    assert!(matches!(
        q.plan(&rule, "k", 1, t0 + 39 * MS),
        Plan::Spent(..)
    ));
    assert_eq!(q.plan(&rule, "k", 1, t0 + 40 * MS), Plan::Hit);
}

#[test]
fn a_bucket_s_units_count_for_the_hold_only() {
    let q = quotas();
    let rule = rule(100_000, 60_000, Some("gcra"));
    let t0 = Instant::now();
    requests(&q, &rule, "k", 4, t0);
    // A bucket's reset (when it is full again) says nothing of how long units count.
    q.granted(&rule, "k", 4, 3, granted_verdict(100_000, 10, 5), t0);
    assert!(matches!(
        q.plan(&rule, "k", 1, t0 + 50 * MS),
        Plan::Spent(..)
    ));
    // The hold is 100 ms: given back one interval before it.
    assert_eq!(q.plan(&rule, "k", 1, t0 + 80 * MS), Plan::Hit);
    let due = q.due(t0 + 80 * MS);
    assert_eq!(due.iter().map(|g| g.units).sum::<u64>(), 2);
}

#[test]
fn a_quiet_key_gives_its_units_back_after_the_hold() {
    let q = quotas();
    let rule = rule(100_000, 3_600_000, Some("fixed"));
    let t0 = Instant::now();
    requests(&q, &rule, "k", 4, t0);
    q.granted(
        &rule,
        "k",
        4,
        3,
        granted_verdict(100_000, 10, 1_800_000),
        t0,
    );
    assert!(q.due(t0 + 50 * MS).is_empty());
    let due = q.due(t0 + 100 * MS);
    assert_eq!(due.iter().map(|g| g.units).sum::<u64>(), 3);
}

#[test]
fn a_reload_and_a_changed_rule_give_everything_back() {
    let q = quotas();
    let old = rule(100_000, 3_600_000, Some("fixed"));
    let t0 = Instant::now();
    requests(&q, &old, "k", 4, t0);
    q.granted(&old, "k", 4, 3, granted_verdict(100_000, 10, 1_800_000), t0);
    requests(&q, &old, "j", 4, t0);
    q.granted(&old, "j", 4, 3, granted_verdict(100_000, 10, 1_800_000), t0);
    // The key meets another rule (the same words, another load): the old units go back.
    let new = rule(100_000, 3_600_000, Some("fixed"));
    assert_eq!(q.plan(&new, "k", 1, t0 + MS), Plan::Hit);
    let due = q.due(t0 + MS);
    assert_eq!(due.len(), 1);
    assert!(Arc::ptr_eq(&due[0].rule, &old) && due[0].key == "k" && due[0].units == 3);
    q.release_all();
    let due = q.due(t0 + 2 * MS);
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].key.as_str(), due[0].units), ("j", 3));
}

#[test]
fn several_rules_are_spent_here_all_or_none() {
    let q = quotas();
    let a = rule(100_000, 3_600_000, Some("fixed"));
    let b = rule(100_000, 3_600_000, Some("fixed"));
    let t0 = Instant::now();
    requests(&q, &a, "a", 4, t0);
    q.granted(&a, "a", 4, 3, granted_verdict(100_000, 10, 1_800_000), t0);
    // `b` holds nothing and is quiet: nothing is spent or taken, `a` keeps its three.
    let both = [(&a, "a", 1), (&b, "b", 1)];
    assert_eq!(q.plan_all(&both, t0 + MS), PlanAll::Hit);
    requests(&q, &b, "b", 4, t0);
    q.granted(&b, "b", 4, 1, granted_verdict(100_000, 10, 1_800_000), t0);
    let PlanAll::Spent(spent) = q.plan_all(&both, t0 + 2 * MS) else {
        panic!("both hold units");
    };
    assert_eq!(spent[0].0.binding().remaining, 12);
    assert_eq!(spent[1].0.binding().remaining, 10);
    // `b` is spent out, its refill on its way: `b` takes nothing more, and the request
    // goes to Redis whole.
    assert!(spent[1].1.is_some(), "b's refill");
    assert_eq!(q.plan_all(&both, t0 + 3 * MS), PlanAll::Hit);
    // The refill came to nothing, and `b` is busy (eight asked for in the interval): it
    // takes a batch of them, `a` is charged by a hit and keeps its two, which go back with
    // the hold.
    q.take_ended("b");
    assert_eq!(
        q.plan_all(&both, t0 + 4 * MS),
        PlanAll::Take(smallvec::smallvec![0, 8])
    );
    let due = q.due(t0 + 100 * MS);
    assert_eq!(due.iter().map(|g| g.units).sum::<u64>(), 2);
}

#[test]
fn several_busy_rules_short_of_units_each_take_a_batch() {
    let q = quotas();
    let a = rule(100_000, 3_600_000, Some("fixed"));
    let b = rule(100_000, 3_600_000, Some("fixed"));
    let cold = rule(100_000, 3_600_000, Some("fixed"));
    let t0 = Instant::now();
    let both = [(&a, "a", 1), (&b, "b", 1)];
    for n in 0..3 {
        assert_eq!(q.plan_all(&both, t0 + n * MS), PlanAll::Hit, "quiet");
    }
    // The fourth request of each: a batch of four for both, each a take of its own.
    let four = PlanAll::Take(smallvec::smallvec![4, 4]);
    assert_eq!(q.plan_all(&both, t0 + 3 * MS), four);
    q.granted(&a, "a", 4, 3, granted_verdict(100_000, 10, 1_800_000), t0);
    q.granted(&b, "b", 4, 3, granted_verdict(100_000, 10, 1_800_000), t0);
    assert!(matches!(q.plan_all(&both, t0 + 4 * MS), PlanAll::Spent(_)));
    // Beside a quiet key nothing is taken (its next requests go to Redis anyway), and
    // nothing of `a` is spent.
    let with_cold = [(&a, "a", 1), (&cold, "cold", 1)];
    assert_eq!(q.plan_all(&with_cold, t0 + 5 * MS), PlanAll::Hit);
    // Units spent for a request another rule denied go back into their lot, while it
    // may be spent.
    assert!(q.put_back(&a, "a", t0, 1, t0 + 6 * MS));
    assert!(!q.put_back(&b, "a", t0, 1, t0 + 6 * MS), "another rule's");
    assert!(
        !q.put_back(&a, "a", t0 + MS, 1, t0 + 6 * MS),
        "another take's"
    );
    assert!(!q.put_back(&a, "a", t0, 1, t0 + 100 * MS), "past its hold");
    let due = q.due(t0 + 100 * MS);
    let a_units: u64 = due.iter().filter(|g| g.key == "a").map(|g| g.units).sum();
    assert_eq!(a_units, 3, "two left of three, and the one put back");
}

#[test]
fn a_reply_without_every_tier_holds_nothing() {
    let q = quotas();
    let two_tiers = {
        let mut rule = test_rule("q", 100_000, 1_000, Some("fixed"), 1, RedisFailure::Open);
        if let Limit::Tiers { tiers, .. } = &mut rule.limit {
            tiers.push(crate::rules::Tier {
                limit: 1_000_000,
                window_ms: 3_600_000,
                period: None,
            });
        }
        Arc::new(rule.with_local_quota(true))
    };
    let t0 = Instant::now();
    assert_eq!(requests(&q, &two_tiers, "k", 4, t0), Plan::Take(4));
    // The Functions library's RESP2 answer names one tier: the other's end is unknown, so
    // the three are neither held nor given back (they end with their windows).
    q.granted(&two_tiers, "k", 4, 3, granted_verdict(100_000, 10, 500), t0);
    assert!(q.due(t0 + MS).is_empty());
    assert!(q.due(t0 + 10_000 * MS).is_empty());
    assert_eq!(requests(&q, &two_tiers, "k", 10, t0 + 2 * MS), Plan::Hit);
}
