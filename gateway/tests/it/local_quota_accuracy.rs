//! Local quota's accuracy (`local_quota = true`): four gateways, each its own process, share
//! one server and one key (`key = "global"`); clients on every gateway ask, window after
//! window, twice the limit and then four fifths of it, once per algorithm. Each gateway
//! spends in its own memory the units it took from Redis in batches, so the question is
//! whether the four together ever admit more than Redis granted. The quieter windows are
//! what makes it a question: they end with units still held, which the busy window after
//! them must not spend.
//!
//! - fixed and sliding windows: in every window, aligned as the module aligns them, the
//!   requests surely decided in it (sent and answered within it) are at most the limit;
//! - token, gcra and log: in every aligned window at most the module's own bound with the
//!   window `hold_ms` longer (burst + limit x (window + hold) / window), and over the whole
//!   run, which began on a fresh key, at most what the module can grant in that time; the
//!   log also at most the limit in any `window - hold`.
//!
//! What the gateways leave unspent while requests are denied (the shortfall: the limit
//! less what a window admitted at most, in the windows with denials) is printed in a table
//! with the Redis calls, not asserted: a client that falls behind on a busy machine leaves
//! a window short too. `cargo test -p rl-gateway --test it -- local_quota_accuracy
//! --nocapture` prints it; `bench/quota_accuracy.py` writes it to
//! bench/QUOTA-ACCURACY-RESULTS.md.

use testkit::gateway::paced::{sleep_until_micros, unix_micros, Pace, Timed};
use testkit::gateway::windows::{tally, WindowTally};
use testkit::gateway::*;

const GATEWAYS: usize = 4;
const CLIENTS_PER_GATEWAY: usize = 4;
const LIMIT: u64 = 250;
const WINDOW_MS: i64 = 500;
/// Windows of each run, busy and quiet in turn, the first busy.
const WINDOWS: usize = 10;
/// Requests per second in a busy and in a quiet window: twice and 4/5 of the limit.
const BUSY: u64 = 2 * LIMIT * 1000 / WINDOW_MS as u64;
const QUIET: u64 = 4 * LIMIT * 1000 / WINDOW_MS as u64 / 5;
/// Batches of up to 8 % of the limit (20 units), sized on 100 ms of requests: a gateway
/// sees 25 in a busy window and 10 in a quiet one, so batches form in both. (The rates
/// are low enough for debug builds on a busy 2-core machine.)
const LOCAL_QUOTA: &str =
    "[local_quota]\ninterval_ms = 100\nhold_ms = 200\nmax_batch_percent = 8\n";
const HOLD_MS: i64 = 200;
const ALGORITHMS: [&str; 5] = ["fixed", "sliding", "token", "gcra", "log"];

/// Set (to anything), the rules leave out `local_quota`: every request is decided by
/// Redis, the baseline of the shortfall, which `bench/quota_accuracy.py` runs beside.
const WITHOUT_LOCAL_QUOTA: &str = "RL_ACCURACY_WITHOUT_LOCAL_QUOTA";

fn local_quota() -> bool {
    std::env::var_os(WITHOUT_LOCAL_QUOTA).is_none()
}

/// One rule per algorithm, on its own path and key. A rule fails closed: a failed-open
/// 200 would be an admission no budget paid for. The baseline leaves out every line of
/// local quota, so that it runs on a gateway without it too.
fn rules() -> String {
    let (section, opt_in) = if local_quota() {
        (LOCAL_QUOTA, "local_quota = true\n")
    } else {
        ("", "")
    };
    let mut text = section.to_string();
    for algorithm in ALGORITHMS {
        text.push_str(&format!(
            r#"
[[rule]]
name = "{algorithm}"
path = "/{algorithm}"
key = "global"
limits = ["{LIMIT}/{WINDOW_MS}ms"]
algorithm = "{algorithm}"
on_redis_failure = "closed"
{opt_in}"#
        ));
    }
    text
}

/// The module's calls a run made, from `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default)]
struct Calls {
    take: i64,
    refund: i64,
    hit: i64,
}

impl Calls {
    fn read(redis: &Server) -> Calls {
        let calls = |name| redis.command_calls(name).unwrap_or(0);
        Calls {
            take: calls("rl.take"),
            refund: calls("rl.refund"),
            hit: calls("rl.hit"),
        }
    }

    fn since(self, before: Calls) -> Calls {
        Calls {
            take: self.take - before.take,
            refund: self.refund - before.refund,
            hit: self.hit - before.hit,
        }
    }
}

/// One algorithm's run: its requests, the windows they fell in, the calls it made.
struct Run {
    algorithm: &'static str,
    from_ms: i64,
    requests: Vec<Timed>,
    windows: Vec<WindowTally>,
    calls: Calls,
}

/// Sends the crowd at `/<algorithm>` through every gateway for [`WINDOWS`] windows, from
/// the start of a window on.
fn run(redis: &Server, gateways: &[Gateway], algorithm: &'static str) -> Run {
    let before = Calls::read(redis);
    // The next window that starts at least 200 ms from now, so the clients are ready.
    let window_us = WINDOW_MS * 1000;
    let from_us = (unix_micros() + 200_000).div_euclid(window_us) * window_us + window_us;
    let pace = Pace {
        gateways: gateways.iter().map(|g| g.url("")).collect(),
        path: format!("/{algorithm}"),
        clients_per_gateway: CLIENTS_PER_GATEWAY,
        from_us,
        window_us,
        rates: (0..WINDOWS)
            .map(|w| if w % 2 == 0 { BUSY } else { QUIET })
            .collect(),
    };
    let requests = pace.run();
    // The units still held are given back within hold_ms (and a sweep); count those calls.
    sleep_until_micros(unix_micros() + 3 * HOLD_MS * 1000);
    let calls = Calls::read(redis).since(before);
    Run {
        algorithm,
        from_ms: from_us / 1000,
        windows: tally(&requests, WINDOW_MS),
        requests,
        calls,
    }
}

/// The most an aligned window may admit: the limit for the fixed and sliding windows;
/// for the others the module's bound with the window `hold_ms` longer (a unit is spent
/// within hold_ms of its grant), their capacity (burst = limit) plus the refill.
fn window_bound(algorithm: &str) -> u64 {
    match algorithm {
        "fixed" | "sliding" => LIMIT,
        _ => LIMIT + LIMIT * (WINDOW_MS + HOLD_MS) as u64 / WINDOW_MS as u64,
    }
}

/// The log's own bound, `hold_ms` shorter: a unit spent at t was stamped in the log at its
/// take, within hold_ms before t, so the units spent in any `window - hold` were stamped
/// within one window, which holds at most the limit (2 ms less for the module's whole-ms
/// clock). The most allowed requests surely decided in one such span of the run.
fn most_in_a_log_span(run: &Run) -> u64 {
    let span_us = (WINDOW_MS - HOLD_MS - 2) * 1000;
    let mut allowed: Vec<&Timed> = run.requests.iter().filter(|r| r.allowed()).collect();
    allowed.sort_by_key(|r| r.sent_us);
    (0..allowed.len())
        .map(|i| {
            let end = allowed[i].sent_us + span_us;
            allowed[i..]
                .iter()
                .take_while(|r| r.sent_us < end)
                .filter(|r| r.answered_us < end)
                .count() as u64
        })
        .max()
        .unwrap_or(0)
}

/// The most the module can grant a fresh key in `span_us`: a bucket its capacity plus its
/// refill; a log the limit per window started. The module reads the clock in whole ms, so
/// the span it sees may be 1 ms longer.
fn run_bound(algorithm: &str, span_us: i64) -> u64 {
    let window_us = WINDOW_MS * 1000;
    let span_us = span_us + 1000;
    let ceil = |n: i64| (n + window_us - 1).div_euclid(window_us) as u64;
    match algorithm {
        "log" => LIMIT * ceil(span_us),
        _ => LIMIT + ceil(LIMIT as i64 * span_us),
    }
}

impl Run {
    fn allowed(&self) -> u64 {
        self.requests.iter().filter(|r| r.allowed()).count() as u64
    }

    fn with_status(&self, status: u16) -> u64 {
        self.requests.iter().filter(|r| r.status == status).count() as u64
    }

    /// From the first request sent to the last answer.
    fn span_us(&self) -> i64 {
        let first = self.requests.iter().map(|r| r.sent_us).min().unwrap_or(0);
        let last = self
            .requests
            .iter()
            .map(|r| r.answered_us)
            .max()
            .unwrap_or(0);
        last - first
    }

    fn most_certain(&self) -> u64 {
        self.windows.iter().map(|w| w.certain).max().unwrap_or(0)
    }

    /// The limit less what each busy window with denials admitted at most, but the first
    /// (which starts cold, and a bucket full). A quiet window asks less than the limit.
    fn shortfalls(&self) -> Vec<i64> {
        (2..WINDOWS)
            .step_by(2)
            .filter_map(|w| {
                let start = self.from_ms + w as i64 * WINDOW_MS;
                self.windows.iter().find(|t| t.start_ms == start)
            })
            .filter(|t| t.denied > 0)
            .map(|t| LIMIT as i64 - t.admitted_at_most() as i64)
            .collect()
    }
}

/// The run's line of the summary table (see [`HEADER`]).
fn row(flavor: Flavor, run: &Run) -> String {
    // The log's tightest check is its span, the others' the aligned window.
    let tightest = match run.algorithm {
        "log" => (most_in_a_log_span(run), LIMIT),
        algorithm => (run.most_certain(), window_bound(algorithm)),
    };
    let shortfalls = run.shortfalls();
    let (mean, max) = match shortfalls.iter().max() {
        Some(max) => (
            format!(
                "{:.1}",
                shortfalls.iter().sum::<i64>() as f64 / shortfalls.len() as f64
            ),
            max.to_string(),
        ),
        None => ("n/a".into(), "n/a".into()),
    };
    let redis_calls = run.calls.take + run.calls.refund + run.calls.hit;
    format!(
        "| {flavor:?} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} | {mean} | {max} | {} | {} | {} | {:.1} |",
        run.algorithm,
        if local_quota() { "yes" } else { "no" },
        run.requests.len(),
        run.allowed(),
        run.with_status(429),
        run.with_status(503),
        tightest.0,
        tightest.1,
        run.allowed(),
        run_bound(run.algorithm, run.span_us()),
        run.calls.take,
        run.calls.refund,
        run.calls.hit,
        run.requests.len() as f64 / redis_calls.max(1) as f64,
    )
}

const HEADER: &str = "| server | algorithm | local quota | requests | allowed | denied | 503 | most certain in a window (log: in window - hold) / bound | allowed in the run / bound | shortfall mean | shortfall max | RL.TAKE | RL.REFUND | RL.HIT | requests per Redis call |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

/// Each window of the run as `certain+ambiguous/denied`, printed after every run.
fn per_window(flavor: Flavor, run: &Run) -> String {
    let cells: Vec<String> = run
        .windows
        .iter()
        .map(|w| format!("{}+{}/{}", w.certain, w.ambiguous, w.denied))
        .collect();
    format!(
        "{flavor:?} {} windows (certain+ambiguous/denied): {}",
        run.algorithm,
        cells.join(" ")
    )
}

/// What a run got wrong: over-admission, or local quota not in use. (Whether the crowd
/// went above the limit depends on how fast this machine is now: the table says, in its
/// denials, and a run without any is printed as such.)
fn inaccuracies(flavor: Flavor, run: &Run) -> Vec<String> {
    let what = format!("{flavor:?} {}", run.algorithm);
    if run.with_status(429) == 0 {
        println!("{what}: never above the limit (a busy machine)");
    }
    let mut wrong = Vec::new();
    // A cold key, or one whose take is on its way, hits as without local quota.
    if local_quota() && run.calls.take == 0 {
        wrong.push(format!("{what}: no batch taken: {:?}", run.calls));
    }
    let bound = window_bound(run.algorithm);
    for window in run.windows.iter().filter(|w| w.certain > bound) {
        wrong.push(format!(
            "{what}: the window starting at {} ms admitted {} > {bound}",
            window.start_ms, window.certain
        ));
    }
    if run.algorithm == "log" && most_in_a_log_span(run) > LIMIT {
        wrong.push(format!(
            "{what}: {} admitted within {} ms > {LIMIT}",
            most_in_a_log_span(run),
            WINDOW_MS - HOLD_MS - 2
        ));
    }
    let run_bound = run_bound(run.algorithm, run.span_us());
    if run.allowed() > run_bound {
        wrong.push(format!(
            "{what}: the run admitted {} > {run_bound} in {} µs",
            run.allowed(),
            run.span_us()
        ));
    }
    wrong
}

/// Every algorithm on every flavour runs and is printed before the verdict, so that a
/// failure still shows the whole table.
#[test]
fn four_gateways_sharing_a_key_never_admit_more_than_redis_granted() {
    let mut table = vec![HEADER.to_string()];
    let mut wrong = Vec::new();
    println!(
        "setup: {GATEWAYS} gateways x {CLIENTS_PER_GATEWAY} clients; {LIMIT} per {WINDOW_MS} \
         ms; {WINDOWS} windows, in turn {BUSY} and {QUIET} requests/s; {}",
        LOCAL_QUOTA.trim().replace('\n', " ")
    );
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let rest = format!("{}{}", redis_section(redis.port(), ""), rules());
        let gateways: Vec<Gateway> = (0..GATEWAYS)
            .map(|_| Gateway::start("mode = \"check\"\n", &rest))
            .collect();
        for algorithm in ALGORITHMS {
            let run = run(&redis, &gateways, algorithm);
            println!("{}", per_window(flavor, &run));
            table.push(row(flavor, &run));
            wrong.extend(inaccuracies(flavor, &run));
        }
    });
    println!("{}", table.join("\n"));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn timed(sent_us: i64, answered_us: i64, status: u16) -> Timed {
    Timed {
        sent_us,
        answered_us,
        status,
        failed_open: false,
    }
}

/// The accounting the test rests on, without servers: a request is certain in a window
/// only when sent and answered within it, else ambiguous in each window it overlaps.
#[test]
fn a_request_counts_as_certain_only_within_one_window() {
    let windows = tally(
        &[
            timed(1_000_000, 1_999_999, 200),
            timed(1_999_000, 2_001_000, 200),
            timed(2_500_000, 2_500_100, 429),
            timed(2_600_000, 2_600_100, 503),
            timed(2_700_000, 2_700_100, 200),
        ],
        1000,
    );
    let counts: Vec<(i64, u64, u64, u64)> = windows
        .iter()
        .map(|w| (w.start_ms, w.certain, w.ambiguous, w.denied))
        .collect();
    assert_eq!(counts, [(1000, 1, 1, 0), (2000, 1, 1, 1)]);
    assert_eq!(windows[0].admitted_at_most(), 2);
}
