//! One decision: the deny cache, the circuit breaker, then RL.HIT (or, for several rules
//! in one slot, RL.MHIT) under the deadline, through a [`Transport`] (Redis, or a scripted
//! one in the unit tests).
//! Whatever goes wrong with Redis becomes a [`Failure`], never an error for the client: a
//! rule then decides by its local limit, lets the request through, or (fail-closed) has
//! it answered 503, as its `on_redis_failure` says.

pub mod breaker;
pub mod deny_cache;
pub mod local_limits;
pub mod module_errors;
mod transport;

use crate::backend::{classify, same_slot, Backend};
use crate::config::RedisSettings;
use crate::decider::breaker::{Breaker, Transition};
use crate::decider::deny_cache::DenyCache;
use crate::decider::local_limits::{LocalAnswer, LocalLimits};
use crate::decider::module_errors::ModuleErrorLog;
use crate::failure::Failure;
use crate::logging::{log, log_throttled, Kind};
use crate::metrics::Metrics;
use crate::rules::{Concurrency, Limit, Rule, MAX_APPLYING};
use crate::verdict::{LeaseVerdict, MultiVerdict, Verdict};
use smallvec::SmallVec;
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use transport::Transport;

/// The least time a release may take: see [`Decider::release`].
const MIN_RELEASE_DEADLINE: Duration = Duration::from_secs(1);
/// The longest a refund is retried, whatever the rule's window: bounds the tasks an outage
/// can leave waiting.
const MAX_REFUND_RETRY: Duration = Duration::from_secs(600);

/// One rule that applies to a request, with the key it charges.
pub struct Applied {
    pub rule: Arc<Rule>,
    pub key: String,
    /// The units this request counts, when the front end says (Envoy's `hits_addend`):
    /// sent as `COST n` after the rule's words, which then carry no `COST` of their own.
    /// `None`: the rule's own cost.
    pub cost: Option<u64>,
}

impl Applied {
    /// The words after the key of `RL.HIT`, `RL.PEEK` or `RL.REFUND` for this request.
    fn push_args(&self, cmd: &mut redis::Cmd) {
        let words = &self.rule.call_args;
        match self.cost {
            None => {
                cmd.arg(words);
            }
            Some(cost) => {
                // The module takes COST once: the rule's own (always its last two words,
                // see `call_args`) gives way to this request's.
                let own = words.len() >= 2 && words[words.len() - 2] == "COST";
                cmd.arg(&words[..words.len() - if own { 2 } else { 0 }]);
                if cost != 1 {
                    cmd.arg("COST").arg(cost);
                }
            }
        }
    }
}

/// A call that decides nothing about admission: what a hit would do, or a refund.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// `RL.PEEK` / `RL.MPEEK`: counts nothing.
    Peek,
    /// `RL.REFUND` / `RL.MREFUND`: gives back up to the cost, never above the limit.
    Refund,
}

/// What became of one applying rule.
#[derive(Debug, Clone)]
pub enum RuleOutcome {
    /// The rule has no limits: nothing to ask.
    Unlimited,
    /// Not asked: the deny cache, another rule's denial or a fail-closed failure decided
    /// first.
    NotAsked,
    /// Counted, and still counted.
    Allowed(Verdict),
    /// Would allow, but nothing of the request is counted: another key of its `RL.MHIT`
    /// denied, or it was counted and given back after a later rule denied or closed. The
    /// verdict is what it holds now.
    Uncounted(Verdict),
    /// `cached`: answered from the deny cache, without Redis.
    Denied {
        verdict: Verdict,
        cached: bool,
    },
    /// A shadow rule (or policy) would have denied; nothing was counted.
    ShadowDenied,
    /// Redis could not decide (`failure`) and the rule's local limit did
    /// (`on_redis_failure = "local"`): counted in the gateway's memory when allowed.
    Local {
        verdict: Verdict,
        failure: Failure,
    },
    Failed(Failure),
}

/// What the rules together decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// No applying rule has limits.
    Unlimited,
    /// Every limited rule allowed, would have (shadow), or failed open.
    Allowed,
    /// The rule at `binding` denied: its wait is the one to report.
    Denied { binding: usize, cached: bool },
    /// The rule at `rule` could not be decided and fails closed: 503.
    Closed { rule: usize, failure: Failure },
}

/// The decision on one request: each applying rule's outcome, in rule order, and the end.
pub struct Stacked {
    pub outcomes: SmallVec<[RuleOutcome; 2]>,
    pub end: End,
    /// What became of the lease of a rule with `concurrency`, asked for under the id the
    /// caller chose: the caller holds a lease taken until the response ends, then gives it
    /// back with [`Decider::release`].
    pub lease: LeaseAnswer,
}

/// What became of the lease a `concurrency` rule asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// None was asked for, or Redis answered that it took none (no free slot, a tier
    /// denied, an error reply), or the call was never sent (the breaker).
    NotTaken,
    /// Taken: held until the response ends.
    Taken,
    /// The call was sent but its answer did not come (the deadline passed, the connection
    /// broke): Redis may have taken the lease, or may yet, so it must be given back.
    Unknown,
}

/// What `RL.RELEASE` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The lease was held and is free now.
    Freed,
    /// Not held (never taken, already expired): nothing changed.
    NotHeld,
    /// No answer: a lease still held ends by its `lease_ttl`.
    Failed,
}

/// A call still running after its deadline: its answer, when it comes.
type Late =
    std::pin::Pin<Box<dyn std::future::Future<Output = redis::RedisResult<redis::Value>> + Send>>;

/// The rules (indexes into the applying ones) that one call charges.
type Group = SmallVec<[usize; 2]>;
/// A request's groups, inline for the common cases (no allocation on the request path).
type Groups = SmallVec<[Group; 2]>;

/// A group's answer: allowed as a whole, and each key's verdict with whether it binds.
struct Charged {
    allowed: bool,
    keys: SmallVec<[(Verdict, bool); 2]>,
}

/// The decision path; `T` is how it reaches Redis ([`Backend`] in the service).
pub struct Decider<T: Transport = Backend> {
    backend: T,
    breaker: Breaker,
    /// For the breaker's log lines.
    breaker_silence: Duration,
    breaker_open_for: Duration,
    local: LocalLimits,
    deny_cache: DenyCache,
    deadline: Duration,
    metrics: Metrics,
    module_errors: ModuleErrorLog,
}

impl<T: Transport> Decider<T> {
    pub fn new(backend: T, redis: &RedisSettings, deny_cache_capacity: usize) -> Self {
        Decider {
            backend,
            breaker: Breaker::new(
                redis.breaker_failures,
                redis.breaker_open,
                redis.breaker_silence,
            ),
            breaker_silence: redis.breaker_silence,
            breaker_open_for: redis.breaker_open,
            local: LocalLimits::new(
                crate::decider::local_limits::DEFAULT_CAPACITY,
                redis.gateways,
            ),
            deny_cache: DenyCache::new(deny_cache_capacity),
            deadline: redis.deadline,
            metrics: Metrics::default(),
            module_errors: ModuleErrorLog::default(),
        }
    }

    /// Called when the rules change: a denial under the old rules may not hold any more.
    pub fn forget_denials(&self) {
        self.deny_cache.clear();
    }

    /// The counters: the gateway's, which the decider keeps as it counts its own work.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// How long one decision may wait for Redis (`deadline_ms`).
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    pub fn breaker_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// The limits decided in memory while Redis cannot (`on_redis_failure = "local"`).
    pub fn local(&self) -> &LocalLimits {
        &self.local
    }

    /// The backend, for the heartbeat.
    pub fn backend(&self) -> &T {
        &self.backend
    }

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
    pub async fn decide(&self, applying: &[Applied], lease_id: Option<&str>) -> Stacked {
        // A rule with `concurrency` applies alone (the rules are checked for that).
        if let [applied] = applying {
            if let Some(concurrency) = &applied.rule.concurrency {
                let fresh;
                let id = match lease_id {
                    Some(id) => id,
                    None => {
                        fresh = crate::lease::new_lease_id();
                        &fresh
                    }
                };
                return self.acquire(applied, concurrency, id).await;
            }
        }
        let mut outcomes: SmallVec<[RuleOutcome; 2]> = applying
            .iter()
            .map(|a| match a.rule.limit {
                Limit::Unlimited => RuleOutcome::Unlimited,
                _ => RuleOutcome::NotAsked,
            })
            .collect();
        let limited = || {
            applying
                .iter()
                .enumerate()
                .filter(|(_, a)| a.rule.limit != Limit::Unlimited)
        };
        if limited().next().is_none() {
            return Stacked {
                outcomes,
                end: End::Unlimited,
                lease: LeaseAnswer::NotTaken,
            };
        }
        // A denial still in force for any enforced key answers for the whole request; the
        // longest wait binds, as Redis would have chosen.
        let now = Instant::now();
        let cached = limited()
            .filter(|(_, a)| !a.rule.shadow && a.rule.deny_cache)
            .filter_map(|(i, a)| Some((i, self.deny_cache.check(&a.key, now)?)))
            .max_by_key(|(i, v)| (v.binding().retry_after_ms, std::cmp::Reverse(*i)));
        if let Some((binding, verdict)) = cached {
            outcomes[binding] = RuleOutcome::Denied {
                verdict,
                cached: true,
            };
            return Stacked {
                outcomes,
                end: End::Denied {
                    binding,
                    cached: true,
                },
                lease: LeaseAnswer::NotTaken,
            };
        }
        let deadline = tokio::time::Instant::now() + self.deadline;
        // Last group first, so that popping takes them in rule order.
        let mut groups = self.groups(applying, limited().map(|(i, _)| i));
        groups.reverse();
        while let Some(group) = groups.pop() {
            let mut late = None;
            let charged = match self.charge(applying, &group, deadline, &mut late).await {
                Ok(charged) => charged,
                Err(Failure::Error) if group.len() > 1 => {
                    // One rule's misconfiguration: each rule asked on its own names it, and
                    // fails open or closed as that rule says.
                    for &i in group.iter().rev() {
                        groups.push(smallvec::smallvec![i]);
                    }
                    continue;
                }
                Err(failure) => {
                    for &i in &group {
                        outcomes[i] = RuleOutcome::Failed(failure);
                    }
                    let closing = group
                        .iter()
                        .copied()
                        .find(|&i| applying[i].rule.on_failure.closes(failure));
                    // A hit Redis runs late must not count a request that is refused
                    // (closed) or decided by a local limit: it is given back when it lands.
                    if let Some(rule) = closing {
                        if let Some(late) = late.take() {
                            self.settle_late(late, applying, &group);
                        }
                        self.give_back(applying, &mut outcomes).await;
                        return Stacked {
                            outcomes,
                            end: End::Closed { rule, failure },
                            lease: LeaseAnswer::NotTaken,
                        };
                    }
                    let binding = self.decide_locally(applying, &group, failure, &mut outcomes);
                    let local = group
                        .iter()
                        .any(|&i| matches!(outcomes[i], RuleOutcome::Local { .. }));
                    if let Some(late) = late.take().filter(|_| local) {
                        self.settle_late(late, applying, &group);
                    }
                    if let Some(binding) = binding {
                        return self.denied(applying, outcomes, binding).await;
                    }
                    continue;
                }
            };
            let mut binding = None;
            for (&i, (verdict, is_binding)) in group.iter().zip(charged.keys) {
                let rule = &applying[i].rule;
                outcomes[i] = if rule.shadow && !verdict.allowed() {
                    RuleOutcome::ShadowDenied
                } else if !verdict.allowed() {
                    // Hits given back after the fact (a rule that counts by status, or one
                    // charged apart from a rule in another slot) make a denial made while
                    // they were outstanding one that may not last: not cached.
                    let given_back = rule.counts_by_status()
                        || (rule.stacks_across_subjects && self.backend.is_cluster());
                    // A denial of more than one unit says nothing of a request of one; nor
                    // does one of a key the call holds twice (Envoy descriptors repeated),
                    // whose denial counted the call's own other hits, none of them stored.
                    let key = &applying[i].key;
                    let one_unit = applying[i].cost.is_none_or(|c| c == 1)
                        && applying.iter().filter(|a| &a.key == key).count() == 1;
                    if !given_back && one_unit && rule.deny_cache {
                        self.deny_cache
                            .remember(&applying[i].key, &verdict, Instant::now());
                    }
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
            if let Some(binding) = binding {
                return self.denied(applying, outcomes, binding).await;
            }
        }
        Stacked {
            outcomes,
            end: End::Allowed,
            lease: LeaseAnswer::NotTaken,
        }
    }

    /// The decision when the rule at `binding` denied: whatever was counted for the
    /// request is given back first.
    async fn denied(
        &self,
        applying: &[Applied],
        mut outcomes: SmallVec<[RuleOutcome; 2]>,
        binding: usize,
    ) -> Stacked {
        self.give_back(applying, &mut outcomes).await;
        Stacked {
            outcomes,
            end: End::Denied {
                binding,
                cached: false,
            },
            lease: LeaseAnswer::NotTaken,
        }
    }

    /// Waits in the background for the answer of a charge that missed its deadline, and
    /// gives it back if Redis counted it: the request it was for is refused, or counted by
    /// a local limit. A correct login answered 503 during a stall is thus not counted by
    /// the hit Redis runs when it resumes (three of those would lock the user out). An
    /// answer that never comes (the connection fails) leaves it as it is.
    fn settle_late(&self, late: Late, applying: &[Applied], group: &[usize]) {
        let refund = match group {
            [i] => hit_cmd("RL.REFUND", &applying[*i]),
            _ => multi_cmd("RL.MREFUND", applying, group),
        };
        let keys = group.len();
        let route_key = applying[group[0]].key.clone();
        let backend = self.backend.clone();
        tokio::spawn(async move {
            let Ok(reply) = late.await else { return };
            let counted = match keys {
                1 => Verdict::from_reply(&reply).map(|v| v.allowed()),
                n => MultiVerdict::from_reply(&reply, n).map(|m| m.allowed),
            };
            if counted == Some(true) {
                let call = backend.call(&refund, Some(&route_key));
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
        let now_ms = crate::decider::local_limits::now_ms();
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

    /// Gives back to its local limit what a `Local` outcome counted (the request is not
    /// served, or its status does not count).
    pub fn refund_locally(&self, applied: &Applied) {
        let now_ms = crate::decider::local_limits::now_ms();
        self.local
            .refund(&applied.rule, &applied.key, applied.cost, now_ms);
    }

    /// The limited rules `indices` in groups that one call can charge, in rule order of
    /// their first rule: an enforced rule joins the first group whose keys share its slot
    /// (on one server, any group of enforced rules); a shadow rule is a group of its own,
    /// since its denial must not deny the others.
    fn groups(&self, applying: &[Applied], indices: impl Iterator<Item = usize>) -> Groups {
        let cluster = self.backend.is_cluster();
        let mut groups = Groups::new();
        for i in indices {
            let rule = &applying[i].rule;
            let joins = (!rule.shadow)
                .then(|| {
                    // At most MAX_APPLYING keys in one call, the most RL.MHIT takes.
                    groups
                        .iter_mut()
                        .find(|g| !applying[g[0]].rule.shadow && may_join(applying, g, i, cluster))
                })
                .flatten();
            match joins {
                Some(group) => group.push(i),
                None => groups.push(smallvec::smallvec![i]),
            }
        }
        groups
    }

    /// One `RL.HIT` for a group of one, else one `RL.MHIT`: every key's verdict, each
    /// flagged when it is the binding key. A call unanswered by `deadline` is left in
    /// `late`, still running.
    async fn charge(
        &self,
        applying: &[Applied],
        group: &[usize],
        deadline: tokio::time::Instant,
        late: &mut Option<Late>,
    ) -> Result<Charged, Failure> {
        if let [i] = group {
            let verdict = self
                .call("RL.HIT", &applying[*i], deadline, Some(late))
                .await?;
            return Ok(Charged {
                allowed: verdict.allowed(),
                keys: SmallVec::from_elem((verdict, true), 1),
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
        })
    }

    /// Gives back every hit of this decision that is still counted (the request is not
    /// served after all), in the groups it was charged in; each rule then shows what it
    /// holds after the refund. A refund that fails leaves the hit counted: the strict side.
    async fn give_back(&self, applying: &[Applied], outcomes: &mut [RuleOutcome]) {
        for (i, outcome) in outcomes.iter_mut().enumerate() {
            if let RuleOutcome::Local { verdict, .. } = outcome {
                if verdict.allowed() {
                    self.refund_locally(&applying[i]);
                    *outcome = RuleOutcome::Uncounted(verdict.clone());
                }
            }
        }
        let charged = outcomes
            .iter()
            .enumerate()
            .filter(|(_, o)| matches!(o, RuleOutcome::Allowed(_)))
            .map(|(i, _)| i)
            .collect::<SmallVec<[usize; 4]>>();
        if charged.is_empty() {
            return;
        }
        for group in self.groups(applying, charged.into_iter()) {
            let window = group
                .iter()
                .map(|&i| applying[i].rule.longest_window())
                .max()
                .unwrap_or_default();
            let after: Option<SmallVec<[Verdict; 2]>> = if let [i] = group[..] {
                let cmd = hit_cmd("RL.REFUND", &applying[i]);
                self.refund_call(cmd, &applying[i].key, window)
                    .await
                    .and_then(|v| Verdict::from_reply(&v))
                    .map(|v| SmallVec::from_elem(v, 1))
            } else {
                let cmd = multi_cmd("RL.MREFUND", applying, &group);
                self.refund_call(cmd, &applying[group[0]].key, window)
                    .await
                    .and_then(|v| MultiVerdict::from_reply(&v, group.len()))
                    .map(|m| m.keys.into_iter().collect())
            };
            for (k, &i) in group.iter().enumerate() {
                let RuleOutcome::Allowed(charged) = &outcomes[i] else {
                    continue;
                };
                let shown = match after.as_ref().and_then(|a| a.get(k)) {
                    Some(verdict) => {
                        self.metrics.refund(&applying[i].rule.name);
                        verdict.clone()
                    }
                    None => charged.clone(),
                };
                outcomes[i] = RuleOutcome::Uncounted(shown);
            }
        }
    }

    /// Gives back what [`Decider::decide`] charged to `key` for `rule`, when the response's
    /// status does not count; the budget after the refund, when Redis answered within the
    /// deadline. Unanswered by then, the refund goes on in the background (see
    /// `refund_call`), so a correct login answered during a stall is still given
    /// back.
    pub async fn refund(&self, rule: &Arc<Rule>, key: &str) -> Option<Verdict> {
        let applied = Applied {
            rule: rule.clone(),
            key: key.to_owned(),
            cost: None,
        };
        let cmd = hit_cmd("RL.REFUND", &applied);
        let reply = self.refund_call(cmd, key, rule.longest_window()).await?;
        let verdict = Verdict::from_reply(&reply);
        if verdict.is_some() {
            self.metrics.refund(&rule.name);
        }
        verdict
    }

    /// Sends a refund in a task of its own, past the breaker (a refund skipped locks out
    /// the client whose hit it was), and waits for its answer up to the deadline. The task
    /// goes on until Redis answers or `window` is over (the hit has expired by then):
    /// when the connection fails or the server cannot take the call now, it sends it again.
    /// A call that went out unanswered is never sent again (Redis may still run it, and a
    /// refund run twice would give back a hit that was not this request's).
    async fn refund_call(
        &self,
        cmd: redis::Cmd,
        route_key: &str,
        window: Duration,
    ) -> Option<redis::Value> {
        let (answered, answer) = tokio::sync::oneshot::channel();
        let backend = self.backend.clone();
        let route_key = route_key.to_owned();
        let give_up =
            tokio::time::Instant::now() + window.clamp(MIN_RELEASE_DEADLINE, MAX_REFUND_RETRY);
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(20);
            loop {
                let call = backend.call(&cmd, Some(&route_key));
                match tokio::time::timeout_at(give_up, call).await {
                    Ok(Ok(value)) => {
                        let _ = answered.send(value);
                        return;
                    }
                    // Not sent, or refused before it ran: safe to send again.
                    Ok(Err(error))
                        if matches!(
                            classify(&error),
                            Failure::Connection | Failure::Unavailable
                        ) =>
                    {
                        if tokio::time::Instant::now() + pause >= give_up {
                            log_throttled!(
                                Kind::Refund,
                                "a refund was not answered before its window ended: {error}"
                            );
                            return;
                        }
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                    _ => return,
                }
            }
        });
        tokio::time::timeout(self.deadline, answer).await.ok()?.ok()
    }

    /// Looks at (`RL.PEEK`) or gives back to (`RL.REFUND`) every key of `applying`, each
    /// with its own cost, under one deadline, through the breaker: keys in one slot (on
    /// one server: all of them) in one `RL.MPEEK` / `RL.MREFUND`. Each rule's answer, in
    /// order; a rule without limits answers `Ok(None)`. The deny cache is not asked: a
    /// look must say what Redis holds, and a refund changes it (so the denials it
    /// remembers for these keys are forgotten).
    pub async fn look(
        &self,
        applying: &[Applied],
        look: Look,
    ) -> SmallVec<[Result<Option<Verdict>, Failure>; 2]> {
        let mut answers: SmallVec<[Result<Option<Verdict>, Failure>; 2]> =
            applying.iter().map(|_| Ok(None)).collect();
        let (one, many) = match look {
            Look::Peek => ("RL.PEEK", "RL.MPEEK"),
            Look::Refund => ("RL.REFUND", "RL.MREFUND"),
        };
        let cluster = self.backend.is_cluster();
        let mut groups = Groups::new();
        for (i, a) in applying.iter().enumerate() {
            if a.rule.limit == Limit::Unlimited {
                continue;
            }
            if look == Look::Refund {
                self.deny_cache.forget(&a.key);
            }
            let joins = groups
                .iter_mut()
                .find(|g| may_join(applying, g, i, cluster));
            match joins {
                Some(group) => group.push(i),
                None => groups.push(smallvec::smallvec![i]),
            }
        }
        let deadline = tokio::time::Instant::now() + self.deadline;
        for group in groups {
            let result: Result<SmallVec<[Verdict; 2]>, Failure> = if let [i] = group[..] {
                self.call(one, &applying[i], deadline, None)
                    .await
                    .map(|v| SmallVec::from_elem(v, 1))
            } else {
                match self
                    .call_multi(many, applying, &group, deadline, None)
                    .await
                {
                    Ok(multi) => Ok(multi.keys.into_iter().collect()),
                    Err(Failure::Error) => {
                        // Each on its own names the rule at fault.
                        let mut each = SmallVec::new();
                        let mut failed = None;
                        for &i in &group {
                            match self.call(one, &applying[i], deadline, None).await {
                                Ok(v) => each.push(v),
                                Err(f) => {
                                    failed = Some(f);
                                    break;
                                }
                            }
                        }
                        match failed {
                            Some(f) => Err(f),
                            None => Ok(each),
                        }
                    }
                    Err(failure) => Err(failure),
                }
            };
            match result {
                Ok(verdicts) => {
                    for (&i, verdict) in group.iter().zip(verdicts) {
                        if look == Look::Refund && verdict.allowed() {
                            self.metrics.refund(&applying[i].rule.name);
                        }
                        answers[i] = Ok(Some(verdict));
                    }
                }
                Err(failure) => {
                    for &i in &group {
                        answers[i] = Err(failure);
                    }
                }
            }
        }
        answers
    }

    /// Takes a lease `id` for `applied` (`RL.ACQUIRE key max ttl [tiers] ID id`, its limits
    /// counted in the same call) under the deadline, through the breaker. The deny cache is
    /// neither asked nor told: a slot can free up at any moment.
    async fn acquire(&self, applied: &Applied, concurrency: &Concurrency, id: &str) -> Stacked {
        let rule = &applied.rule;
        let deadline = tokio::time::Instant::now() + self.deadline;
        let mut cmd = redis::cmd("RL.ACQUIRE");
        cmd.arg(&applied.key)
            .arg(&concurrency.acquire_args)
            .arg("ID")
            .arg(id);
        // Routed by the key itself: the cluster client's guess for a module command is
        // not to be relied on.
        let reply = match self.send(cmd, Some(&applied.key), deadline, None).await {
            Ok(value) => LeaseVerdict::from_reply(&value).ok_or_else(|| {
                self.module_error("RL.ACQUIRE", rule, "a reply that is not a lease decision");
                Failure::Error
            }),
            Err((failure, error)) => {
                if let Some(error) = error {
                    self.module_error("RL.ACQUIRE", rule, &error);
                }
                Err(failure)
            }
        };
        let (outcome, end, lease) = match reply {
            Ok(lease) => {
                let verdict = lease.as_verdict();
                match lease.id {
                    Some(_) => {
                        self.metrics.lease_acquired(&rule.name);
                        (
                            RuleOutcome::Allowed(verdict),
                            End::Allowed,
                            LeaseAnswer::Taken,
                        )
                    }
                    None => {
                        self.metrics.lease_denied(&rule.name);
                        let denied = RuleOutcome::Denied {
                            verdict,
                            cached: false,
                        };
                        let end = End::Denied {
                            binding: 0,
                            cached: false,
                        };
                        (denied, end, LeaseAnswer::NotTaken)
                    }
                }
            }
            Err(failure) => {
                // A call that went out unanswered may still run (Redis stopped for a moment
                // runs it when it resumes): its lease would hold a slot for lease_ttl.
                let lease = match failure {
                    Failure::Timeout | Failure::Connection => LeaseAnswer::Unknown,
                    Failure::Unavailable | Failure::Error | Failure::Breaker => {
                        LeaseAnswer::NotTaken
                    }
                };
                match rule.on_failure.closes(failure) {
                    true => (
                        RuleOutcome::Failed(failure),
                        End::Closed { rule: 0, failure },
                        lease,
                    ),
                    // Open: forwarded holding no lease.
                    false => (RuleOutcome::Failed(failure), End::Allowed, lease),
                }
            }
        };
        Stacked {
            outcomes: SmallVec::from_elem(outcome, 1),
            end,
            lease,
        }
    }

    /// Gives back the lease `id` of `rule` on `key` (`RL.RELEASE`); when Redis does not
    /// answer, a lease still held ends by its `lease_ttl`.
    ///
    /// Sent even while the breaker is open: a release skipped would hold its slot for the
    /// whole lease_ttl after Redis is back, locking clients out, and it costs nothing on
    /// the request path. Releases cannot pile up: each is one per lease, and no lease is
    /// taken while the breaker is open.
    pub async fn release(&self, rule: &Rule, key: &str, id: &str) -> Released {
        // Off the request path (the response is already sent), so it can wait longer than
        // a decision may: a release given up on holds the slot for the whole lease_ttl.
        let deadline = tokio::time::Instant::now() + self.deadline.max(MIN_RELEASE_DEADLINE);
        let mut cmd = redis::cmd("RL.RELEASE");
        cmd.arg(key).arg(id);
        match self.round_trip(cmd, Some(key), deadline, None).await {
            Ok(redis::Value::Int(1)) => Released::Freed,
            Ok(redis::Value::Int(_)) => Released::NotHeld,
            Ok(_) => {
                self.release_error("RL.RELEASE", rule, "a reply that is not 0 or 1");
                Released::Failed
            }
            Err((_, Some(error))) => {
                self.release_error("RL.RELEASE", rule, &error);
                Released::Failed
            }
            Err((_, None)) => Released::Failed,
        }
    }

    /// Renews the lease `id` of `rule` on `key` for `ttl_ms` from now (`RL.RENEW`), like a
    /// release whatever the breaker says: `Some(true)` if it is still held, `Some(false)`
    /// if it is gone, `None` when Redis did not answer in time.
    pub async fn renew(&self, rule: &Rule, key: &str, id: &str, ttl_ms: u64) -> Option<bool> {
        let deadline = tokio::time::Instant::now() + self.deadline.max(MIN_RELEASE_DEADLINE);
        let mut cmd = redis::cmd("RL.RENEW");
        cmd.arg(key).arg(id).arg(format!("{ttl_ms}ms"));
        match self.round_trip(cmd, Some(key), deadline, None).await {
            Ok(redis::Value::Int(held)) => Some(held == 1),
            Ok(_) => {
                self.release_error("RL.RENEW", rule, "a reply that is not 0 or 1");
                None
            }
            Err((_, Some(error))) => {
                self.release_error("RL.RENEW", rule, &error);
                None
            }
            Err((_, None)) => None,
        }
    }

    /// Counts an error reply to `RL.RELEASE` or `RL.RENEW` as the rule's module error and logs it,
    /// rate-limited per rule like the others.
    fn release_error(&self, command: &str, rule: &Rule, error: &str) {
        self.metrics.module_error(&rule.name);
        if let Some(unlogged) = self.module_errors.record(&rule.name, Instant::now()) {
            log!(
                "rule '{}': {command} answered an error; the lease ends by its lease_ttl: \
                 {error}{}",
                rule.name,
                crate::logging::LeftOut(unlogged)
            );
        }
    }

    /// Counts an error reply of `rule`'s call and logs it, rate-limited per rule.
    fn module_error(&self, command: &str, rule: &Rule, error: &str) {
        self.metrics.module_error(&rule.name);
        if let Some(unlogged) = self.module_errors.record(&rule.name, Instant::now()) {
            let meaning = if rule.on_failure.closes(Failure::Error) {
                "closed: answering 503"
            } else {
                "open: letting requests through"
            };
            let more = crate::logging::LeftOut(unlogged);
            log!(
                "rule '{}': {command} answered an error, the rule is misconfigured \
                 (on_module_error = {meaning}): {error}{more}",
                rule.name
            );
        }
    }

    /// `command key args...` before `deadline`, through the breaker.
    async fn call(
        &self,
        command: &str,
        applied: &Applied,
        deadline: tokio::time::Instant,
        late: Option<&mut Option<Late>>,
    ) -> Result<Verdict, Failure> {
        let rule = &applied.rule;
        let cmd = hit_cmd(command, applied);
        match self.send(cmd, None, deadline, late).await {
            Ok(value) => Verdict::from_reply(&value).ok_or_else(|| {
                self.module_error(command, rule, "a reply that is not a decision");
                Failure::Error
            }),
            Err((failure, error)) => {
                if let Some(error) = error {
                    self.module_error(command, rule, &error);
                }
                Err(failure)
            }
        }
    }

    /// `command numkeys key ... SPEC args ...` for the rules `group` of `applying`, before
    /// `deadline`. An error reply is not logged here: the caller asks each rule on its own,
    /// which names the one at fault.
    async fn call_multi(
        &self,
        command: &str,
        applying: &[Applied],
        group: &[usize],
        deadline: tokio::time::Instant,
        late: Option<&mut Option<Late>>,
    ) -> Result<MultiVerdict, Failure> {
        let cmd = multi_cmd(command, applying, group);
        let first = &applying[group[0]].key;
        let value = self
            .send(cmd, Some(first), deadline, late)
            .await
            .map_err(|(failure, _)| failure)?;
        MultiVerdict::from_reply(&value, group.len()).ok_or_else(|| {
            let rule = &applying[group[0]].rule;
            self.module_error(command, rule, "a reply that is not a decision of every key");
            Failure::Error
        })
    }

    /// Sends `cmd` (in a cluster to the owner of `route_key`, when given) before
    /// `deadline`, through the breaker; a failure comes with the text of an error reply.
    async fn send(
        &self,
        cmd: redis::Cmd,
        route_key: Option<&str>,
        deadline: tokio::time::Instant,
        late: Option<&mut Option<Late>>,
    ) -> Result<redis::Value, (Failure, Option<String>)> {
        if !self.breaker.allows(Instant::now()) {
            return Err((Failure::Breaker, None));
        }
        self.round_trip(cmd, route_key, deadline, late).await
    }

    /// `cmd` before `deadline`, whatever the breaker says; what came of it is reported to
    /// the breaker.
    ///
    /// With `late`, a call unanswered by `deadline` is not dropped but handed back there,
    /// still running, so that the caller can learn what Redis did with it.
    async fn round_trip(
        &self,
        cmd: redis::Cmd,
        route_key: Option<&str>,
        deadline: tokio::time::Instant,
        late: Option<&mut Option<Late>>,
    ) -> Result<redis::Value, (Failure, Option<String>)> {
        let started = Instant::now();
        let reply = match (late, route_key) {
            (Some(late), _) => {
                let backend = self.backend.clone();
                let key = route_key.map(str::to_owned);
                let mut call: Late =
                    Box::pin(async move { backend.call(&cmd, key.as_deref()).await });
                let mut reply = tokio::time::timeout_at(deadline, &mut call).await;
                if reply.is_err() && self.breaker.answered_since(started) {
                    // Redis answers other calls: this one waited in the gateway's own
                    // queues (a client's flood loads it), not on a stalled Redis. One more
                    // deadline, rather than a failure that a load can cause at will.
                    reply = tokio::time::timeout(self.deadline, &mut call).await;
                }
                if reply.is_err() {
                    *late = Some(call);
                }
                reply
            }
            (None, route_key) => {
                tokio::time::timeout_at(deadline, self.backend.call(&cmd, route_key)).await
            }
        };
        let mut text = None;
        let failure = match reply {
            Err(_elapsed) => Failure::Timeout,
            Ok(Ok(value)) => {
                self.metrics.redis_latency(started.elapsed());
                self.answered();
                return Ok(value);
            }
            Ok(Err(error)) => {
                let failure = classify(&error);
                if failure != Failure::Connection {
                    self.metrics.redis_latency(started.elapsed());
                }
                if failure == Failure::Error {
                    text = Some(error.to_string());
                }
                failure
            }
        };
        // An error reply (a missing policy, say) is one rule's problem, not Redis's: it
        // does not count towards opening the breaker for every rule.
        if failure == Failure::Error {
            self.answered();
        } else if self.breaker.failed(started, Instant::now()) == Transition::Opened {
            log!(
                "circuit breaker open: Redis answered nothing for {} ms or more and calls \
                 kept failing ({}); for the next {} ms rules decide as their \
                 on_redis_failure says (local limits at 1/{} of each limit, open, or 503), \
                 then one request probes",
                self.breaker_silence.as_millis(),
                failure.label(),
                self.breaker_open_for.as_millis(),
                self.local.share()
            );
        }
        Err((failure, text))
    }

    /// Redis answered a call: the breaker hears it (and closes, if it was open), and what
    /// local limits admitted meanwhile is counted in Redis.
    fn answered(&self) {
        if self.breaker.succeeded(Instant::now()) == Transition::Closed {
            log!("circuit breaker closed: Redis answers again; rules share its budgets again");
        }
        self.write_back_local();
    }

    /// Counts in Redis, in the background, what local limits admitted since the last time
    /// (see `write_back`); nothing to do costs one atomic read. Called when a decision is
    /// answered, and by the heartbeat, so that every gateway of a fleet writes back within
    /// one beat of Redis's return, whatever its breaker says.
    pub fn write_back_local(&self) {
        if let Some(unsynced) = self
            .local
            .take_unsynced(crate::decider::local_limits::now_ms())
        {
            tokio::spawn(write_back(self.backend.clone(), unsynced));
        }
    }
}

/// Counts in Redis what local limits admitted while it could not decide, so that its
/// budgets do not start afresh on top of them (no burst when Redis is back). `RL.HIT`
/// counts all of a cost or nothing: a cost denied is tried again at half, and what is left
/// after an allowed part is tried again, so what the budget still holds (up to the units)
/// is counted, in about log2(units) calls.
async fn write_back<T: Transport>(
    backend: T,
    unsynced: Vec<crate::decider::local_limits::Unsynced>,
) {
    for item in unsynced {
        let mut left = item.units;
        let mut trying = left;
        while left > 0 && trying > 0 {
            let applied = Applied {
                rule: item.rule.clone(),
                key: item.key.clone(),
                cost: Some(trying),
            };
            let cmd = hit_cmd("RL.HIT", &applied);
            let call = backend.call(&cmd, Some(&item.key));
            match tokio::time::timeout(MIN_RELEASE_DEADLINE, call).await {
                Ok(Ok(reply)) => match Verdict::from_reply(&reply) {
                    Some(verdict) if verdict.allowed() => {
                        left -= trying;
                        trying = trying.min(left);
                    }
                    Some(_) => trying /= 2,
                    None => break,
                },
                _ => break,
            }
        }
    }
}

/// `command key args...` for one applying rule.
fn hit_cmd(command: &str, applied: &Applied) -> redis::Cmd {
    let mut cmd = redis::cmd(command);
    cmd.arg(&applied.key);
    applied.push_args(&mut cmd);
    cmd
}

/// `command numkeys key ... SPEC args ...` for the rules `group` of `applying`.
fn multi_cmd(command: &str, applying: &[Applied], group: &[usize]) -> redis::Cmd {
    let mut cmd = redis::cmd(command);
    cmd.arg(group.len());
    for &i in group {
        cmd.arg(&applying[i].key);
    }
    for &i in group {
        cmd.arg("SPEC");
        applying[i].push_args(&mut cmd);
    }
    cmd
}

/// Whether `applying[i]` may join `group` in one multi-key call: fewer than
/// [`MAX_APPLYING`] keys (the most RL.MHIT takes), in the same slot on a cluster, and not
/// its key again. The module refuses a key named twice (both mentions would be decided
/// from the same state), and Envoy descriptors repeated in one request name one key twice:
/// in calls of their own they are counted one after the other, and given back so.
fn may_join(applying: &[Applied], group: &[usize], i: usize, cluster: bool) -> bool {
    let key = &applying[i].key;
    group.len() < MAX_APPLYING
        && (!cluster || same_slot(&applying[group[0]].key, key))
        && group.iter().all(|&j| &applying[j].key != key)
}

#[cfg(test)]
mod tests;
