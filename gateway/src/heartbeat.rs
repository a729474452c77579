//! Each gateway's heartbeat in Redis, every `[redis] heartbeat_ms`:
//! - **Live gateways.** It keeps its own entry in a sorted set (`<key_prefix>gateways`,
//!   scored by the server's clock, so the gateways' clocks do not matter), drops entries
//!   older than ten beats (5 s at least), and counts the rest: the local limits of
//!   `on_redis_failure = "local"` are divided by that count. During an outage the last
//!   count holds: gateways cut off from Redis are cut off together, or decide apart.
//! - **Local counts.** Once Redis answers, what local limits admitted is counted there,
//!   whether or not this gateway's breaker has closed yet.
//! - **Policies.** It reads the definition of every policy a rule names (`RL.POLICY GET`),
//!   so that a policy rule has a local limit too.
//! - **Readiness.** It probes which backend answers (`[redis] backend`: the module's
//!   commands, else the Functions library, loaded if `functions_load` allows; see
//!   [`crate::decider::redis::probe`]): a Redis that has neither makes every decision
//!   fail, so the gateway reports not ready on `/readyz` and says how to fix it, once per
//!   change. It asks at the first beat (at start), at every beat until a backend is
//!   there, and again after Redis was lost or restarted (another server may have neither)
//!   or a call found the library gone (`FUNCTION DELETE`); not at every beat, since a
//!   loaded module that holds keys stays loaded, and a library deleted says so.
//! - **Redis's state, logged once per change.** Lost (with the reason), back (after how
//!   long), and restarted: the server's `run_id` changed, so the counters it held are gone
//!   unless it loaded them from RDB or AOF (or a replica took over with them).
//!
//! Its calls go past the circuit breaker and do not report to it.

use crate::app::Gateway;
use crate::decider::redis::probe::{Found, Missing};
use crate::decider::redis::Backend;
use crate::logging::{log, log_error, log_warn};
use crate::rules::Limit;
use redis::{RedisError, Value};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a gateway that stopped beating still counts: ten beats, and 5 s at least. A
/// gateway counted too long only makes the others' local shares smaller (the safe side);
/// one dropped too soon, its beat late on a busy machine, would make them larger.
fn stale_after(every: Duration) -> Duration {
    (every * 10).max(Duration::from_secs(5))
}

/// How long one beat's calls may take in all.
const BEAT_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a beat did not go through: the reason logged when Redis is lost.
#[derive(Debug)]
pub enum BeatError {
    /// The beat's calls together took longer than [`BEAT_TIMEOUT`].
    NoAnswer(Duration),
    /// A call failed: no connection, or an error reply.
    Redis(RedisError),
    /// `TIME` answered something that is not a time.
    NoTime,
}

impl fmt::Display for BeatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BeatError::NoAnswer(within) => write!(f, "no answer within {} ms", within.as_millis()),
            BeatError::Redis(error) => write!(f, "{error}"),
            BeatError::NoTime => f.write_str("TIME gave no time"),
        }
    }
}

impl std::error::Error for BeatError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BeatError::Redis(error) => Some(error),
            BeatError::NoAnswer(_) | BeatError::NoTime => None,
        }
    }
}

/// What one beat found out.
#[derive(Debug, Default)]
struct Beat {
    run_id: Option<String>,
    /// The backend the probe found, if the beat asked.
    backend: Option<Result<Found, Missing>>,
}

/// What the heartbeat knew after its last beat.
#[derive(Default)]
struct Known {
    /// `Some(since)` while Redis does not answer.
    lost_since: Option<Instant>,
    run_id: Option<String>,
    /// The backend found, once a beat has asked.
    backend: Option<Result<Found, Missing>>,
    /// Whether a backend was found since Redis was last lost or restarted: then the
    /// beats need not ask again.
    settled: bool,
    /// The server the beats go to (`host:port`), for the log; `None` in a Cluster.
    node: Option<String>,
}

/// Starts beating in the background.
pub fn spawn(gateway: Arc<Gateway>, backend: Backend, key_prefix: String, every: Duration) {
    let id = format!(
        "{}-{}",
        std::process::id(),
        crate::decider::lease_guard::new_lease_id()
    );
    let key = format!("{key_prefix}gateways");
    tokio::spawn(async move {
        let mut known = Known::default();
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            // A call that found the library gone has it looked for again.
            let probe = !known.settled | backend.take_lost_library();
            let beat = beat(&gateway, &backend, (&key, &id), every, probe);
            let beat = tokio::time::timeout(BEAT_TIMEOUT, beat);
            let result = match beat.await {
                Ok(result) => result,
                Err(_) => Err(BeatError::NoAnswer(BEAT_TIMEOUT)),
            };
            known.node = backend.node();
            let ready = known.update(result, backend.is_cluster());
            gateway.set_redis_ready(ready);
        }
    });
}

impl Known {
    /// Takes in what a beat found, logs what changed, and says whether the gateway is
    /// ready (or why not).
    fn update(&mut self, result: Result<Beat, BeatError>, cluster: bool) -> Result<(), String> {
        match result {
            Err(reason) => {
                let why = format!("Redis does not answer: {reason}");
                self.settled = false;
                if self.lost_since.is_none() {
                    self.lost_since = Some(Instant::now());
                    let failure = match &reason {
                        BeatError::NoAnswer(_) => crate::failure::Failure::Timeout,
                        BeatError::Redis(error) => crate::decider::redis::classify(error),
                        BeatError::NoTime => crate::failure::Failure::Error,
                    };
                    log!(
                        failure = failure.label();
                        if_some redis_node = self.node;
                        "Redis does not answer ({reason}): rules decide as their \
                         on_redis_failure says until it does"
                    );
                }
                Err(why)
            }
            Ok(beat) => {
                self.answered(beat.run_id, cluster);
                if let Some(backend) = beat.backend {
                    self.backend_found(backend);
                }
                match &self.backend {
                    Some(Ok(_)) => Ok(()),
                    Some(Err(missing)) => Err(missing.to_string()),
                    // Not asked yet: cannot be after an answered beat, which asks first.
                    None => Err("the backend not probed yet".to_owned()),
                }
            }
        }
    }

    /// Which backend was found: logged when that changes (and at the first beat).
    fn backend_found(&mut self, backend: Result<Found, Missing>) {
        if self.backend.as_ref() != Some(&backend) {
            match &backend {
                Ok(Found::Module) => log!("the module's commands are there (RL.HIT known): ready"),
                Ok(Found::Library) => log!(
                    "deciding through the Functions library {} {} (FCALL): ready",
                    crate::decider::redis::functions::LIBRARY_NAME,
                    crate::decider::redis::functions::LIBRARY_VERSION
                ),
                Err(missing) => log_error!(
                    failure = "no_module";
                    if_some redis_node = self.node;
                    "{missing}; {}: until then /readyz answers 503 and every rule decides \
                     as its on_redis_failure says",
                    missing.fix()
                ),
            }
        }
        self.settled = backend.is_ok();
        self.backend = Some(backend);
    }

    /// Redis answered a beat: logged if it had been lost, or if it restarted.
    fn answered(&mut self, run_id: Option<String>, cluster: bool) {
        if let Some(since) = self.lost_since.take() {
            log!(
                if_some redis_node = self.node;
                "Redis answers again, after about {} ms",
                since.elapsed().as_millis()
            );
        }
        let restarted = match (&self.run_id, &run_id) {
            (Some(before), Some(now)) => before != now,
            _ => false,
        };
        if restarted {
            self.settled = false;
        }
        if restarted && !cluster {
            log_warn!(
                if_some redis_node = self.node;
                "Redis restarted or another server took its place (run_id {} -> {}): \
                 unless it loaded its data (RDB, AOF) or was a replica, every budget \
                 started afresh",
                self.run_id.as_deref().unwrap_or(""),
                run_id.as_deref().unwrap_or("")
            );
        }
        if run_id.is_some() {
            self.run_id = run_id;
        }
    }
}

/// One beat: which backend answers (if `probe`), this gateway's entry (`id` in
/// `key`), the live count, the policies, and the server's run_id.
async fn beat(
    gateway: &Gateway,
    backend: &Backend,
    (key, id): (&str, &str),
    every: Duration,
    probe: bool,
) -> Result<Beat, BeatError> {
    let call = |cmd: redis::Cmd| async move {
        backend
            .call_for_key(&cmd, key)
            .await
            .map_err(BeatError::Redis)
    };
    let now_ms = match call(redis::cmd("TIME")).await? {
        Value::Array(parts) => match parts.first() {
            Some(Value::BulkString(secs)) => std::str::from_utf8(secs)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .map(|s| s * 1000),
            _ => None,
        },
        _ => None,
    }
    .ok_or(BeatError::NoTime)?;
    let found = match probe {
        true => Some(backend.probe().await.map_err(BeatError::Redis)?),
        false => None,
    };
    let stale_before = now_ms.saturating_sub(stale_after(every).as_millis() as u64);
    call(redis::cmd("ZADD").arg(key).arg(now_ms).arg(id).clone()).await?;
    call(
        redis::cmd("ZREMRANGEBYSCORE")
            .arg(key)
            .arg("-inf")
            .arg(format!("({stale_before}"))
            .clone(),
    )
    .await?;
    call(
        redis::cmd("PEXPIRE")
            .arg(key)
            .arg(3 * every.as_millis() as u64)
            .clone(),
    )
    .await?;
    if let Value::Int(live) = call(redis::cmd("ZCARD").arg(key).clone()).await? {
        gateway
            .decider()
            .local()
            .set_live(u64::try_from(live).unwrap_or(1));
    }
    gateway.decider().write_back_local();
    read_policies(gateway, backend, key).await?;
    let info = call(redis::cmd("INFO").arg("server").clone()).await?;
    Ok(Beat {
        run_id: run_id(&info),
        backend: found,
    })
}

/// `RL.POLICY GET` for every policy the rules name (the module's: the library keeps no
/// policies).
async fn read_policies(gateway: &Gateway, backend: &Backend, key: &str) -> Result<(), BeatError> {
    if backend.uses_library() {
        return Ok(());
    }
    let rules = gateway.rules();
    let names: BTreeSet<&str> = rules
        .all()
        .filter_map(|rule| match &rule.limit {
            Limit::Policy { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    for name in names {
        let mut cmd = redis::cmd("RL.POLICY");
        cmd.arg("GET").arg(name);
        // Policies live on every node of a cluster alike: any will do.
        let words = match backend.call_for_key(&cmd, key).await {
            Ok(Value::Array(words)) => Some(
                words
                    .iter()
                    .filter_map(|w| match w {
                        Value::BulkString(bytes) => Some(bytes.clone()),
                        Value::SimpleString(text) => Some(text.clone().into_bytes()),
                        _ => None,
                    })
                    .collect(),
            ),
            Ok(_) => None,
            // The module not loaded, say: the rules' own calls report it.
            Err(error) if error.code().is_some() => continue,
            Err(error) => return Err(BeatError::Redis(error)),
        };
        gateway.decider().local().set_policy(name, words);
    }
    Ok(())
}

/// The `run_id:` of an `INFO server` reply.
fn run_id(info: &Value) -> Option<String> {
    let text = match info {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?,
        Value::VerbatimString { text, .. } => text.as_str(),
        _ => return None,
    };
    text.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_id_is_read_from_info() {
        let info =
            Value::BulkString(b"# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\n".to_vec());
        assert_eq!(run_id(&info).as_deref(), Some("abc123"));
        assert_eq!(run_id(&Value::Nil), None);
    }

    #[test]
    fn a_beat_error_says_what_went_wrong() {
        let within = BeatError::NoAnswer(Duration::from_secs(1));
        assert_eq!(within.to_string(), "no answer within 1000 ms");
        assert_eq!(BeatError::NoTime.to_string(), "TIME gave no time");
        let refused = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        ));
        let text = refused.to_string();
        let error = BeatError::Redis(refused);
        assert_eq!(error.to_string(), text, "the client's own words");
        assert!(std::error::Error::source(&error).is_some());
    }

    #[test]
    fn a_loss_and_a_restart_change_what_is_known() {
        let beat = |run_id: &str| {
            Ok(Beat {
                run_id: Some(run_id.into()),
                backend: Some(Ok(Found::Module)),
            })
        };
        let mut known = Known::default();
        assert_eq!(known.update(beat("a"), false), Ok(()));
        let lost = known.update(Err(BeatError::NoTime), false);
        assert_eq!(lost, Err("Redis does not answer: TIME gave no time".into()));
        assert!(known.lost_since.is_some());
        assert_eq!(known.update(beat("b"), false), Ok(()));
        assert!(known.lost_since.is_none());
        assert_eq!(known.run_id.as_deref(), Some("b"));
    }

    #[test]
    fn without_a_backend_the_gateway_is_not_ready() {
        let mut known = Known::default();
        let beat = |backend| {
            Ok(Beat {
                run_id: Some("a".into()),
                backend,
            })
        };
        let missing = Missing::Both {
            node: "the server".into(),
            library_only: false,
        };
        assert_eq!(
            known.update(beat(Some(Err(missing.clone()))), false),
            Err(missing.to_string())
        );
        assert!(!known.settled, "asked again at the next beat");
        assert_eq!(known.update(beat(Some(Ok(Found::Library))), false), Ok(()));
        assert!(known.settled, "not asked at every beat");
        assert_eq!(known.update(beat(None), false), Ok(()), "as last found");
        let _ = known.update(Err(BeatError::NoTime), false);
        assert!(!known.settled, "asked again once Redis is back");
    }
}
