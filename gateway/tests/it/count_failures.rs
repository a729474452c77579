//! `count = [401, 403]`: only failed logins use the budget. Each request is charged before
//! it is forwarded and refunded, before the client gets the answer, when the upstream's
//! status is not in the list; so successes never add up, also in parallel, and parallel
//! failures can never get past the limit.

use std::sync::Barrier;
use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "login"
methods = ["POST"]
path = "/auth/*"
per_endpoint = true
limits = ["5/1h"]
algorithm = "log"
count = [401, 403]
"#;

/// The key the gateway uses for `POST <path>` from this host.
fn login_key(path: &str) -> String {
    format!("rl:{{ip:127.0.0.1}}:login:POST {path}")
}

/// The units still available on `path`, read in Redis itself: `RL.PEEK` answers what a
/// hit would, so an allowed look leaves `remaining` after counting one more.
fn remaining_in_redis(redis: &Server, path: &str) -> i64 {
    let look = peek(redis, &login_key(path), "5 1h ALGO log");
    if look.allowed {
        look.remaining + 1
    } else {
        look.remaining
    }
}

fn start(flavor: Flavor) -> (Server, Upstream, Gateway) {
    stack(flavor, RULES)
}

#[test]
fn five_failed_logins_then_429_and_the_upstream_saw_five() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = start(flavor);
        for (i, status) in [401, 403, 401, 403, 401].into_iter().enumerate() {
            let resp = gateway.post(&format!("/auth/login?status={status}"));
            assert_eq!(resp.status, status, "{flavor:?} attempt {i}: {resp:?}");
            assert_eq!(
                resp.remaining(),
                4 - i as i64,
                "{flavor:?} attempt {i}: {resp:?}"
            );
        }
        assert_eq!(remaining_in_redis(&redis, "/auth/login"), 0, "{flavor:?}");
        let denied = gateway.post("/auth/login?status=401");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        denied.retry_after();
        // A success cannot get through either: the charge comes first.
        let denied = gateway.post("/auth/login");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        assert_eq!(upstream.requests(), 5, "{flavor:?}");
        // Another endpoint of the rule has its own budget (per_endpoint).
        let other = gateway.post("/auth/reset?status=401");
        assert_eq!(other.status, 401, "{flavor:?}: {other:?}");
        assert_eq!(other.remaining(), 4, "{flavor:?}: {other:?}");
        assert_eq!(
            gateway
                .metrics()
                .counter("rl_gateway_refunds_total", &[("rule", "login")]),
            0.0,
            "{flavor:?}: failures are not refunded"
        );
    });
}

#[test]
fn successful_logins_are_never_counted() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = start(flavor);
        let mut header_remaining = Vec::new();
        for i in 0..20 {
            let resp = gateway.post("/auth/login");
            assert_eq!(resp.status, 200, "{flavor:?} success {i}: {resp:?}");
            header_remaining.push(resp.remaining());
            // The refund is done before the answer is returned.
            assert_eq!(
                remaining_in_redis(&redis, "/auth/login"),
                5,
                "{flavor:?}: after success {i} the whole budget is back"
            );
        }
        assert_eq!(
            header_remaining,
            vec![5; 20],
            "{flavor:?}: a refunded answer shows the budget after the refund"
        );
        assert_eq!(upstream.requests(), 20, "{flavor:?}");
        let failure = gateway.post("/auth/login?status=401");
        assert_eq!(failure.status, 401, "{flavor:?}: {failure:?}");
        assert_eq!(
            failure.remaining(),
            4,
            "{flavor:?}: only the failure counts: {failure:?}"
        );
        let metrics = gateway.metrics();
        assert_eq!(
            metrics.counter("rl_gateway_refunds_total", &[("rule", "login")]),
            20.0,
            "{flavor:?}:\n{}",
            metrics.text
        );
    });
}

#[test]
fn parallel_successes_never_see_a_429() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = start(flavor);
        // Five clients (as many as the limit) with four logins each: at most five charges
        // are outstanding at any time, and each is refunded before its client goes on.
        let clients = 5;
        let barrier = Barrier::new(clients);
        let statuses: Vec<u16> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..clients)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        (0..4)
                            .map(|_| gateway.post("/auth/login").status)
                            .collect::<Vec<u16>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("client thread"))
                .collect()
        });
        assert_eq!(statuses, vec![200; 20], "{flavor:?}");
        assert_eq!(upstream.requests(), 20, "{flavor:?}");
        assert_eq!(remaining_in_redis(&redis, "/auth/login"), 5, "{flavor:?}");
        let failure = gateway.post("/auth/login?status=403");
        assert_eq!(failure.status, 403, "{flavor:?}: {failure:?}");
        assert_eq!(failure.remaining(), 4, "{flavor:?}: {failure:?}");
    });
}

#[test]
fn twelve_parallel_failures_forward_exactly_five() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = start(flavor);
        let clients = 12;
        let barrier = Barrier::new(clients);
        let mut statuses: Vec<u16> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..clients)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        gateway.post("/auth/login?status=401").status
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("client thread"))
                .collect()
        });
        statuses.sort();
        let mut expected = vec![401; 5];
        expected.extend([429; 7]);
        assert_eq!(statuses, expected, "{flavor:?}");
        assert_eq!(upstream.requests(), 5, "{flavor:?}");
        assert_eq!(remaining_in_redis(&redis, "/auth/login"), 0, "{flavor:?}");
    });
}
