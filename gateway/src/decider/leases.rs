//! A `concurrency` rule's lease, as decisions: taking it (`RL.ACQUIRE`, its limits counted
//! in the same call), renewing it (`RL.RENEW`) and giving it back (`RL.RELEASE`). Holding
//! one while a request is served is [`super::lease_guard`]'s job.

use super::MIN_RELEASE_DEADLINE;
use super::{Applied, Decider, End, LeaseAnswer, Released, RuleOutcome, Stacked, Transport};
use crate::failure::Failure;
use crate::logging::log;
use crate::rules::{Concurrency, Rule};
use crate::verdict::LeaseVerdict;
use smallvec::SmallVec;
use std::time::Instant;

impl<T: Transport> Decider<T> {
    /// Takes a lease `id` for `applied` (`RL.ACQUIRE key max ttl [tiers] ID id`, its limits
    /// counted in the same call) under the deadline, through the breaker. The deny cache is
    /// neither asked nor told: a slot can free up at any moment.
    pub(super) async fn acquire(
        &self,
        applied: &Applied,
        concurrency: &Concurrency,
        id: &str,
    ) -> Stacked {
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
                let reason = "a reply that is not a lease decision";
                self.module_error("RL.ACQUIRE", rule, &applied.key, reason);
                Failure::Error
            }),
            Err((failure, error)) => {
                if let Some(error) = error {
                    self.module_error("RL.ACQUIRE", rule, &applied.key, &error);
                }
                Err(failure)
            }
        };
        let (outcome, end, lease) = match reply {
            Ok(lease) => self.acquired(rule, lease),
            Err(failure) => not_acquired(rule, failure),
        };
        Stacked {
            outcomes: SmallVec::from_elem(outcome, 1),
            end,
            lease,
        }
    }

    /// What `RL.ACQUIRE` answered, as the rule's outcome, the end and the lease.
    fn acquired(&self, rule: &Rule, lease: LeaseVerdict) -> (RuleOutcome, End, LeaseAnswer) {
        let verdict = lease.as_verdict();
        match lease.id {
            Some(_) => {
                self.metrics.lease_acquired(&rule.name);
                let allowed = RuleOutcome::Allowed(verdict);
                (allowed, End::Allowed, LeaseAnswer::Taken)
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

    /// Gives back the lease `id` of `rule` on `key` (`RL.RELEASE`); when Redis does not
    /// answer, a lease still held ends by its `lease_ttl`.
    ///
    /// Sent even while the breaker is open: a release skipped would hold its slot for the
    /// whole lease_ttl after Redis is back, locking clients out, and it costs nothing on
    /// the request path. Releases cannot pile up: each is one per lease, and no lease is
    /// taken while the breaker is open.
    pub(crate) async fn release(&self, rule: &Rule, key: &str, id: &str) -> Released {
        // Off the request path (the response is already sent), so it can wait longer than
        // a decision may: a release given up on holds the slot for the whole lease_ttl.
        let deadline = tokio::time::Instant::now() + self.deadline.max(MIN_RELEASE_DEADLINE);
        let mut cmd = redis::cmd("RL.RELEASE");
        cmd.arg(key).arg(id);
        match self.round_trip(cmd, Some(key), deadline, None).await {
            Ok(redis::Value::Int(1)) => Released::Freed,
            Ok(redis::Value::Int(_)) => Released::NotHeld,
            Ok(_) => {
                self.release_error("RL.RELEASE", rule, key, "a reply that is not 0 or 1");
                Released::Failed
            }
            Err((_, Some(error))) => {
                self.release_error("RL.RELEASE", rule, key, &error);
                Released::Failed
            }
            Err((_, None)) => Released::Failed,
        }
    }

    /// Renews the lease `id` of `rule` on `key` for `ttl_ms` from now (`RL.RENEW`), like a
    /// release whatever the breaker says: `Some(true)` if it is still held, `Some(false)`
    /// if it is gone, `None` when Redis did not answer in time.
    pub(crate) async fn renew(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        ttl_ms: u64,
    ) -> Option<bool> {
        let deadline = tokio::time::Instant::now() + self.deadline.max(MIN_RELEASE_DEADLINE);
        let mut cmd = redis::cmd("RL.RENEW");
        cmd.arg(key).arg(id).arg(format!("{ttl_ms}ms"));
        match self.round_trip(cmd, Some(key), deadline, None).await {
            Ok(redis::Value::Int(held)) => Some(held == 1),
            Ok(_) => {
                self.release_error("RL.RENEW", rule, key, "a reply that is not 0 or 1");
                None
            }
            Err((_, Some(error))) => {
                self.release_error("RL.RENEW", rule, key, &error);
                None
            }
            Err((_, None)) => None,
        }
    }

    /// Counts an error reply to `RL.RELEASE` or `RL.RENEW` as the rule's module error and logs it,
    /// rate-limited per rule like the others.
    fn release_error(&self, command: &str, rule: &Rule, key: &str, error: &str) {
        self.metrics.module_error(&rule.name);
        if let Some(unlogged) = self.module_errors.record(&rule.name, Instant::now()) {
            log!(
                rule = rule.name,
                key_hash = crate::logging::key_hash(key),
                failure = crate::failure::Failure::Error.label();
                "rule '{}': {command} answered an error; the lease ends by its lease_ttl: \
                 {error}{}",
                rule.name,
                crate::logging::LeftOut(unlogged)
            );
        }
    }
}

/// What an `RL.ACQUIRE` that did not decide (`failure`) comes to: the rule fails open
/// (forwarded holding no lease) or closed, as it says.
fn not_acquired(rule: &Rule, failure: Failure) -> (RuleOutcome, End, LeaseAnswer) {
    // A call that went out unanswered may still run (Redis stopped for a moment runs it
    // when it resumes): its lease would hold a slot for lease_ttl.
    let lease = match failure {
        Failure::Timeout | Failure::Connection => LeaseAnswer::Unknown,
        Failure::Unavailable | Failure::Error | Failure::Breaker => LeaseAnswer::NotTaken,
    };
    let end = match rule.on_failure.closes(failure) {
        true => End::Closed { rule: 0, failure },
        false => End::Allowed,
    };
    (RuleOutcome::Failed(failure), end, lease)
}
