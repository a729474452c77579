//! A paced crowd: client threads spread over several gateways, each sending `GET path` at
//! a steady pace between two wall-clock times, every request timed when it was sent and
//! when its answer came. The times are microseconds since the Unix epoch, the clock the
//! module decides with (the servers run on this machine), so that a test can tell in which
//! of the module's windows a decision fell (see [`super::windows`]).
//!
//! The pace is kept by the wall clock rather than by the answers (an open loop): a client
//! whose answer is slow sends its next request at its next slot, not later, so the demand
//! stays what the test asked for. A client that fell behind by more than one slot (the
//! machine was busy) drops the slots it missed instead of sending them in a burst.

use super::{agent, send};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One request of the crowd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timed {
    /// When the request was about to be written, µs since the Unix epoch.
    pub sent_us: i64,
    /// When its whole answer had been read, µs since the Unix epoch.
    pub answered_us: i64,
    pub status: u16,
    /// Whether the answer said the gateway failed open (`X-RateLimit-Fail-Open`): a 200
    /// that no budget paid for.
    pub failed_open: bool,
}

impl Timed {
    /// A 200 that a budget paid for.
    pub fn allowed(&self) -> bool {
        self.status == 200 && !self.failed_open
    }
}

/// What the crowd sends, where and how fast.
#[derive(Debug, Clone)]
pub struct Pace {
    /// The base URL of each gateway (`http://127.0.0.1:<port>`).
    pub gateways: Vec<String>,
    /// The path every request asks for.
    pub path: String,
    /// Client threads per gateway, each with its own connection.
    pub clients_per_gateway: usize,
    /// Requests per second over every client of every gateway.
    pub total_per_second: u64,
    /// When the first slot is, µs since the Unix epoch.
    pub from_us: i64,
    /// No request is sent at or after this time, µs since the Unix epoch.
    pub until_us: i64,
}

/// Now, µs since the Unix epoch.
pub fn unix_micros() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since.as_micros()).expect("µs since 1970 fit in i64")
}

/// Sleeps until `at_us` (µs since the Unix epoch); returns at once if it has passed.
pub fn sleep_until_micros(at_us: i64) {
    let wait = at_us - unix_micros();
    if wait > 0 {
        std::thread::sleep(Duration::from_micros(wait.unsigned_abs()));
    }
}

impl Pace {
    /// Runs the crowd to its end and returns every request, in no particular order. Every
    /// answer must be a 200, a 429 or a 503; anything else, or a broken connection, panics.
    pub fn run(&self) -> Vec<Timed> {
        let clients = self.gateways.len() * self.clients_per_gateway;
        assert!(clients > 0, "a crowd needs a gateway and a client");
        assert!(self.total_per_second > 0, "a crowd needs a rate");
        // Each client sends one request per `period`; their first slots are spread evenly
        // over one period, so that together they send at the total rate.
        let period_us = 1_000_000 * clients as i64 / self.total_per_second as i64;
        let threads: Vec<_> = (0..clients)
            .map(|c| {
                let url = format!("{}{}", self.gateways[c % self.gateways.len()], self.path);
                let first = self.from_us + period_us * c as i64 / clients as i64;
                let until = self.until_us;
                std::thread::spawn(move || one_client(&url, first, period_us, until))
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().expect("a client thread panicked"))
            .collect()
    }
}

/// One client: a request at each slot from `first_us` on, until `until_us`.
fn one_client(url: &str, first_us: i64, period_us: i64, until_us: i64) -> Vec<Timed> {
    let agent = agent();
    let mut timed = Vec::new();
    let mut slot = first_us;
    while slot < until_us {
        sleep_until_micros(slot);
        let sent_us = unix_micros();
        if sent_us >= until_us {
            break;
        }
        let resp = send(&agent, "GET", url, &[]);
        let answered_us = unix_micros();
        assert!(
            matches!(resp.status, 200 | 429 | 503),
            "GET {url}: neither allowed, denied nor failed closed: {resp:?}"
        );
        timed.push(Timed {
            sent_us,
            answered_us,
            status: resp.status,
            failed_open: resp.has("x-ratelimit-fail-open"),
        });
        slot += period_us;
        if slot < answered_us - period_us {
            slot = answered_us;
        }
    }
    timed
}
