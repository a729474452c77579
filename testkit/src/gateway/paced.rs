//! A paced crowd: client threads spread over several gateways, each sending `GET path` at
//! a steady pace, window after window (a rate for each), every request timed when it was
//! sent and when its answer came. The times are microseconds since the Unix epoch, the
//! clock the module decides with (the servers run on this machine), so that a test can
//! tell in which of the module's windows a decision fell (see [`super::windows`]).
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
    /// When the first window starts, µs since the Unix epoch.
    pub from_us: i64,
    /// How long each window lasts, µs.
    pub window_us: i64,
    /// Requests per second over every client of every gateway, in each window in turn;
    /// none is sent after the last window.
    pub rates: Vec<u64>,
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
        assert!(
            self.window_us > 0 && self.rates.iter().all(|&r| r > 0),
            "a crowd needs windows and rates: {self:?}"
        );
        let threads: Vec<_> = (0..clients)
            .map(|c| {
                let url = format!("{}{}", self.gateways[c % self.gateways.len()], self.path);
                let client = Client {
                    url,
                    index: c as i64,
                    clients: clients as i64,
                    pace: self.clone(),
                };
                std::thread::spawn(move || client.run())
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().expect("a client thread panicked"))
            .collect()
    }

    fn until_us(&self) -> i64 {
        self.from_us + self.window_us * self.rates.len() as i64
    }
}

/// One client of `clients`: in each window it sends one request per period, where the
/// period is what makes all of them together send at the window's rate; the clients'
/// slots are spread evenly over one period.
struct Client {
    url: String,
    index: i64,
    clients: i64,
    pace: Pace,
}

impl Client {
    fn period_us(&self, at_us: i64) -> i64 {
        let window = (at_us - self.pace.from_us).div_euclid(self.pace.window_us);
        let rate = self.pace.rates[window.clamp(0, self.pace.rates.len() as i64 - 1) as usize];
        (1_000_000 * self.clients / rate as i64).max(1)
    }

    fn run(self) -> Vec<Timed> {
        let agent = agent();
        let until_us = self.pace.until_us();
        let mut timed = Vec::new();
        let mut slot =
            self.pace.from_us + self.period_us(self.pace.from_us) * self.index / self.clients;
        while slot < until_us {
            sleep_until_micros(slot);
            let sent_us = unix_micros();
            if sent_us >= until_us {
                break;
            }
            let resp = send(&agent, "GET", &self.url, &[]);
            let answered_us = unix_micros();
            assert!(
                matches!(resp.status, 200 | 429 | 503),
                "GET {}: neither allowed, denied nor failed closed: {resp:?}",
                self.url
            );
            timed.push(Timed {
                sent_us,
                answered_us,
                status: resp.status,
                failed_open: resp.has("x-ratelimit-fail-open"),
            });
            let period_us = self.period_us(slot);
            slot += period_us;
            if slot < answered_us - period_us {
                slot = answered_us;
            }
        }
        timed
    }
}
