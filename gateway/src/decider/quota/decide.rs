//! The decider's side of local quota: a request decided from the units held, a take sent
//! for a request that found too few (and what it granted beyond the request kept), the
//! refills in the background, and the task that gives unused units back.

use super::{Plan, PlanAll, Quotas};
use crate::decider::calls::Late;
use crate::decider::commands::{hit_cmd, take_cmd};
use crate::decider::MIN_RELEASE_DEADLINE;
use crate::decider::{Applied, Decider, RuleOutcome, Transport};
use crate::failure::Failure;
use crate::rules::Limit;
use crate::verdict::Verdict;
use smallvec::SmallVec;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often held units are looked at to go back.
const SWEEP_EVERY: Duration = Duration::from_millis(10);

/// For each applying rule, the units its call takes (`RL.TAKE ... UPTO n`), or 0 for a
/// plain hit.
pub(crate) type Takes = SmallVec<[u64; 2]>;

/// What one take answered, for the request that sent it.
pub(crate) enum Taken {
    /// Redis decided: its verdict (a denial, or a grant of the request's units alone).
    Decided(Verdict),
    /// Granted the request's units and more, held for the key's next requests from the
    /// take sent at this instant (shown in the verdict).
    Held(Verdict, Instant),
    /// Fewer units than the request's cost: given back, and the request is to be charged
    /// as a plain hit, whose answer is exact for its cost.
    TooFew,
}

/// Lets the key take again when a request's take is over, however it ended.
struct TakeEnded<'a> {
    quotas: &'a Quotas,
    key: &'a str,
}

impl Drop for TakeEnded<'_> {
    fn drop(&mut self) {
        self.quotas.take_ended(self.key);
    }
}

/// The rules of a request whose takes [`Decider::decide_held`] planned and that have not
/// gone out yet: when the request ends before they do (an earlier rule denied or refused
/// it, or the request was dropped), their keys may take again.
pub(crate) struct PlannedTakes<'a> {
    quotas: &'a Quotas,
    applying: &'a [Applied],
    waiting: SmallVec<[usize; 2]>,
}

impl<'a> PlannedTakes<'a> {
    pub(crate) fn new(quotas: &'a Quotas, applying: &'a [Applied], takes: &Takes) -> Self {
        let waiting = (0..takes.len()).filter(|&i| takes[i] > 0).collect();
        PlannedTakes {
            quotas,
            applying,
            waiting,
        }
    }

    /// The rules of `group` are being charged: a take among them ends on its own.
    pub(crate) fn going(&mut self, group: &[usize]) {
        self.waiting.retain(|i| !group.contains(i));
    }
}

impl Drop for PlannedTakes<'_> {
    fn drop(&mut self) {
        for &i in &self.waiting {
            self.quotas.take_ended(&self.applying[i].key);
        }
    }
}

/// The units one request of `applied` spends: its own cost, else its rule's.
fn request_cost(applied: &Applied) -> u64 {
    applied.cost.unwrap_or(match &applied.rule.limit {
        Limit::Tiers { cost, .. } | Limit::Policy { cost, .. } => *cost,
        Limit::Unlimited => 0,
    })
}

impl<T: Transport> Decider<T> {
    /// Decides the request from the units this gateway holds (`true`, each limited rule's
    /// outcome set) when every limited rule that applies has local quota and holds enough.
    /// Otherwise (`false`) `takes` says what each rule is to take: a batch for each busy
    /// rule that holds too few (when every limited rule has local quota and none of those
    /// short is a quiet key, see [`Quotas::plan_all`]), 0 (a plain hit) for the rest.
    pub(crate) fn decide_held(
        &self,
        applying: &[Applied],
        outcomes: &mut [RuleOutcome],
        takes: &mut Takes,
    ) -> bool {
        let limited: SmallVec<[usize; 2]> = applying
            .iter()
            .enumerate()
            .filter(|(_, a)| a.rule.limit != Limit::Unlimited)
            .map(|(i, _)| i)
            .collect();
        let quota = |i: &usize| applying[*i].rule.local_quota && request_cost(&applying[*i]) > 0;
        if limited.is_empty() || !limited.iter().all(quota) {
            return false;
        }
        let now = Instant::now();
        if let [i] = limited[..] {
            let a = &applying[i];
            match self.quotas.plan(&a.rule, &a.key, request_cost(a), now) {
                Plan::Spent(verdict, refill) => {
                    self.after_spending(a, refill);
                    outcomes[i] = RuleOutcome::Allowed(verdict);
                }
                Plan::Take(units) => {
                    takes[i] = units;
                    return false;
                }
                Plan::Hit => return false,
            }
        } else if !self.decide_all_held(applying, &limited, outcomes, takes, now) {
            return false;
        }
        self.metrics.quota.spent();
        true
    }

    /// [`Decider::decide_held`] for a request several rules with local quota (`limited`)
    /// apply to: all spent here (`true`), or none, with the takes the busy rules short of
    /// units are to make set in `takes`.
    fn decide_all_held(
        &self,
        applying: &[Applied],
        limited: &[usize],
        outcomes: &mut [RuleOutcome],
        takes: &mut Takes,
        now: Instant,
    ) -> bool {
        let requests: Vec<_> = limited
            .iter()
            .map(|&i| {
                let a = &applying[i];
                (&a.rule, a.key.as_str(), request_cost(a))
            })
            .collect();
        let spent = match self.quotas.plan_all(&requests, now) {
            PlanAll::Spent(spent) => spent,
            PlanAll::Take(units) => {
                for (&i, units) in limited.iter().zip(units) {
                    takes[i] = units;
                }
                return false;
            }
            PlanAll::Hit => return false,
        };
        for (&i, (verdict, refill)) in limited.iter().zip(spent) {
            self.after_spending(&applying[i], refill);
            outcomes[i] = RuleOutcome::Allowed(verdict);
        }
        true
    }

    /// `RL.TAKE` of up to `units` for `applied`'s request before `deadline`: what is
    /// granted beyond the request's cost is held for the key's next requests.
    pub(crate) async fn take(
        &self,
        applied: &Applied,
        units: u64,
        deadline: tokio::time::Instant,
        late: &mut Option<Late>,
    ) -> Result<Taken, Failure> {
        let asked_at = Instant::now();
        // Whatever becomes of the take (the request dropped while it is out included), the
        // key may take again after it.
        let _ended = TakeEnded {
            quotas: &self.quotas,
            key: &applied.key,
        };
        let reply = self
            .send(take_cmd(applied, units), None, deadline, Some(late))
            .await;
        let value = match reply {
            Ok(value) => value,
            Err((failure, error)) => {
                if let Some(error) = error {
                    self.module_error("RL.TAKE", &applied.rule, &applied.key, &error);
                }
                return Err(failure);
            }
        };
        let Some((verdict, granted)) = Verdict::from_take_reply(&value) else {
            let reason = "a reply that is not a grant";
            self.module_error("RL.TAKE", &applied.rule, &applied.key, reason);
            return Err(Failure::Error);
        };
        self.metrics.quota.taken(granted);
        let cost = request_cost(applied);
        if granted == 0 {
            return Ok(Taken::Decided(verdict));
        }
        if granted < cost {
            if self.quotas.may_give_back(&applied.rule, &verdict) {
                self.give_back_units(applied.rule.clone(), applied.key.clone(), granted);
            }
            return Ok(Taken::TooFew);
        }
        let leftover = granted - cost;
        let shown = verdict.holding(leftover, 0);
        let (rule, key) = (&applied.rule, &applied.key);
        self.quotas
            .granted(rule, key, granted, leftover, verdict, asked_at);
        self.start_sweeping();
        Ok(Taken::Held(shown, asked_at))
    }

    /// Another rule denied (or refused) the request after the takes `taken` (each rule's
    /// index and when its take was sent) granted it units: those units go back into the
    /// lot they were taken in, for the key's next requests, and the rule counts nothing
    /// for this one. A lot that may no longer be spent leaves the rule's outcome allowed,
    /// for the request's give-back to refund in Redis.
    pub(crate) fn put_back_taken(
        &self,
        applying: &[Applied],
        taken: &[(usize, Instant)],
        outcomes: &mut [RuleOutcome],
    ) {
        let now = Instant::now();
        for &(i, taken_at) in taken {
            let RuleOutcome::Allowed(verdict) = &outcomes[i] else {
                continue;
            };
            let a = &applying[i];
            let units = request_cost(a);
            if self.quotas.put_back(&a.rule, &a.key, taken_at, units, now) {
                outcomes[i] = RuleOutcome::Uncounted(verdict.clone());
            }
        }
    }

    /// After units were spent here: the refill, when one is due, taken in the background.
    fn after_spending(&self, applied: &Applied, refill: Option<u64>) {
        let Some(units) = refill else { return };
        // While the breaker is open no call goes; the key's requests take their own units
        // when what is held runs out, and meet the breaker there.
        if self.breaker.is_open() {
            self.quotas.take_ended(&applied.key);
            return;
        }
        let cmd = take_cmd(applied, units);
        let (backend, quotas) = (self.backend.clone(), self.quotas.clone());
        let (rule, key) = (applied.rule.clone(), applied.key.clone());
        let metrics = self.metrics.quota.clone();
        let wait = self.deadline.max(MIN_RELEASE_DEADLINE);
        tokio::spawn(async move {
            let asked_at = Instant::now();
            let reply = tokio::time::timeout(wait, backend.call(&cmd, None)).await;
            match reply
                .ok()
                .and_then(Result::ok)
                .as_ref()
                .and_then(Verdict::from_take_reply)
            {
                Some((verdict, granted)) if granted > 0 => {
                    metrics.taken(granted);
                    quotas.granted(&rule, &key, granted, granted, verdict, asked_at);
                }
                // A denial, an error or no answer: nothing more is held; a take that lands
                // after the wait counts units nobody spends, which come back with their
                // window (or the bucket's refill).
                _ => quotas.take_ended(&key),
            }
        });
        self.start_sweeping();
    }

    /// Gives `units` of `key` back to Redis, in the background.
    fn give_back_units(&self, rule: Arc<crate::rules::Rule>, key: String, units: u64) {
        let backend = self.backend.clone();
        let metrics = self.metrics.quota.clone();
        tokio::spawn(give_back(backend, metrics, rule, key, units));
    }

    /// Starts, once, the task that gives back what is held when its time comes. It ends
    /// with the decider (it holds the store weakly).
    fn start_sweeping(&self) {
        if self.quotas.sweeping.swap(true, Relaxed) {
            return;
        }
        let quotas = Arc::downgrade(&self.quotas);
        let backend = self.backend.clone();
        let metrics = self.metrics.quota.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SWEEP_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                every.tick().await;
                let Some(quotas) = quotas.upgrade() else {
                    return;
                };
                let due = quotas.due(Instant::now());
                drop(quotas);
                for item in due {
                    let (backend, metrics) = (backend.clone(), metrics.clone());
                    tokio::spawn(give_back(backend, metrics, item.rule, item.key, item.units));
                }
            }
        });
    }

    /// The rules changed: what is held goes back.
    pub(crate) fn release_held(&self) {
        self.quotas.release_all();
    }

    /// Gives back every unit held and waits for the answers (each under the release
    /// deadline): a stopping gateway's units are then another's at once, not at their
    /// window's end.
    pub async fn give_back_held(&self) {
        self.quotas.release_all();
        let tasks: Vec<_> = self
            .quotas
            .due(Instant::now())
            .into_iter()
            .map(|item| {
                let (backend, metrics) = (self.backend.clone(), self.metrics.quota.clone());
                tokio::spawn(give_back(backend, metrics, item.rule, item.key, item.units))
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// `RL.REFUND key words COST units`, under the release deadline: never above the limit,
/// never into another window (the module's refund rules), so a late or repeated one is
/// harmless. One that fails leaves the units counted: the strict side.
async fn give_back<T: Transport>(
    backend: T,
    metrics: crate::metrics::QuotaCounters,
    rule: Arc<crate::rules::Rule>,
    key: String,
    units: u64,
) {
    let applied = Applied {
        rule,
        key,
        cost: Some(units),
    };
    let cmd = hit_cmd("RL.REFUND", &applied);
    let call = backend.call(&cmd, None);
    if let Ok(Ok(_)) = tokio::time::timeout(MIN_RELEASE_DEADLINE, call).await {
        metrics.given_back(units);
    }
}
