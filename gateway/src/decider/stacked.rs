//! [`Decider::decide`]: every rule that applies to a request charged, all of which must
//! allow it. Keys in one slot are decided by one `RL.MHIT`, counted in all or none; groups
//! in different slots are charged one after the other, in rule order, and when one denies,
//! or fails on a fail-closed rule, those charged before are given back.

use super::calls::Late;
use super::commands::{group_cmd, hit_cmd};
use super::groups::{Pending, Shadow};
use super::lease_guard::new_lease_id;
use super::local_limits::LocalAnswer;
use super::quota::{PlannedTakes, Taken, Takes};
use super::MIN_RELEASE_DEADLINE;
use super::{Applied, Decider, End, LeaseAnswer, RuleOutcome, Stacked, Transport};
use crate::failure::Failure;
use crate::rules::Limit;
use crate::verdict::{MultiVerdict, Verdict};
use smallvec::SmallVec;
use std::time::Instant;

/// Each applying rule's outcome, in rule order.
type Outcomes = SmallVec<[RuleOutcome; 2]>;

/// A group's answer: allowed as a whole, and each key's verdict with whether it binds.
struct Charged {
    allowed: bool,
    keys: SmallVec<[(Verdict, bool); 2]>,
    /// For a take of local quota that left units held: when it was sent (see
    /// [`Decider::put_back_taken`]).
    taken_at: Option<Instant>,
}

/// What a group that Redis could not decide came to.
enum Undecided {
    /// The rule at this index fails closed: the request is refused (503).
    Closed(usize),
    /// Decided by local limits, or failed open: the binding denial of a local limit, if any.
    Decided(Option<usize>),
}

impl<T: Transport> Decider<T> {
    /// Charges one request to every rule in `applying` (in rule order, each with its key),
    /// all of which must allow it. Keys in one slot are decided by one `RL.MHIT` (on one
    /// server: all of them), counted in all or none; groups in different slots are charged
    /// one after the other, in rule order, and when one denies, or fails on a fail-closed
    /// rule, those charged before are given back (`RL.REFUND`, `RL.MREFUND`). A shadow rule
    /// is charged on its own, where it stands, and never denies.
    ///
    /// A rule with `concurrency` takes its lease under `lease_id`: the caller names it
    /// before the call, so that it can give back a lease Redis took after the caller
    /// stopped waiting (see [`LeaseAnswer::Unknown`]). Without one, a fresh id is used.
    pub(crate) async fn decide(&self, applying: &[Applied], lease_id: Option<&str>) -> Stacked {
        // A rule with `concurrency` applies alone (the rules are checked for that).
        if let [applied] = applying {
            if let Some(concurrency) = &applied.rule.concurrency {
                let fresh;
                let id = match lease_id {
                    Some(id) => id,
                    None => {
                        fresh = new_lease_id();
                        &fresh
                    }
                };
                return self.acquire(applied, concurrency, id).await;
            }
        }
        let mut outcomes: Outcomes = applying
            .iter()
            .map(|a| match a.rule.limit {
                Limit::Unlimited => RuleOutcome::Unlimited,
                _ => RuleOutcome::NotAsked,
            })
            .collect();
        let limited = applying
            .iter()
            .enumerate()
            .filter(|(_, a)| a.rule.limit != Limit::Unlimited)
            .map(|(i, _)| i);
        if limited.clone().next().is_none() {
            return ended(outcomes, End::Unlimited);
        }
        if let Some((binding, verdict)) = self.cached_denial(applying) {
            outcomes[binding] = RuleOutcome::Denied {
                verdict,
                cached: true,
            };
            let cached = true;
            return ended(outcomes, End::Denied { binding, cached });
        }
        let mut takes: Takes = SmallVec::from_elem(0, applying.len());
        if self.decide_held(applying, &mut outcomes, &mut takes) {
            return ended(outcomes, End::Allowed);
        }
        let cluster = self.backend.is_cluster();
        let alone = |i: usize| takes[i] > 0;
        let pending = Pending::with_alone(applying, limited, cluster, Shadow::Apart, alone);
        self.charge_in_turn(applying, pending, outcomes, &takes)
            .await
    }

    /// A denial still in force for any enforced key answers for the whole request; the
    /// longest wait binds, as Redis would have chosen.
    fn cached_denial(&self, applying: &[Applied]) -> Option<(usize, Verdict)> {
        let now = Instant::now();
        applying
            .iter()
            .enumerate()
            .filter(|(_, a)| a.rule.limit != Limit::Unlimited)
            .filter(|(_, a)| !a.rule.shadow && a.rule.deny_cache)
            .filter_map(|(i, a)| Some((i, self.deny_cache.check(&a.key, now)?)))
            .max_by_key(|(i, v)| (v.binding().retry_after_ms, std::cmp::Reverse(*i)))
    }

    /// Charges the groups of `pending` one after the other, under one deadline, until one
    /// denies or closes. The units a take of local quota granted a request that is then
    /// denied or refused stay held for the key's next requests.
    async fn charge_in_turn(
        &self,
        applying: &[Applied],
        mut pending: Pending,
        mut outcomes: Outcomes,
        takes: &Takes,
    ) -> Stacked {
        let deadline = tokio::time::Instant::now() + self.deadline;
        let mut planned = PlannedTakes::new(&self.quotas, applying, takes);
        let mut taken: SmallVec<[(usize, Instant); 2]> = SmallVec::new();
        while let Some(group) = pending.next() {
            planned.going(&group);
            let mut late = None;
            let charged = self.charge(applying, &group, takes, deadline, &mut late);
            let binding = match charged.await {
                Ok(charged) => {
                    taken.extend(charged.taken_at.map(|at| (group[0], at)));
                    self.record(applying, &group, charged, &mut outcomes)
                }
                Err(Failure::Error) if pending.split(&group) => continue,
                Err(failure) => {
                    let late = late.take();
                    match self.undecided(applying, &group, failure, late, &mut outcomes) {
                        Undecided::Decided(binding) => binding,
                        Undecided::Closed(rule) => {
                            self.put_back_taken(applying, &taken, &mut outcomes);
                            self.give_back(applying, &mut outcomes).await;
                            return ended(outcomes, End::Closed { rule, failure });
                        }
                    }
                }
            };
            if let Some(binding) = binding {
                self.put_back_taken(applying, &taken, &mut outcomes);
                return self.denied(applying, outcomes, binding).await;
            }
        }
        ended(outcomes, End::Allowed)
    }

    /// One `RL.HIT` for a group of one (an `RL.TAKE` of a batch when `takes` says so),
    /// else one `RL.MHIT`: every key's verdict, each flagged when it is the binding key. A
    /// call unanswered by `deadline` is left in `late`, still running.
    async fn charge(
        &self,
        applying: &[Applied],
        group: &[usize],
        takes: &Takes,
        deadline: tokio::time::Instant,
        late: &mut Option<Late>,
    ) -> Result<Charged, Failure> {
        if let [i] = group {
            let applied = &applying[*i];
            let (verdict, taken_at) = self.charge_one(applied, takes[*i], deadline, late).await?;
            return Ok(Charged {
                allowed: verdict.allowed(),
                keys: SmallVec::from_elem((verdict, true), 1),
                taken_at,
            });
        }
        let multi = self
            .call_multi("RL.MHIT", applying, group, deadline, Some(late))
            .await?;
        let binding = multi.binding;
        Ok(Charged {
            allowed: multi.allowed,
            keys: multi
                .keys
                .into_iter()
                .enumerate()
                .map(|(k, v)| (v, k == binding))
                .collect(),
            taken_at: None,
        })
    }

    /// One rule charged alone: an `RL.TAKE` of `units` when it takes a batch (and when it
    /// left units held, when it was sent), else (or when it granted too few) an `RL.HIT`.
    async fn charge_one(
        &self,
        applied: &Applied,
        units: u64,
        deadline: tokio::time::Instant,
        late: &mut Option<Late>,
    ) -> Result<(Verdict, Option<Instant>), Failure> {
        let taken = match units {
            0 => None,
            units => match self.take(applied, units, deadline, late).await? {
                Taken::Decided(verdict) => Some((verdict, None)),
                Taken::Held(verdict, at) => Some((verdict, Some(at))),
                Taken::TooFew => None,
            },
        };
        let (verdict, taken_at) = match taken {
            Some(taken) => taken,
            None => (
                self.call("RL.HIT", applied, deadline, Some(late)).await?,
                None,
            ),
        };
        if applied.rule.local_quota {
            self.quotas.hit_answered(&applied.key, &verdict);
        }
        Ok((verdict, taken_at))
    }

    /// What Redis answered for `group`, as each rule's outcome; the binding denial, if any.
    fn record(
        &self,
        applying: &[Applied],
        group: &[usize],
        charged: Charged,
        outcomes: &mut [RuleOutcome],
    ) -> Option<usize> {
        let mut binding = None;
        for (&i, (verdict, is_binding)) in group.iter().zip(charged.keys) {
            let rule = &applying[i].rule;
            outcomes[i] = if rule.shadow && !verdict.allowed() {
                RuleOutcome::ShadowDenied
            } else if !verdict.allowed() {
                self.remember_denial(applying, i, &verdict);
                if is_binding {
                    binding = Some(i);
                }
                RuleOutcome::Denied {
                    verdict,
                    cached: false,
                }
            } else if verdict.shadow_denied {
                RuleOutcome::ShadowDenied
            } else if charged.allowed {
                RuleOutcome::Allowed(verdict)
            } else {
                // Another key of the same call denied: nothing was counted here.
                RuleOutcome::Uncounted(verdict)
            };
        }
        binding
    }

    /// Puts the denial of `applying[i]` in the deny cache, when it will last.
    fn remember_denial(&self, applying: &[Applied], i: usize, verdict: &Verdict) {
        let rule = &applying[i].rule;
        // Hits given back after the fact (a rule that counts by status, or one charged
        // apart from a rule in another slot) make a denial made while they were
        // outstanding one that may not last: not cached.
        let given_back =
            rule.counts_by_status() || (rule.stacks_across_subjects && self.backend.is_cluster());
        // A denial of more than one unit says nothing of a request of one; nor does one of
        // a key the call holds twice (Envoy descriptors repeated), whose denial counted the
        // call's own other hits, none of them stored.
        let key = &applying[i].key;
        let one_unit = applying[i].cost.is_none_or(|c| c == 1)
            && applying.iter().filter(|a| &a.key == key).count() == 1;
        if !given_back && one_unit && rule.deny_cache {
            self.deny_cache.remember(key, verdict, Instant::now());
        }
    }

    /// Redis could not decide `group` (`failure`): a fail-closed rule refuses the request,
    /// else each rule decides by its local limit or fails open. A hit Redis runs late
    /// (`late`) must not count a request that is refused or decided by a local limit: it
    /// is given back when it lands.
    fn undecided(
        &self,
        applying: &[Applied],
        group: &[usize],
        failure: Failure,
        late: Option<Late>,
        outcomes: &mut [RuleOutcome],
    ) -> Undecided {
        for &i in group {
            outcomes[i] = RuleOutcome::Failed(failure);
        }
        let closing = group
            .iter()
            .copied()
            .find(|&i| applying[i].rule.on_failure.closes(failure));
        if let Some(rule) = closing {
            if let Some(late) = late {
                self.settle_late(late, applying, group);
            }
            return Undecided::Closed(rule);
        }
        let binding = self.decide_locally(applying, group, failure, outcomes);
        let local = group
            .iter()
            .any(|&i| matches!(outcomes[i], RuleOutcome::Local { .. }));
        if let Some(late) = late.filter(|_| local) {
            self.settle_late(late, applying, group);
        }
        Undecided::Decided(binding)
    }

    /// The decision when the rule at `binding` denied: whatever was counted for the
    /// request is given back first.
    async fn denied(
        &self,
        applying: &[Applied],
        mut outcomes: Outcomes,
        binding: usize,
    ) -> Stacked {
        self.give_back(applying, &mut outcomes).await;
        let cached = false;
        ended(outcomes, End::Denied { binding, cached })
    }

    /// Waits in the background for the answer of a charge that missed its deadline, and
    /// gives it back if Redis counted it: the request it was for is refused, or counted by
    /// a local limit. A correct login answered 503 during a stall is thus not counted by
    /// the hit Redis runs when it resumes (three of those would lock the user out). An
    /// answer that never comes (the connection fails) leaves it as it is.
    fn settle_late(&self, late: Late, applying: &[Applied], group: &[usize]) {
        let refund = group_cmd("RL.REFUND", "RL.MREFUND", applying, group);
        let keys = group.len();
        let first = &applying[group[0]];
        let (rule, key) = (first.rule.clone(), first.key.clone());
        let backend = self.backend.clone();
        let quotas = self.quotas.clone();
        tokio::spawn(async move {
            let Ok(reply) = late.await else { return };
            // A take (local quota) counted the units it granted, all of which go back
            // while their window lasts (else they end with it).
            if let Some((verdict, granted)) = Verdict::from_take_reply(&reply) {
                if granted > 0 && quotas.may_give_back(&rule, &verdict) {
                    let applied = Applied {
                        rule,
                        key,
                        cost: Some(granted),
                    };
                    let refund = hit_cmd("RL.REFUND", &applied);
                    let call = backend.call(&refund, None);
                    let _ = tokio::time::timeout(MIN_RELEASE_DEADLINE, call).await;
                }
                return;
            }
            let counted = match keys {
                1 => Verdict::from_reply(&reply).map(|v| v.allowed()),
                n => MultiVerdict::from_reply(&reply, n).map(|m| m.allowed),
            };
            if counted == Some(true) {
                let call = backend.call(&refund, Some(&key));
                let _ = tokio::time::timeout(MIN_RELEASE_DEADLINE, call).await;
            }
        });
    }

    /// The rules of `group` that Redis could not decide (`failure`) and that say
    /// `on_redis_failure = "local"`, decided by their local limits; the binding denial, if
    /// any: the longest wait. A shadow rule stays failed open (it never denies), and so does
    /// a policy whose definition was never read.
    fn decide_locally(
        &self,
        applying: &[Applied],
        group: &[usize],
        failure: Failure,
        outcomes: &mut [RuleOutcome],
    ) -> Option<usize> {
        let now_ms = super::local_limits::now_ms();
        let mut binding: Option<(usize, u64)> = None;
        for &i in group {
            let a = &applying[i];
            if a.rule.shadow || !a.rule.on_failure.decides_locally(failure) {
                continue;
            }
            let verdict = match self.local.hit(&a.rule, &a.key, a.cost, now_ms) {
                LocalAnswer::Unknown => continue,
                LocalAnswer::Allowed(verdict) => verdict,
                LocalAnswer::Denied(verdict) => {
                    let wait = verdict.binding().retry_after_ms;
                    if binding.is_none_or(|(_, longest)| wait > longest) {
                        binding = Some((i, wait));
                    }
                    verdict
                }
            };
            outcomes[i] = RuleOutcome::Local { verdict, failure };
        }
        binding.map(|(i, _)| i)
    }
}

/// The decision: `outcomes` and how it ended, with no lease.
fn ended(outcomes: Outcomes, end: End) -> Stacked {
    Stacked {
        outcomes,
        end,
        lease: LeaseAnswer::NotTaken,
    }
}
