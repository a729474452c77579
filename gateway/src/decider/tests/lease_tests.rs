//! Leases of `concurrency` rules as decisions: taking one, what each failure leaves (a
//! lease that may yet be taken must be given back), renewing, releasing, and every path by
//! which the guard gives a lease back (the body's end, its error, a drop, an unanswered
//! call).

use super::*;
use crate::decider::lease_guard::{LeaseGuard, Leased};
use crate::metrics::ReleaseCause;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body, Frame};
use std::pin::Pin;
use std::task::{Context, Poll};

const KEY: &str = "rl:{a}:uploads";

fn leases(decider: &Decider<Scripted>, event: &str) -> u64 {
    metric(
        decider,
        &format!("rl_gateway_leases_total{{rule=\"uploads\",event=\"{event}\"}}"),
    )
}

fn releases(decider: &Decider<Scripted>, cause: &str) -> u64 {
    metric(
        decider,
        &format!("rl_gateway_lease_releases_total{{cause=\"{cause}\"}}"),
    )
}

/// A Redis that takes every lease and frees every release.
fn taking() -> Scripted {
    Scripted::new(|words| match words[0].as_str() {
        "RL.ACQUIRE" => Step::Reply(lease_reply(words.last().map(String::as_str))),
        "RL.RELEASE" => Step::Reply(Value::Int(1)),
        _ => Step::Reply(Value::Int(1)),
    })
}

#[tokio::test]
async fn a_lease_is_asked_for_under_the_callers_id_with_its_limits() {
    let redis = taking();
    let decider = decider(&redis);
    let leased = leased_rule("uploads", 30_000, RedisFailure::Open);
    let stacked = decider
        .decide(&[applied(&leased, KEY)], Some("0123abcd"))
        .await;
    assert_eq!(stacked.lease, LeaseAnswer::Taken);
    assert_eq!(stacked.end, End::Allowed);
    let sent = redis.sent("RL.ACQUIRE");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0][..4], ["RL.ACQUIRE", KEY, "2", "30000ms"]);
    assert_eq!(sent[0][sent[0].len() - 2..], ["ID", "0123abcd"]);
    assert!(
        sent[0].contains(&"5".to_owned()),
        "its limit too: {:?}",
        sent[0]
    );
    assert_eq!(leases(&decider, "acquired"), 1);
    assert_eq!(metric(&decider, "rl_gateway_leases_held"), 1);
    assert!(redis.sent("RL.HIT").is_empty(), "no separate hit");
}

#[tokio::test]
async fn without_an_id_a_fresh_one_is_drawn_for_each_request() {
    let redis = taking();
    let decider = decider(&redis);
    let leased = leased_rule("uploads", 30_000, RedisFailure::Open);
    for _ in 0..2 {
        decider.decide(&[applied(&leased, KEY)], None).await;
    }
    let ids: Vec<String> = redis
        .sent("RL.ACQUIRE")
        .iter()
        .filter_map(|c| c.last().cloned())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    assert!(ids.iter().all(|id| id.len() == 32));
}

#[tokio::test]
async fn no_free_slot_denies_and_holds_nothing() {
    let redis = Scripted::new(|_| Step::Reply(lease_reply(None)));
    let decider = decider(&redis);
    let leased = leased_rule("uploads", 30_000, RedisFailure::Open);
    let stacked = decider.decide(&[applied(&leased, KEY)], Some("id")).await;
    assert_eq!(stacked.lease, LeaseAnswer::NotTaken);
    assert_eq!(
        stacked.end,
        End::Denied {
            binding: 0,
            cached: false
        }
    );
    assert_eq!(leases(&decider, "denied"), 1);
    assert_eq!(metric(&decider, "rl_gateway_leases_held"), 0);
    // Never cached: a slot can free up at any moment.
    decider.decide(&[applied(&leased, KEY)], Some("id")).await;
    assert_eq!(redis.sent("RL.ACQUIRE").len(), 2);
}

#[tokio::test]
async fn a_call_that_went_out_unanswered_leaves_a_lease_to_give_back() {
    // What Redis does, the failure it is, and what the lease then is.
    type Case = (fn() -> Step, Failure, LeaseAnswer);
    let cases: [Case; 5] = [
        (
            || Step::Later(Duration::from_millis(150), lease_reply(Some("x"))),
            Failure::Timeout,
            LeaseAnswer::Unknown,
        ),
        (|| Step::Refused, Failure::Connection, LeaseAnswer::Unknown),
        (|| Step::TimedOut, Failure::Timeout, LeaseAnswer::Unknown),
        (
            || Step::Error("BUSY Redis is busy running a script"),
            Failure::Unavailable,
            LeaseAnswer::NotTaken,
        ),
        (
            || Step::Error("ERR unknown command 'RL.ACQUIRE'"),
            Failure::Error,
            LeaseAnswer::NotTaken,
        ),
    ];
    for (step, failure, lease) in cases {
        for redis_failure in [RedisFailure::Open, RedisFailure::Closed] {
            let redis = Scripted::new(move |_| step());
            let decider = Decider::new(redis.clone(), &settings(1000), 100);
            let leased = with_error_closed(&leased_rule("uploads", 30_000, redis_failure), false);
            let stacked = decider.decide(&[applied(&leased, KEY)], Some("id")).await;
            let case = format!("{failure:?}, {redis_failure:?}");
            assert_eq!(stacked.lease, lease, "{case}");
            let closes = failure != Failure::Error && redis_failure == RedisFailure::Closed;
            let end = match closes {
                true => End::Closed { rule: 0, failure },
                false => End::Allowed,
            };
            assert_eq!(stacked.end, end, "{case}");
        }
    }
}

#[tokio::test]
async fn no_lease_is_asked_for_while_the_breaker_is_open() {
    let redis = Scripted::new(|_| Step::Refused);
    let decider = Decider::new(redis.clone(), &settings(1), 100);
    let leased = leased_rule("uploads", 30_000, RedisFailure::Open);
    decider.decide(&[applied(&leased, KEY)], Some("a")).await;
    let stacked = decider.decide(&[applied(&leased, KEY)], Some("b")).await;
    assert_eq!(
        stacked.lease,
        LeaseAnswer::NotTaken,
        "never sent: nothing to give back"
    );
    assert!(matches!(
        stacked.outcomes[0],
        RuleOutcome::Failed(Failure::Breaker)
    ));
    assert_eq!(redis.sent("RL.ACQUIRE").len(), 1);
}

#[tokio::test]
async fn renewals_say_whether_the_lease_is_still_held() {
    let replies: [fn() -> Step; 4] = [
        || Step::Reply(Value::Int(1)),
        || Step::Reply(Value::Int(0)),
        || Step::Error("ERR wrong lease id"),
        || Step::Refused,
    ];
    let mut said = Vec::new();
    let mut errors = Vec::new();
    for reply in replies {
        let redis = Scripted::new(move |_| reply());
        let decider = decider(&redis);
        let leased = leased_rule("uploads", 30_000, RedisFailure::Open);
        said.push(decider.renew(&leased, KEY, "id-1", 30_000).await);
        errors.push(metric(
            &decider,
            "rl_gateway_module_errors_total{rule=\"uploads\"}",
        ));
        assert_eq!(redis.all_sent(), [["RL.RENEW", KEY, "id-1", "30000ms"]]);
    }
    assert_eq!(said, [Some(true), Some(false), None, None]);
    assert_eq!(
        errors,
        [0, 0, 1, 0],
        "only the error reply is the rule's module error"
    );
}

#[tokio::test]
async fn releases_say_what_became_of_the_lease() {
    let replies: [fn() -> Step; 5] = [
        || Step::Reply(Value::Int(1)),
        || Step::Reply(Value::Int(0)),
        || Step::Reply(Value::SimpleString("OK".into())),
        || Step::Error("ERR wrong lease id"),
        || Step::Refused,
    ];
    let mut said = Vec::new();
    for reply in replies {
        let redis = Scripted::new(move |_| reply());
        let decider = decider(&redis);
        let leased = leased_rule("uploads", 30_000, RedisFailure::Open);
        said.push(decider.release(&leased, KEY, "id-1").await);
        assert_eq!(redis.all_sent(), [["RL.RELEASE", KEY, "id-1"]]);
    }
    use Released::{Failed, Freed, NotHeld};
    assert_eq!(said, [Freed, NotHeld, Failed, Failed, Failed]);
}

/// A guard for a lease of `uploads` on [`KEY`], answered `answer`.
fn guard(decider: &Arc<Decider<Scripted>>, answer: LeaseAnswer) -> Option<LeaseGuard<Scripted>> {
    let leased = leased_rule("uploads", 30_000, RedisFailure::Open);
    LeaseGuard::asking(decider.clone(), leased, KEY.into()).answered(answer)
}

#[tokio::test]
async fn a_lease_held_is_released_once_when_dropped() {
    let redis = taking();
    let decider = Arc::new(decider(&redis));
    let held = guard(&decider, LeaseAnswer::Taken).expect("held");
    let id = held.id().to_owned();
    drop(held);
    eventually("the release", || leases(&decider, "released") == 1).await;
    assert_eq!(redis.sent("RL.RELEASE"), [["RL.RELEASE", KEY, id.as_str()]]);
    assert_eq!(releases(&decider, "dropped"), 1);
}

#[tokio::test]
async fn a_lease_not_taken_is_never_released() {
    let redis = taking();
    let decider = Arc::new(decider(&redis));
    assert!(guard(&decider, LeaseAnswer::NotTaken).is_none());
    // Anything spawned has run once this test's runtime yields a few times.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(redis.all_sent().is_empty());
}

#[tokio::test]
async fn a_lease_unanswered_is_given_back_at_once_and_counted_as_reclaimed() {
    let redis = taking();
    let decider = Arc::new(decider(&redis));
    assert!(guard(&decider, LeaseAnswer::Unknown).is_none());
    eventually("the reclaim", || leases(&decider, "reclaimed") == 1).await;
    assert_eq!(redis.sent("RL.RELEASE").len(), 1);
    assert_eq!(releases(&decider, "dropped"), 0, "it was never held");
    assert_eq!(leases(&decider, "released"), 0);
}

#[tokio::test]
async fn a_release_started_is_not_started_again_by_the_drop() {
    let redis = taking();
    let decider = Arc::new(decider(&redis));
    let mut held = guard(&decider, LeaseAnswer::Taken).expect("held");
    let settled = held.release(ReleaseCause::End).expect("started");
    settled.await.expect("answered");
    assert!(held.release(ReleaseCause::Error).is_none(), "once only");
    drop(held);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(redis.sent("RL.RELEASE").len(), 1);
    assert_eq!(releases(&decider, "end"), 1);
    assert_eq!(
        releases(&decider, "error") + releases(&decider, "dropped"),
        0
    );
}

#[tokio::test]
async fn a_body_sent_to_its_end_releases_its_lease_before_the_end_is_seen() {
    let redis = taking();
    // The end waits for the release up to the deadline: long enough that it never runs out.
    let mut patient = settings(5);
    patient.deadline = Duration::from_secs(10);
    let decider = Arc::new(Decider::new(redis.clone(), &patient, 100));
    let held = guard(&decider, LeaseAnswer::Taken);
    let body = Leased::new(Full::new(Bytes::from_static(b"hello")), held);
    let collected = body.collect().await.expect("a body").to_bytes();
    assert_eq!(&collected[..], b"hello");
    // The end was held back until Redis answered the release: it is counted already.
    assert_eq!(leases(&decider, "released"), 1);
    assert_eq!(releases(&decider, "end"), 1);
    assert_eq!(redis.sent("RL.RELEASE").len(), 1);
}

#[tokio::test]
async fn an_empty_body_releases_its_lease_at_once() {
    let redis = taking();
    let decider = Arc::new(decider(&redis));
    let held = guard(&decider, LeaseAnswer::Taken);
    let body = Leased::new(Empty::<Bytes>::new(), held);
    eventually("the release", || leases(&decider, "released") == 1).await;
    assert_eq!(releases(&decider, "end"), 1);
    drop(body);
    assert_eq!(redis.sent("RL.RELEASE").len(), 1);
}

/// A body that breaks off at once.
struct Broken;

impl Body for Broken {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(Some(Err(std::io::ErrorKind::ConnectionReset.into())))
    }
}

#[tokio::test]
async fn a_body_that_breaks_off_releases_its_lease_for_the_error() {
    let redis = taking();
    let decider = Arc::new(decider(&redis));
    let held = guard(&decider, LeaseAnswer::Taken);
    let body = Leased::new(Broken, held);
    assert!(body.collect().await.is_err());
    eventually("the release", || leases(&decider, "released") == 1).await;
    assert_eq!(releases(&decider, "error"), 1);
    assert_eq!(releases(&decider, "dropped"), 0, "once, for the error");
    assert_eq!(redis.sent("RL.RELEASE").len(), 1);
}

#[tokio::test]
async fn a_held_lease_is_renewed_until_it_is_found_gone() {
    let redis = Scripted::new(|words| match words[0].as_str() {
        "RL.RENEW" => Step::Reply(Value::Int(0)),
        _ => Step::Reply(Value::Int(1)),
    });
    let decider = Arc::new(decider(&redis));
    let leased = leased_rule("uploads", 600, RedisFailure::Open);
    let held = LeaseGuard::asking(decider.clone(), leased, KEY.into())
        .answered(LeaseAnswer::Taken)
        .expect("held");
    let id = held.id().to_owned();
    eventually("the renewal", || leases(&decider, "lost") == 1).await;
    assert_eq!(
        redis.sent("RL.RENEW"),
        [["RL.RENEW", KEY, id.as_str(), "600ms"]]
    );
    drop(held);
}
