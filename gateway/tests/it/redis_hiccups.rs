//! What a Redis hiccup, or one client's load, does to the limits: the circuit breaker opens
//! only when Redis has stopped answering (never because of a client's traffic or one short
//! stall), a rule that is not fail-closed is then enforced in the gateway's own memory at
//! its limit divided by the live gateways (`on_redis_failure = "local"`, the default),
//! refunds are never lost to an open breaker, and Redis lost, back and restarted are logged
//! once each.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use testkit::gateway::*;

/// The attacker's setting: a 5 ms deadline and the default breaker; a login rule that
/// fails closed and counts only wrong passwords; a default of 5 a minute per endpoint.
const RULES: &str = r#"
[[rule]]
name = "login"
path = "/auth/*"
limits = ["3/15m"]
per_endpoint = true
count = [401, 403]
on_redis_failure = "closed"

[default]
limits = ["5/1m"]
per_endpoint = true
"#;

/// Redis or Valkey, the upstream, and a gateway with [`RULES`] and `redis_extra` in its
/// `[redis]`; `warm`: once Redis has decided a request.
fn hiccup_stack(flavor: Flavor, redis_extra: &str, warm: bool) -> (Server, Upstream, Gateway) {
    let redis = ServerConfig::new(flavor).start();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &upstream.server_line(),
        &format!("{}{RULES}", redis_section_with(redis.port(), redis_extra)),
    );
    if warm {
        wait_until(Duration::from_secs(20), "a decision by Redis", || {
            gateway.get("/warm").has_ratelimit_headers()
        });
    }
    (redis, upstream, gateway)
}

/// Whether the breaker opened: the gauge, sampled, or the line it logs when it opens.
fn breaker_opened(gateway: &Gateway, sampled_open: &AtomicBool) -> bool {
    sampled_open.load(Relaxed) || gateway.log().contains("circuit breaker open")
}

/// Samples `rl_gateway_breaker_open` until `stop`, remembering whether it was ever 1.
fn watch_breaker(gateway: &Gateway, stop: &AtomicBool, seen_open: &AtomicBool) {
    while !stop.load(Relaxed) {
        if gateway.metrics().value("rl_gateway_breaker_open", &[]) == Some(1.0) {
            seen_open.store(true, Relaxed);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `GET` to fresh paths (each a new per-endpoint budget, so each one RL.HIT) from
/// `threads` keep-alive connections for `how_long`, and every tenth request `/target`;
/// returns how many `/target` requests were answered 200.
fn flood(gateway: &Gateway, threads: usize, how_long: Duration, pause: Duration) -> u64 {
    let target_passed = AtomicU64::new(0);
    let end = Instant::now() + how_long;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let target_passed = &target_passed;
            scope.spawn(move || {
                let agent = agent();
                let mut n = 0u64;
                while Instant::now() < end {
                    n += 1;
                    let path = if n.is_multiple_of(10) {
                        "/target".to_owned()
                    } else {
                        format!("/fresh/{t}/{n}")
                    };
                    let resp = send(&agent, "GET", &gateway.url(&path), &[]);
                    if path == "/target" && resp.status == 200 {
                        target_passed.fetch_add(1, Relaxed);
                    }
                    std::thread::sleep(pause);
                }
            });
        }
    });
    target_passed.load(Relaxed)
}

#[test]
fn one_clients_flood_never_opens_the_breaker_nor_lifts_a_limit() {
    each_flavor(|flavor| {
        let (_redis, _upstream, gateway) = hiccup_stack(flavor, "deadline_ms = 5", false);
        let stop = AtomicBool::new(false);
        let seen_open = AtomicBool::new(false);
        let mut logins = Vec::new();
        let target_passed = std::thread::scope(|scope| {
            scope.spawn(|| watch_breaker(&gateway, &stop, &seen_open));
            // Another client's correct logins meanwhile, one every 50 ms.
            let login = scope.spawn(|| {
                let agent = agent();
                let mut statuses = Vec::new();
                for _ in 0..40 {
                    let url = gateway.url("/auth/login");
                    statuses.push(send(&agent, "POST", &url, &[]).status);
                    std::thread::sleep(Duration::from_millis(50));
                }
                statuses
            });
            let passed = flood(&gateway, 32, Duration::from_secs(3), Duration::ZERO);
            logins = login.join().expect("the login thread");
            stop.store(true, Relaxed);
            passed
        });
        eprintln!("{flavor:?}: /target answered 200 {target_passed} times; logins {logins:?}");
        assert!(
            !breaker_opened(&gateway, &seen_open),
            "{flavor:?}: one client's traffic opened the breaker:\n{}",
            gateway.log()
        );
        // 5 by Redis, and at most 5 more by the local limit for decisions whose deadline
        // passed in the gateway's own queues.
        assert!(
            target_passed <= 10,
            "{flavor:?}: a 5/min endpoint answered 200 {target_passed} times"
        );
        let unavailable = logins.iter().filter(|&&s| s == 503).count();
        let refused = logins.iter().filter(|&&s| s == 429).count();
        // A decision whose own deadline passed in the gateway's queues still fails closed
        // (the flood loads both cores of a debug build), and Redis may count that hit when
        // it runs it (a 503 the client saw, counted): so a few 503s, and after three of
        // them a 429, remain possible. What is gone is the breaker answering 503 to every
        // user at once.
        assert!(
            (unavailable + refused) * 4 <= logins.len(),
            "{flavor:?}: {unavailable} 503s and {refused} 429s of {} correct logins: \
             {logins:?}",
            logins.len()
        );
    });
}

#[test]
fn a_20_ms_stall_neither_opens_the_breaker_nor_lifts_a_limit() {
    each_flavor(|flavor| {
        let (redis, _upstream, gateway) = hiccup_stack(flavor, "deadline_ms = 5", true);
        let stop = AtomicBool::new(false);
        let seen_open = AtomicBool::new(false);
        let target_passed = std::thread::scope(|scope| {
            scope.spawn(|| watch_breaker(&gateway, &stop, &seen_open));
            let traffic = scope.spawn(|| {
                flood(
                    &gateway,
                    8,
                    Duration::from_millis(1500),
                    Duration::from_millis(1),
                )
            });
            std::thread::sleep(Duration::from_millis(500));
            let stopped = Stopped::new(redis.pid());
            std::thread::sleep(Duration::from_millis(20));
            stopped.resume();
            // An endpoint not asked before the stall: its budget is not spent, so the deny
            // cache cannot answer for it while a breaker is open.
            let agent = agent();
            let late_passed = (0..50)
                .filter(|_| send(&agent, "GET", &gateway.url("/late"), &[]).status == 200)
                .count() as u64;
            let passed = traffic.join().expect("the traffic");
            stop.store(true, Relaxed);
            passed + late_passed
        });
        eprintln!(
            "{flavor:?}: /target and /late answered 200 {target_passed} times around a 20 ms stall"
        );
        // Two 5/min endpoints: 5 each by Redis, and at most 5 more each by local limits.
        assert!(
            target_passed <= 20,
            "{flavor:?}: two 5/min endpoints answered 200 {target_passed} times around a \
             20 ms stall"
        );
        assert!(
            !breaker_opened(&gateway, &seen_open),
            "{flavor:?}: a 20 ms stall opened the breaker:\n{}",
            gateway.log()
        );
    });
}

#[test]
fn correct_logins_answered_during_an_outage_are_given_back() {
    each_flavor(|flavor| {
        let (redis, _upstream, gateway) =
            hiccup_stack(flavor, "deadline_ms = 25\nbreaker_open_ms = 5000", true);
        let login_key = || keys(&redis, "*login*");
        let mut key = None;
        let (outage, minutes) = std::thread::scope(|scope| {
            // Three correct logins, charged now, answered by a slow upstream after Redis
            // stopped and the breaker opened.
            let logins: Vec<_> = (0..3)
                .map(|_| {
                    scope.spawn(|| {
                        let url = gateway.url("/auth/login?delay_ms=1500");
                        send(&agent(), "POST", &url, &[]).status
                    })
                })
                .collect();
            wait_until(Duration::from_secs(10), "the logins charged", || {
                let charged = login_key()
                    .first()
                    .filter(|key| !peek(&redis, key, "3 900000ms").allowed)
                    .cloned();
                key = charged.clone();
                charged.is_some()
            });
            let stopped = Stopped::new(redis.pid());
            let began = SystemTime::now();
            let outage = flood(
                &gateway,
                2,
                Duration::from_millis(800),
                Duration::from_millis(5),
            );
            // The local limit's 1-minute windows the flood fell in: two when it crossed
            // the clock's minute.
            let minutes = window_of(SystemTime::now(), 60) - window_of(began, 60) + 1;
            assert!(
                gateway.metrics().value("rl_gateway_breaker_open", &[]) == Some(1.0),
                "{flavor:?}: the breaker is open before the logins are answered:\n{}",
                gateway.log()
            );
            for login in logins {
                assert_eq!(login.join().expect("a login"), 200, "{flavor:?}");
            }
            stopped.resume();
            (outage, minutes)
        });
        let key = key.expect("the login key");
        // Given back in full: a hit would leave 2 of 3 (a peek answers as the next hit).
        wait_until(
            Duration::from_secs(10),
            "the refunds of the correct logins",
            || peek(&redis, &key, "3 900000ms").remaining == 2,
        );
        // Meanwhile the 5/min default held locally, in each minute.
        assert!(
            outage <= 5 * minutes,
            "{flavor:?}: /target {outage} during the outage, over {minutes} minute(s)"
        );
    });
}

/// The window of `seconds` since the epoch an instant falls in: a fixed window aligned to
/// the clock, in Redis and locally.
fn window_of(at: SystemTime, seconds: u64) -> u64 {
    at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() / seconds
}

#[test]
fn four_gateways_cut_off_from_redis_admit_the_limit_in_all_and_no_burst_after() {
    const LIMIT: u64 = 20;
    let shared = format!(
        "[[rule]]\nname = \"shared\"\npath = \"/s\"\nkey = \"global\"\nlimits = [\"{LIMIT}/1s\"]\n\
         algorithm = \"fixed\"\n"
    );
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateways: Vec<Gateway> = (0..4)
            .map(|_| {
                Gateway::start(
                    &upstream.server_line(),
                    &format!(
                        "{}{shared}",
                        redis_section_with(
                            redis.port(),
                            "deadline_ms = 20\nheartbeat_ms = 100\nbreaker_silence_ms = 50"
                        )
                    ),
                )
            })
            .collect();
        wait_until(Duration::from_secs(20), "four live gateways", || {
            redis::cmd("ZCARD")
                .arg("rl:gateways")
                .query::<i64>(&mut redis.conn())
                .is_ok_and(|n| n == 4)
        });
        // Every gateway reads the count at its next beat.
        std::thread::sleep(Duration::from_millis(400));
        let admitted = Arc::new(std::sync::Mutex::new(Vec::<SystemTime>::new()));
        let end = Instant::now() + Duration::from_millis(5500);
        let (frozen_from, frozen_to) = std::thread::scope(|scope| {
            for gateway in &gateways {
                let admitted = admitted.clone();
                scope.spawn(move || {
                    let agent = agent();
                    while Instant::now() < end {
                        if send(&agent, "GET", &gateway.url("/s"), &[]).status == 200 {
                            admitted.lock().expect("admitted").push(SystemTime::now());
                        }
                        std::thread::sleep(Duration::from_millis(3));
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(1000));
            let stopped = Stopped::new(redis.pid());
            let from = SystemTime::now();
            std::thread::sleep(Duration::from_millis(3200));
            let to = SystemTime::now();
            stopped.resume();
            (from, to)
        });
        let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
        for at in admitted.lock().expect("admitted").iter() {
            *per_window.entry(window_of(*at, 1)).or_default() += 1;
        }
        let first_frozen = window_of(frozen_from, 1) + 1;
        let resumed = window_of(frozen_to, 1);
        let ceiling = LIMIT + LIMIT / 10;
        for (&window, &count) in &per_window {
            let what = if window < first_frozen {
                "before the outage (Redis, and the local share once it stopped)"
            } else if window < resumed {
                "Redis stopped"
            } else {
                "Redis back"
            };
            // The window the outage began in holds what Redis counted before it plus the
            // local shares: up to twice the limit there. The windows of the outage are held
            // to the limit, plus a tenth for answers read past a window's edge. From the
            // one Redis came back in: what Redis admits before every gateway's write-back
            // of its local counts lands (one heartbeat at most), plus what local limits
            // admit for decisions that miss their deadline (four debug builds share two
            // cores here): measured at most 1.15 times the limit; held to 1.5.
            let allowed = if window == first_frozen - 1 {
                2 * LIMIT
            } else if window >= resumed {
                LIMIT + LIMIT / 2
            } else {
                ceiling
            };
            assert!(
                count <= allowed,
                "{flavor:?}: window {window} ({what}): {count} admitted, over {allowed}: \
                 {per_window:?}"
            );
        }
        let frozen: Vec<u64> = (first_frozen..resumed)
            .map(|w| per_window.get(&w).copied().unwrap_or(0))
            .collect();
        assert!(
            frozen.len() >= 2 && frozen.iter().all(|&n| n > 0),
            "{flavor:?}: the local limits admitted in every frozen window: {per_window:?}"
        );
        eprintln!("{flavor:?}: admitted per 1 s window: {per_window:?}");
    });
}

#[test]
fn redis_lost_back_and_restarted_are_logged_once_each() {
    each_flavor(|flavor| {
        let (redis, _upstream, gateway) = hiccup_stack(flavor, "heartbeat_ms = 100", true);
        std::thread::sleep(Duration::from_millis(300));
        let stopped = Stopped::new(redis.pid());
        wait_until(Duration::from_secs(10), "the loss logged", || {
            gateway.log_lines_with("Redis does not answer") == 1
        });
        std::thread::sleep(Duration::from_millis(500));
        stopped.resume();
        wait_until(Duration::from_secs(10), "the recovery logged", || {
            gateway.log_lines_with("Redis answers again") == 1
        });
        assert_eq!(
            gateway.log_lines_with("Redis does not answer"),
            1,
            "{flavor:?}: once per outage:\n{}",
            gateway.log()
        );
        // A restart with an empty dataset: every budget started afresh.
        let config = redis.shutdown("nosave");
        let redis = config.start();
        wait_until(Duration::from_secs(20), "the restart logged", || {
            gateway.log_lines_with("Redis restarted") == 1
        });
        assert!(
            gateway.log().contains("every budget started afresh"),
            "{flavor:?}:\n{}",
            gateway.log()
        );
        drop(redis);
    });
}
