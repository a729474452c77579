//! One call to Redis under the decision's deadline: through the circuit breaker (or past
//! it, for what must not be skipped), its latency and its failure counted, the breaker told
//! what came of it, an error reply logged against the rule that caused it.

use super::commands::{hit_cmd, multi_cmd};
use super::redis::classify;
use super::{Applied, Decider, Transport};
use crate::decider::breaker::Transition;
use crate::failure::Failure;
use crate::logging::log;
use crate::rules::Rule;
use crate::verdict::{MultiVerdict, Verdict};
use std::time::Instant;

/// A call still running after its deadline: its answer, when it comes.
pub(super) type Late =
    std::pin::Pin<Box<dyn std::future::Future<Output = redis::RedisResult<redis::Value>> + Send>>;

/// What a call came to when it did not decide: the failure, with the text of an error
/// reply when there was one.
pub(super) type Failed = (Failure, Option<String>);

impl<T: Transport> Decider<T> {
    /// `command key args...` before `deadline`, through the breaker.
    pub(super) async fn call(
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
                self.module_error(
                    command,
                    rule,
                    &applied.key,
                    "a reply that is not a decision",
                );
                Failure::Error
            }),
            Err((failure, error)) => {
                if let Some(error) = error {
                    self.module_error(command, rule, &applied.key, &error);
                }
                Err(failure)
            }
        }
    }

    /// `command numkeys key ... SPEC args ...` for the rules `group` of `applying`, before
    /// `deadline`. An error reply is not logged here: the caller asks each rule on its own,
    /// which names the one at fault.
    pub(super) async fn call_multi(
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
            let reason = "a reply that is not a decision of every key";
            self.module_error(command, rule, first, reason);
            Failure::Error
        })
    }

    /// Sends `cmd` (in a cluster to the owner of `route_key`, when given) before
    /// `deadline`, through the breaker; a failure comes with the text of an error reply.
    pub(super) async fn send(
        &self,
        cmd: redis::Cmd,
        route_key: Option<&str>,
        deadline: tokio::time::Instant,
        late: Option<&mut Option<Late>>,
    ) -> Result<redis::Value, Failed> {
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
    pub(super) async fn round_trip(
        &self,
        cmd: redis::Cmd,
        route_key: Option<&str>,
        deadline: tokio::time::Instant,
        late: Option<&mut Option<Late>>,
    ) -> Result<redis::Value, Failed> {
        let started = Instant::now();
        let reply = match late {
            Some(late) => self.awaited(cmd, route_key, deadline, started, late).await,
            None => tokio::time::timeout_at(deadline, self.backend.call(&cmd, route_key)).await,
        };
        let error = match reply {
            Err(_elapsed) => None,
            Ok(Ok(value)) => {
                self.metrics.redis_latency(started.elapsed());
                self.answered();
                return Ok(value);
            }
            Ok(Err(error)) => Some(error),
        };
        let (failure, text) = match error {
            None => (Failure::Timeout, None),
            Some(error) => {
                let failure = classify(&error);
                if failure != Failure::Connection {
                    self.metrics.redis_latency(started.elapsed());
                }
                let text = (failure == Failure::Error).then(|| error.to_string());
                (failure, text)
            }
        };
        self.unanswered(failure, started);
        Err((failure, text))
    }

    /// `cmd` awaited until `deadline`, left running in `late` if unanswered by then.
    async fn awaited(
        &self,
        cmd: redis::Cmd,
        route_key: Option<&str>,
        deadline: tokio::time::Instant,
        started: Instant,
        late: &mut Option<Late>,
    ) -> Result<redis::RedisResult<redis::Value>, tokio::time::error::Elapsed> {
        let backend = self.backend.clone();
        let key = route_key.map(str::to_owned);
        let mut call: Late = Box::pin(async move { backend.call(&cmd, key.as_deref()).await });
        let mut reply = tokio::time::timeout_at(deadline, &mut call).await;
        if reply.is_err() && self.breaker.answered_since(started) {
            // Redis answers other calls: this one waited in the gateway's own queues (a
            // client's flood loads it), not on a stalled Redis. One more deadline, rather
            // than a failure that a load can cause at will.
            reply = tokio::time::timeout(self.deadline, &mut call).await;
        }
        if reply.is_err() {
            *late = Some(call);
        }
        reply
    }

    /// Tells the breaker of a call started at `started` that did not decide.
    fn unanswered(&self, failure: Failure, started: Instant) {
        // An error reply (a missing policy, say) is one rule's problem, not Redis's: it
        // does not count towards opening the breaker for every rule.
        if failure == Failure::Error {
            self.answered();
        } else if self.breaker.failed(started, Instant::now()) == Transition::Opened {
            crate::logging::log_warn!(
                breaker = "open", failure = failure.label();
                if_some redis_node = self.backend.node();
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
    }

    /// Redis answered a call: the breaker hears it (and closes, if it was open), and what
    /// local limits admitted meanwhile is counted in Redis.
    fn answered(&self) {
        if self.breaker.succeeded(Instant::now()) == Transition::Closed {
            log!(
                breaker = "closed";
                if_some redis_node = self.backend.node();
                "circuit breaker closed: Redis answers again; rules share its budgets again"
            );
        }
        self.write_back_local();
    }

    /// Counts an error reply of `rule`'s call on `key` and logs it, rate-limited per rule.
    pub(super) fn module_error(&self, command: &str, rule: &Rule, key: &str, error: &str) {
        self.metrics.module_error(&rule.name);
        if let Some(unlogged) = self.module_errors.record(&rule.name, Instant::now()) {
            let (meaning, outcome) = if rule.on_failure.closes(Failure::Error) {
                ("closed: answering 503", "fail_closed")
            } else {
                ("open: letting requests through", "fail_open")
            };
            let more = crate::logging::LeftOut(unlogged);
            log!(
                rule = rule.name,
                key_hash = crate::logging::key_hash(key),
                outcome = outcome,
                failure = Failure::Error.label();
                "rule '{}': {command} answered an error, the rule is misconfigured \
                 (on_module_error = {meaning}): {error}{more}",
                rule.name
            );
        }
    }
}
