//! One decision: the deny cache, the circuit breaker, then RL.HIT under the deadline.
//! Whatever goes wrong with Redis becomes a [`Failure`], never an error for the client:
//! the caller lets the request through or, on a fail-closed route, answers 503.

use crate::backend::{classify, Backend};
use crate::breaker::Breaker;
use crate::config::RedisSettings;
use crate::deny_cache::DenyCache;
use crate::failure::Failure;
use crate::logging::log;
use crate::metrics::Metrics;
use crate::module_errors::ModuleErrorLog;
use crate::rules::{Limit, Rule};
use crate::verdict::Verdict;
use std::time::{Duration, Instant};

pub enum Decision {
    /// The rule has no limits: nothing to ask.
    Unlimited,
    Allowed(Verdict),
    /// `cached`: answered from the deny cache, without Redis.
    Denied {
        verdict: Verdict,
        cached: bool,
    },
    /// A shadow rule would have denied; the request goes through.
    ShadowDenied,
    Failed(Failure),
}

pub struct Decider {
    backend: Backend,
    breaker: Breaker,
    deny_cache: DenyCache,
    deadline: Duration,
    metrics: Metrics,
    module_errors: ModuleErrorLog,
}

impl Decider {
    pub fn new(backend: Backend, redis: &RedisSettings, deny_cache_capacity: usize) -> Self {
        Decider {
            backend,
            breaker: Breaker::new(redis.breaker_failures, redis.breaker_open),
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

    pub fn breaker_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// Charges one request of `rule` to `key`.
    pub async fn hit(&self, rule: &Rule, key: &str) -> Decision {
        if rule.limit == Limit::Unlimited {
            return Decision::Unlimited;
        }
        if !rule.shadow {
            if let Some(verdict) = self.deny_cache.check(key, Instant::now()) {
                return Decision::Denied {
                    verdict,
                    cached: true,
                };
            }
        }
        let verdict = match self.call("RL.HIT", rule, key).await {
            Ok(verdict) => verdict,
            Err(failure) => return Decision::Failed(failure),
        };
        if verdict.shadow_denied || (rule.shadow && !verdict.allowed()) {
            Decision::ShadowDenied
        } else if verdict.allowed() {
            Decision::Allowed(verdict)
        } else {
            // A rule that counts by status gives hits back after the fact: a denial made
            // while others' hits were outstanding may not last, so it is not cached.
            if !rule.counts_by_status() {
                self.deny_cache.remember(key, &verdict, Instant::now());
            }
            Decision::Denied {
                verdict,
                cached: false,
            }
        }
    }

    /// Gives back what [`Decider::hit`] charged, when the response's status does not count;
    /// the budget after the refund. A failure leaves the hit charged (the strict side).
    pub async fn refund(&self, rule: &Rule, key: &str) -> Option<Verdict> {
        let verdict = self.call("RL.REFUND", rule, key).await.ok()?;
        self.metrics.refund(&rule.name);
        Some(verdict)
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
            let more = if unlogged > 0 {
                format!(" ({unlogged} more since the last line)")
            } else {
                String::new()
            };
            log!(
                "rule '{}': {command} answered an error, the rule is misconfigured \
                 (on_module_error = {meaning}): {error}{more}",
                rule.name
            );
        }
    }

    /// `command key args...` under the deadline, through the breaker.
    async fn call(&self, command: &str, rule: &Rule, key: &str) -> Result<Verdict, Failure> {
        if !self.breaker.allows(Instant::now()) {
            return Err(Failure::Breaker);
        }
        let mut cmd = redis::cmd(command);
        cmd.arg(key).arg(&rule.call_args);
        let started = Instant::now();
        let reply = tokio::time::timeout(self.deadline, self.backend.call(&cmd)).await;
        let failure = match reply {
            Err(_elapsed) => Failure::Timeout,
            Ok(Ok(value)) => {
                self.metrics.redis_latency(started.elapsed());
                self.breaker.succeeded();
                return Verdict::from_reply(&value).ok_or_else(|| {
                    self.module_error(command, rule, "a reply that is not a decision");
                    Failure::Error
                });
            }
            Ok(Err(error)) => {
                let failure = classify(&error);
                if failure != Failure::Connection {
                    self.metrics.redis_latency(started.elapsed());
                }
                if failure == Failure::Error {
                    self.module_error(command, rule, &error.to_string());
                }
                failure
            }
        };
        // An error reply (a missing policy, say) is one rule's problem, not Redis's: it
        // does not count towards opening the breaker for every rule.
        if failure == Failure::Error {
            self.breaker.succeeded();
        } else {
            self.breaker.failed(Instant::now());
        }
        Err(failure)
    }
}
