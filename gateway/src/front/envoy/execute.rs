//! Executing a [`Plan`]: the only part of the Envoy front end that asks the decider.
//! Looks first (peeks, then refunds); then, unless they refused the request, every charge
//! in one decision (all or nothing for enforced descriptors). Quota descriptors add two
//! steps (see [`execute`]): a charge that does not fit spends what is left, and when every
//! quota descriptor of the request is over, what the others were charged is given back.

use super::answer::{self, Replies, Reply};
use super::plan::{quota, Ask, Matched, Plan};
use super::settings::AnswerSettings;
use crate::decider::{Applied, Decider, End, Look, RuleOutcome};
use crate::rules::{OnFailure, RedisFailure, Rule};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// The rules of the loaded descriptors, each made into another once, on first use: one
/// charged apart (a shadow rule to the decider: charged in a call of its own, its denial
/// counting nothing and denying nothing else), for `[envoy] quota_mode` and
/// `shadow_mode`, where no descriptor's denial may keep another from being charged; or one
/// with local quota, for `[envoy] local_quota`.
pub(super) struct MadeRules {
    /// By the address of the node's rule, which the entry holds so it stays unique.
    made: RwLock<Made>,
    making: Making,
}

/// What a [`MadeRules`] makes of a rule.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Making {
    Apart,
    LocalQuota,
}

/// Each node rule (by its address) with the rule made of it.
type Made = HashMap<usize, (Arc<Rule>, Arc<Rule>)>;

impl MadeRules {
    /// Rules charged apart.
    pub(super) fn apart() -> Self {
        MadeRules {
            made: RwLock::default(),
            making: Making::Apart,
        }
    }

    /// Rules with local quota, where a rule can have it.
    pub(super) fn local_quota() -> Self {
        MadeRules {
            made: RwLock::default(),
            making: Making::LocalQuota,
        }
    }

    /// The rule made of `m`'s.
    pub(super) fn rule(&self, m: &Matched<'_>) -> Arc<Rule> {
        // A request's own limit is a rule made for this request: nothing to keep (and no
        // local quota: units held for one request's rule serve no other).
        if !Arc::ptr_eq(&m.rule, &m.limit.rule) {
            return match self.making {
                Making::Apart => apart(&m.rule),
                Making::LocalQuota => m.rule.clone(),
            };
        }
        let at = Arc::as_ptr(&m.rule) as usize;
        let made = self.made.read().unwrap_or_else(|e| e.into_inner());
        if let Some((_, rule)) = made.get(&at) {
            return rule.clone();
        }
        drop(made);
        let mut made = self.made.write().unwrap_or_else(|e| e.into_inner());
        let (_, rule) = made.entry(at).or_insert_with(|| {
            let made = match self.making {
                Making::Apart => apart(&m.rule),
                Making::LocalQuota => with_local_quota(&m.rule),
            };
            (m.rule.clone(), made)
        });
        rule.clone()
    }
}

/// `rule` with local quota, when it can have it (a descriptor with a policy cannot).
fn with_local_quota(rule: &Rule) -> Arc<Rule> {
    let mut made = rule.clone();
    made.local_quota = rule.local_quota_refusal().is_none();
    Arc::new(made)
}

/// What is made of the loaded descriptors' rules.
pub(super) struct DescriptorRules {
    pub(super) apart: MadeRules,
    pub(super) local_quota: MadeRules,
}

impl Default for DescriptorRules {
    fn default() -> Self {
        DescriptorRules {
            apart: MadeRules::apart(),
            local_quota: MadeRules::local_quota(),
        }
    }
}

/// `rule` charged apart: as the descriptors' loader makes a quota or shadow one, never
/// closing the decision on a failure (its status reports it).
fn apart(rule: &Rule) -> Arc<Rule> {
    let mut apart = rule.clone();
    apart.shadow = true;
    apart.on_failure = OnFailure {
        redis: RedisFailure::Open,
        error_closed: false,
    };
    Arc::new(apart)
}

/// Asks the decider what `plan` says to ask: the looks first (peeks, then refunds), then,
/// unless they refused the request, every charge in one decision (all or nothing). Then,
/// unless an enforced descriptor refused the request:
/// - a quota descriptor's charge that did not fit spends what is left of it, so that the
///   next look says it is over (the real cost of a stream, told at its end, is rarely what
///   is left);
/// - when every quota descriptor is over, the answer is OVER_LIMIT: what the other
///   descriptors were charged is given back.
pub(super) async fn execute(
    decider: &Decider,
    plan: &Plan<'_>,
    settings: &AnswerSettings,
    made: &DescriptorRules,
) -> Replies {
    let mut replies: SmallVec<[Reply; 4]> = plan.matched.iter().map(|_| Reply::NotAsked).collect();
    let applied = |at: usize, cost: u64| {
        let m = &plan.matched[at];
        Applied {
            rule: if settings.charges_apart() {
                made.apart.rule(m)
            } else if settings.local_quota {
                made.local_quota.rule(m)
            } else {
                m.rule.clone()
            },
            key: m.key.clone(),
            cost: Some(cost),
        }
    };
    let asking = |ask: Ask| -> SmallVec<[usize; 4]> {
        (0..plan.matched.len())
            .filter(|&at| plan.matched[at].ask == ask)
            .collect()
    };
    for (look, ask) in [(Look::Peek, Ask::Peek), (Look::Refund, Ask::Refund)] {
        let these = asking(ask);
        if these.is_empty() {
            continue;
        }
        let applying: SmallVec<[Applied; 4]> = these
            .iter()
            .map(|&at| applied(at, plan.matched[at].cost))
            .collect();
        let answers = decider.look(&applying, look).await;
        for (&at, answer) in these.iter().zip(answers) {
            replies[at] = Reply::Looked(answer);
        }
    }
    let charging = asking(Ask::Charge);
    let mut closed = None;
    if charging.is_empty() || answer::refused_before_charging(plan, &replies, settings) {
        return Replies { replies, closed };
    }
    let applying: SmallVec<[Applied; 4]> = charging
        .iter()
        .map(|&at| applied(at, plan.matched[at].cost))
        .collect();
    let stacked = decider.decide(&applying, None).await;
    let refused = matches!(stacked.end, End::Denied { .. } | End::Closed { .. });
    if let End::Closed { rule, .. } = stacked.end {
        closed = Some(plan.matched[charging[rule]].index);
    }
    for (&at, outcome) in charging.iter().zip(stacked.outcomes) {
        replies[at] = Reply::Charged(outcome);
    }
    if !refused {
        for &at in &charging {
            let m = &plan.matched[at];
            let over = matches!(replies[at], Reply::Charged(RuleOutcome::ShadowDenied));
            if over && m.cost > 1 && quota(m.limit, settings.quota_mode) {
                spend_what_is_left(decider, applied(at, 1)).await;
            }
        }
        if answer::quota_all_over(plan, &replies, settings) {
            give_back(decider, &charging, &mut replies, |at| {
                applied(at, plan.matched[at].cost)
            })
            .await;
        }
    }
    Replies { replies, closed }
}

/// Charges what is left of the key of `applied` (a look of one unit says how much),
/// however little: a quota descriptor whose charge did not fit is then spent.
async fn spend_what_is_left(decider: &Decider, mut applied: Applied) {
    let looked = decider
        .look(std::slice::from_ref(&applied), Look::Peek)
        .await;
    let Some(Ok(Some(verdict))) = looked.into_iter().next() else {
        return;
    };
    if !verdict.allowed() {
        return;
    }
    let left = verdict.before_look(1).binding().remaining;
    applied.cost = Some(left);
    // Another request may have taken some meanwhile: then this one is denied, counting
    // nothing, and what is left stays for the next.
    let _ = decider.decide(std::slice::from_ref(&applied), None).await;
}

/// Gives back every charge that counted (every quota descriptor was over: the request is
/// refused); each then says what its key holds after the refund.
async fn give_back(
    decider: &Decider,
    charging: &[usize],
    replies: &mut [Reply],
    applied: impl Fn(usize) -> Applied,
) {
    let mut counted: SmallVec<[usize; 4]> = SmallVec::new();
    for &at in charging {
        match &replies[at] {
            Reply::Charged(RuleOutcome::Allowed(_)) => counted.push(at),
            Reply::Charged(RuleOutcome::Local { verdict, .. }) if verdict.allowed() => {
                decider.refund_locally(&applied(at));
            }
            _ => {}
        }
    }
    if counted.is_empty() {
        return;
    }
    let applying: SmallVec<[Applied; 4]> = counted.iter().map(|&at| applied(at)).collect();
    let after = decider.look(&applying, Look::Refund).await;
    for (&at, after) in counted.iter().zip(after) {
        let Reply::Charged(RuleOutcome::Allowed(charged)) = &replies[at] else {
            continue;
        };
        let shown = match after {
            Ok(Some(verdict)) => verdict,
            _ => charged.clone(),
        };
        replies[at] = Reply::Charged(RuleOutcome::Uncounted(shown));
    }
}
