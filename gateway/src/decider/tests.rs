//! The decision through its transport, with a scripted Redis: no server runs. Each test
//! says what Redis answers to which command and checks what was decided and what was sent.
//! This file holds the scripted Redis and the first tests; the files under `tests/` hold
//! the others, one behaviour each.

mod breaker_tests;
mod deny_cache_tests;
mod failure_tests;
mod lease_tests;
mod look_tests;
mod quota_stacked_tests;
mod quota_tests;
mod refund_tests;
mod stacking_tests;

use super::*;
use crate::config::{RedisSettings, RedisTarget};
use crate::failure::Failure;
use crate::rules::Rule;
use crate::rules::{test_rule, RedisFailure};
use ::redis::{Arg, Cmd, RedisError, RedisResult, Value};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

/// What the scripted Redis does with one command.
enum Step {
    Reply(Value),
    /// The reply after a while (a stall the call outlives).
    Later(Duration, Value),
    /// No connection.
    Refused,
    /// An error reply, the line the server sends after `-` (`ERR unknown command ...`,
    /// `LOADING ...`): parsed as the client parses one off the wire.
    Error(&'static str),
    /// The client gave up on the socket (an I/O timeout, not the decision's deadline).
    TimedOut,
}

type Script = dyn Fn(&[String]) -> Step + Send + Sync;

/// A Redis that answers by `script` and remembers every command it was sent.
#[derive(Clone)]
struct Scripted {
    cluster: bool,
    script: Arc<Script>,
    sent: Arc<Mutex<Vec<Vec<String>>>>,
}

impl Scripted {
    fn new(script: impl Fn(&[String]) -> Step + Send + Sync + 'static) -> Self {
        Scripted {
            cluster: false,
            script: Arc::new(script),
            sent: Arc::default(),
        }
    }

    fn cluster(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// Every command sent so far, in order.
    fn all_sent(&self) -> Vec<Vec<String>> {
        self.sent.lock().expect("sent").clone()
    }

    /// The commands sent so far whose name is `command`.
    fn sent(&self, command: &str) -> Vec<Vec<String>> {
        let sent = self.sent.lock().expect("sent");
        sent.iter().filter(|c| c[0] == command).cloned().collect()
    }
}

impl Transport for Scripted {
    async fn call(&self, cmd: &Cmd, _route_key: Option<&str>) -> RedisResult<Value> {
        let words: Vec<String> = cmd
            .args_iter()
            .map(|arg| match arg {
                Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "CURSOR".into(),
            })
            .collect();
        // Whatever the decider sends of the module's, the library has a function for: the
        // transport's translation covers every command of every test here.
        if words[0].starts_with("RL.") {
            let fcall = super::redis::functions::as_fcall(cmd);
            assert!(fcall.is_some(), "no function for {words:?}");
        }
        let step = (self.script)(&words);
        self.sent.lock().expect("sent").push(words);
        match step {
            Step::Reply(value) => Ok(value),
            Step::Later(after, value) => {
                tokio::time::sleep(after).await;
                Ok(value)
            }
            Step::Refused => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "refused",
            ))),
            Step::Error(line) => {
                let wire = format!("-{line}\r\n");
                let parsed = ::redis::parse_redis_value(wire.as_bytes());
                Err(parsed
                    .and_then(Value::extract_error)
                    .expect_err("an error reply"))
            }
            Step::TimedOut => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "timed out",
            ))),
        }
    }

    fn is_cluster(&self) -> bool {
        self.cluster
    }

    fn node(&self) -> Option<String> {
        None
    }
}

/// RL.HIT's RESP2 reply.
fn hit(allowed: bool, limit: i64, remaining: i64, retry_after_ms: i64) -> Value {
    let fields = [i64::from(allowed), limit, remaining, 1000, retry_after_ms];
    Value::Array(fields.into_iter().map(Value::Int).collect())
}

fn allowed() -> Value {
    hit(true, 5, 4, 0)
}

fn denied() -> Value {
    hit(false, 5, 0, 1000)
}

fn rule(name: &str, limit: u64, redis: RedisFailure) -> Arc<Rule> {
    Arc::new(test_rule(name, limit, 60_000, None, 1, redis))
}

fn applied(rule: &Arc<Rule>, key: &str) -> Applied {
    Applied {
        rule: rule.clone(),
        key: key.into(),
        cost: None,
    }
}

fn settings(breaker_failures: u32) -> RedisSettings {
    settings_open_for(breaker_failures, Duration::from_secs(60))
}

/// Settings whose breaker opens after `breaker_failures` and stays open for `open_for`.
fn settings_open_for(breaker_failures: u32, open_for: Duration) -> RedisSettings {
    RedisSettings {
        target: RedisTarget::Single("redis://127.0.0.1:1".into()),
        connection: Default::default(),
        deadline: Duration::from_millis(20),
        key_prefix: "rl:".into(),
        breaker_failures,
        breaker_open: open_for,
        breaker_silence: Duration::ZERO,
        gateways: None,
        heartbeat: Duration::from_secs(1),
        rules_key: None,
        rules_refresh: Duration::from_secs(5),
        backend: crate::config::BackendChoice::Auto,
        functions_load: crate::config::FunctionsLoad::Never,
    }
}

fn decider(transport: &Scripted) -> Decider<Scripted> {
    Decider::new(transport.clone(), &settings(5), 100)
}

/// RL.MHIT's (RL.MPEEK's, RL.MREFUND's) reply: allowed as a whole, the binding key, and
/// each key's own reply.
fn multi(allowed: bool, binding: i64, keys: Vec<Value>) -> Value {
    Value::Array(vec![
        Value::Int(i64::from(allowed)),
        Value::Int(binding),
        Value::Array(keys),
    ])
}

/// RL.ACQUIRE's reply: the lease `id` taken, or none (no free slot).
fn lease_reply(id: Option<&str>) -> Value {
    Value::Array(vec![
        Value::Int(i64::from(id.is_some())),
        Value::Int(2),
        Value::Int(1),
        id.map_or(Value::Nil, |id| Value::BulkString(id.as_bytes().to_vec())),
        Value::Int(30_000),
        Value::Int(0),
    ])
}

/// A rule with `concurrency` (at most 2 leases of `ttl_ms`).
fn leased_rule(name: &str, ttl_ms: u64, redis: RedisFailure) -> Arc<Rule> {
    let mut leased = Rule::clone(&rule(name, 5, redis));
    leased.concurrency = Some(crate::rules::Concurrency::new(2, ttl_ms, &leased.limit));
    Arc::new(leased)
}

/// `rule` with `on_module_error` as given.
fn with_error_closed(rule: &Arc<Rule>, closed: bool) -> Arc<Rule> {
    let mut changed = Rule::clone(rule);
    changed.on_failure.error_closed = closed;
    Arc::new(changed)
}

/// The value of the metric line that starts with `series` (name and labels), 0 when the
/// series is not rendered.
fn metric<T: Transport>(decider: &Decider<T>, series: &str) -> u64 {
    decider
        .metrics()
        .render(decider.breaker_open())
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |value| value.parse().expect("a count"))
}

/// Waits (a few ms at a time) until `done`, for what the decider does in the background.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("never: {what}");
}

#[tokio::test]
async fn rules_in_two_slots_are_charged_in_turn_and_a_denial_gives_the_first_back() {
    let redis = Scripted::new(|words| match (words[0].as_str(), words[1].as_str()) {
        ("RL.HIT", "rl:{a}:first") => Step::Reply(allowed()),
        ("RL.HIT", _) => Step::Reply(denied()),
        ("RL.REFUND", _) => Step::Reply(hit(true, 5, 5, 0)),
        _ => Step::Refused,
    })
    .cluster();
    let decider = decider(&redis);
    let (first, second) = (
        rule("first", 5, RedisFailure::Local),
        rule("second", 5, RedisFailure::Local),
    );
    let applying = [
        applied(&first, "rl:{a}:first"),
        applied(&second, "rl:{b}:second"),
    ];
    let stacked = decider.decide(&applying, None).await;
    assert_eq!(
        stacked.end,
        End::Denied {
            binding: 1,
            cached: false
        }
    );
    assert!(matches!(stacked.outcomes[0], RuleOutcome::Uncounted(_)));
    assert_eq!(redis.sent("RL.HIT").len(), 2, "one call per slot");
    let refunds = redis.sent("RL.REFUND");
    assert_eq!(refunds.len(), 1);
    assert_eq!(
        refunds[0][1], "rl:{a}:first",
        "the first rule's hit is given back"
    );
}

#[tokio::test]
async fn rules_in_one_slot_are_one_multi_key_call() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.MHIT" => Step::Reply(Value::Array(vec![
            Value::Int(1),
            Value::Int(0),
            Value::Array(vec![allowed(), allowed()]),
        ])),
        _ => Step::Refused,
    });
    let decider = decider(&redis);
    let (a, b) = (
        rule("a", 5, RedisFailure::Local),
        rule("b", 5, RedisFailure::Local),
    );
    let applying = [applied(&a, "rl:{x}:a"), applied(&b, "rl:{x}:b")];
    let stacked = decider.decide(&applying, None).await;
    assert_eq!(stacked.end, End::Allowed);
    assert_eq!(redis.sent("RL.MHIT").len(), 1);
    assert!(redis.sent("RL.HIT").is_empty());
}

#[tokio::test]
async fn a_denial_is_remembered_and_answered_without_redis() {
    let redis = Scripted::new(|_| Step::Reply(denied()));
    let decider = decider(&redis);
    let rule = rule("r", 5, RedisFailure::Local);
    let applying = [applied(&rule, "rl:{a}:r")];
    let first = decider.decide(&applying, None).await;
    assert_eq!(
        first.end,
        End::Denied {
            binding: 0,
            cached: false
        }
    );
    let second = decider.decide(&applying, None).await;
    assert_eq!(
        second.end,
        End::Denied {
            binding: 0,
            cached: true
        }
    );
    assert_eq!(
        redis.sent("RL.HIT").len(),
        1,
        "the second never reached Redis"
    );
}

#[tokio::test]
async fn without_redis_a_closed_rule_closes_and_a_local_rule_counts_its_share() {
    let redis = Scripted::new(|_| Step::Refused);
    let decider = Decider::new(redis.clone(), &settings(1000), 100);
    let closed = rule("closed", 5, RedisFailure::Closed);
    let shut = decider
        .decide(&[applied(&closed, "rl:{a}:closed")], None)
        .await;
    assert!(matches!(
        shut.end,
        End::Closed {
            rule: 0,
            failure: Failure::Connection
        }
    ));
    let local = rule("local", 2, RedisFailure::Local);
    let applying = [applied(&local, "rl:{a}:local")];
    let mut ends = Vec::new();
    for _ in 0..3 {
        let stacked = decider.decide(&applying, None).await;
        assert!(matches!(
            stacked.outcomes[0],
            RuleOutcome::Local {
                failure: Failure::Connection,
                ..
            }
        ));
        ends.push(stacked.end);
    }
    assert_eq!(
        ends,
        [
            End::Allowed,
            End::Allowed,
            End::Denied {
                binding: 0,
                cached: false
            }
        ],
        "the local limit of 2"
    );
    let open = rule("open", 2, RedisFailure::Open);
    for _ in 0..3 {
        let stacked = decider.decide(&[applied(&open, "rl:{a}:open")], None).await;
        assert_eq!(stacked.end, End::Allowed, "open: unlimited");
    }
}

#[tokio::test]
async fn local_counts_are_written_back_once_redis_answers() {
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answering = up.clone();
    let redis =
        Scripted::new(
            move |_| match answering.load(std::sync::atomic::Ordering::Relaxed) {
                true => Step::Reply(allowed()),
                false => Step::Refused,
            },
        );
    let decider = Decider::new(redis.clone(), &settings(1000), 100);
    let local = rule("local", 5, RedisFailure::Local);
    let applying = [applied(&local, "rl:{a}:local")];
    for _ in 0..3 {
        decider.decide(&applying, None).await;
    }
    up.store(true, std::sync::atomic::Ordering::Relaxed);
    decider.decide(&applying, None).await;
    eventually("the write-back", || {
        redis
            .sent("RL.HIT")
            .iter()
            .any(|c| c.ends_with(&["COST".to_owned(), "3".to_owned()]))
    })
    .await;
}

#[tokio::test]
async fn the_breaker_opens_on_failures_in_a_row_and_then_skips_redis() {
    let redis = Scripted::new(|_| Step::Refused);
    let decider = Decider::new(redis.clone(), &settings(2), 100);
    let open = rule("open", 5, RedisFailure::Open);
    let applying = [applied(&open, "rl:{a}:open")];
    let mut failures = Vec::new();
    for _ in 0..4 {
        let stacked = decider.decide(&applying, None).await;
        if let RuleOutcome::Failed(failure) = stacked.outcomes[0] {
            failures.push(failure);
        }
    }
    assert_eq!(
        failures,
        [
            Failure::Connection,
            Failure::Connection,
            Failure::Breaker,
            Failure::Breaker
        ]
    );
    assert!(decider.breaker_open());
    assert_eq!(redis.sent("RL.HIT").len(), 2, "no call while open");
}

#[tokio::test]
async fn a_refund_goes_past_an_open_breaker() {
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answering = up.clone();
    let redis =
        Scripted::new(
            move |_| match answering.load(std::sync::atomic::Ordering::Relaxed) {
                true => Step::Reply(hit(true, 5, 5, 0)),
                false => Step::Refused,
            },
        );
    let decider = Decider::new(redis.clone(), &settings(1), 100);
    let rule = rule("login", 5, RedisFailure::Closed);
    decider
        .decide(&[applied(&rule, "rl:{a}:login")], None)
        .await;
    assert!(decider.breaker_open());
    up.store(true, std::sync::atomic::Ordering::Relaxed);
    let after = decider.refund(&rule, "rl:{a}:login").await;
    assert!(after.is_some(), "answered although the breaker is open");
    assert_eq!(redis.sent("RL.REFUND").len(), 1);
}

#[tokio::test]
async fn a_hit_answered_after_its_deadline_is_given_back_when_the_request_was_refused() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.HIT" => Step::Later(Duration::from_millis(150), allowed()),
        _ => Step::Reply(hit(true, 5, 5, 0)),
    });
    let decider = decider(&redis);
    let rule = rule("login", 5, RedisFailure::Closed);
    let stacked = decider
        .decide(&[applied(&rule, "rl:{a}:login")], None)
        .await;
    assert!(matches!(
        stacked.end,
        End::Closed {
            failure: Failure::Timeout,
            ..
        }
    ));
    eventually("the late hit given back", || {
        redis.sent("RL.REFUND").len() == 1
    })
    .await;
}

#[tokio::test]
async fn a_hit_answered_after_its_deadline_is_kept_when_the_request_went_through() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.HIT" => Step::Later(Duration::from_millis(100), allowed()),
        _ => Step::Reply(hit(true, 5, 5, 0)),
    });
    let decider = decider(&redis);
    let rule = rule("api", 5, RedisFailure::Open);
    let stacked = decider.decide(&[applied(&rule, "rl:{a}:api")], None).await;
    assert_eq!(stacked.end, End::Allowed);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(redis.sent("RL.REFUND").is_empty(), "served: its hit counts");
}

#[tokio::test]
async fn a_lease_unanswered_in_time_is_unknown_and_one_answered_is_taken() {
    let taken = lease_reply(Some("id-1"));
    let redis = Scripted::new(move |_| Step::Reply(taken.clone()));
    let decider = decider(&redis);
    let leased = leased_rule("uploads", 30_000, RedisFailure::Open);
    let stacked = decider
        .decide(&[applied(&leased, "rl:{a}:uploads")], Some("id-1"))
        .await;
    assert_eq!(stacked.lease, LeaseAnswer::Taken);
    assert_eq!(
        redis.sent("RL.ACQUIRE")[0].last().map(String::as_str),
        Some("id-1")
    );

    let slow =
        Scripted::new(move |_| Step::Later(Duration::from_millis(150), lease_reply(Some("id-2"))));
    let late = Decider::new(slow.clone(), &settings(5), 100);
    let stacked = late
        .decide(&[applied(&leased, "rl:{a}:uploads")], Some("id-2"))
        .await;
    assert_eq!(
        stacked.lease,
        LeaseAnswer::Unknown,
        "it may yet be taken: to give back"
    );
    assert_eq!(
        stacked.end,
        End::Allowed,
        "open: forwarded holding no lease"
    );
}

#[tokio::test]
async fn a_hit_answered_after_its_deadline_is_given_back_when_a_local_limit_decided() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.HIT" => Step::Later(Duration::from_millis(150), allowed()),
        _ => Step::Reply(hit(true, 5, 5, 0)),
    });
    let decider = decider(&redis);
    let rule = rule("api", 5, RedisFailure::Local);
    let stacked = decider.decide(&[applied(&rule, "rl:{a}:api")], None).await;
    assert!(matches!(
        stacked.outcomes[0],
        RuleOutcome::Local {
            failure: Failure::Timeout,
            ..
        }
    ));
    // Counted by the local limit, which writes it back: Redis's own late count goes.
    eventually("the late hit given back", || {
        redis.sent("RL.REFUND").len() == 1
    })
    .await;
}

#[tokio::test]
async fn a_write_back_names_one_cost_whatever_the_rules_own() {
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answering = up.clone();
    let redis =
        Scripted::new(
            move |_| match answering.load(std::sync::atomic::Ordering::Relaxed) {
                true => Step::Reply(allowed()),
                false => Step::Refused,
            },
        );
    let decider = Decider::new(redis.clone(), &settings(1000), 100);
    let costly = Arc::new(test_rule(
        "costly",
        30,
        60_000,
        None,
        3,
        RedisFailure::Local,
    ));
    let applying = [applied(&costly, "rl:{a}:costly")];
    for _ in 0..2 {
        decider.decide(&applying, None).await;
    }
    up.store(true, std::sync::atomic::Ordering::Relaxed);
    decider.decide(&applying, None).await;
    eventually("the write-back of 6 units", || {
        redis
            .sent("RL.HIT")
            .iter()
            .any(|c| c.ends_with(&["COST".to_owned(), "6".to_owned()]))
    })
    .await;
    for words in redis.sent("RL.HIT") {
        let costs = words.iter().filter(|w| *w == "COST").count();
        assert_eq!(costs, 1, "the module takes COST once: {words:?}");
    }
}
