//! Giving back what a request was charged: a whole decision's hits when a later rule
//! denied or closed, one rule's hit when the response's status does not count, and what a
//! local limit counted. A refund goes past the breaker (skipped, it would lock out the
//! client whose hit it was) and is retried, in the background, while Redis cannot take it.

use super::commands::{group_cmd, hit_cmd};
use super::groups::{Pending, Shadow};
use super::redis::classify;
use super::{Applied, Decider, RuleOutcome, Transport, MIN_RELEASE_DEADLINE};
use crate::failure::Failure;
use crate::logging::{log_throttled, Kind};
use crate::rules::Rule;
use crate::verdict::{MultiVerdict, Verdict};
use smallvec::SmallVec;
use std::sync::Arc;
use std::time::Duration;

/// The longest a refund is retried, whatever the rule's window: bounds the tasks an outage
/// can leave waiting.
const MAX_REFUND_RETRY: Duration = Duration::from_secs(600);

impl<T: Transport> Decider<T> {
    /// Gives back what [`Decider::decide`] charged to `key` for `rule`, when the response's
    /// status does not count; the budget after the refund, when Redis answered within the
    /// deadline. Unanswered by then, the refund goes on in the background (see
    /// `refund_call`), so a correct login answered during a stall is still given
    /// back.
    pub(crate) async fn refund(&self, rule: &Arc<Rule>, key: &str) -> Option<Verdict> {
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

    /// Gives back to its local limit what a `Local` outcome counted (the request is not
    /// served, or its status does not count).
    pub(crate) fn refund_locally(&self, applied: &Applied) {
        let now_ms = super::local_limits::now_ms();
        self.local
            .refund(&applied.rule, &applied.key, applied.cost, now_ms);
    }

    /// Gives back every hit of this decision that is still counted (the request is not
    /// served after all), in the groups it was charged in; each rule then shows what it
    /// holds after the refund. A refund that fails leaves the hit counted: the strict side.
    pub(super) async fn give_back(&self, applying: &[Applied], outcomes: &mut [RuleOutcome]) {
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
        let cluster = self.backend.is_cluster();
        for group in Pending::new(applying, charged.into_iter(), cluster, Shadow::Apart) {
            let after = self.refund_group(applying, &group).await;
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

    /// `RL.REFUND` (one key) or `RL.MREFUND` for the rules `group` of `applying`: what each
    /// holds after it, when Redis answered in time.
    async fn refund_group(
        &self,
        applying: &[Applied],
        group: &[usize],
    ) -> Option<SmallVec<[Verdict; 2]>> {
        let window = group
            .iter()
            .map(|&i| applying[i].rule.longest_window())
            .max()
            .unwrap_or_default();
        let cmd = group_cmd("RL.REFUND", "RL.MREFUND", applying, group);
        let reply = self
            .refund_call(cmd, &applying[group[0]].key, window)
            .await?;
        match group.len() {
            1 => Verdict::from_reply(&reply).map(|v| SmallVec::from_elem(v, 1)),
            n => MultiVerdict::from_reply(&reply, n).map(|m| m.keys.into_iter().collect()),
        }
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
                                key_hash = crate::logging::key_hash(&route_key),
                                failure = classify(&error).label();
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
}
