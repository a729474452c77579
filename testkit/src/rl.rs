//! The module's calls and what they reply (RESP2 arrays of five integers), error texts, and
//! small helpers that read keys and the server's clock.

use super::*;

/// The five integers of an RL.HIT reply (RESP2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub allowed: bool,
    pub limit: i64,
    pub remaining: i64,
    pub reset_after_ms: i64,
    pub retry_after_ms: i64,
}

impl Reply {
    /// The five integers in reply order, as [`decode_reply`] takes them.
    pub fn values(&self) -> Vec<i64> {
        vec![
            i64::from(self.allowed),
            self.limit,
            self.remaining,
            self.reset_after_ms,
            self.retry_after_ms,
        ]
    }
}

/// Runs `RL.HIT key <args...>` and decodes the RESP2 array.
pub fn hit(con: &mut Connection, key: impl redis::ToRedisArgs, args: &[&str]) -> Reply {
    let values: Vec<i64> = redis::cmd("RL.HIT")
        .arg(key)
        .arg(args)
        .query(con)
        .expect("RL.HIT replies");
    decode_reply(&values)
}

pub fn decode_reply(values: &[i64]) -> Reply {
    let [allowed, limit, remaining, reset_after_ms, retry_after_ms] = values else {
        panic!("RL.HIT replied {values:?}, not five integers");
    };
    assert!(
        *allowed == 0 || *allowed == 1,
        "allowed is 0 or 1: {values:?}"
    );
    Reply {
        allowed: *allowed == 1,
        limit: *limit,
        remaining: *remaining,
        reset_after_ms: *reset_after_ms,
        retry_after_ms: *retry_after_ms,
    }
}

/// Runs a command that must fail and returns the error's full text (code and message).
pub fn error_text(con: &mut Connection, cmd: &redis::Cmd) -> String {
    match cmd.query::<Value>(con) {
        Ok(Value::ServerError(err)) => server_error_text(&err),
        Ok(other) => panic!("expected an error, got {other:?}"),
        Err(err) => {
            let code = err.code().unwrap_or("");
            let detail = err.detail().unwrap_or("");
            format!("{code} {detail}").trim().to_string()
        }
    }
}

fn server_error_text(err: &redis::ServerError) -> String {
    format!("{} {}", err.code(), err.details().unwrap_or(""))
        .trim()
        .to_string()
}

/// `GET` as raw bytes, `None` when the key is missing.
pub fn get_bytes(con: &mut Connection, key: impl redis::ToRedisArgs) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

/// `PEXPIRETIME` (absolute expiry in ms; -1 no expiry, -2 no key).
pub fn pexpiretime(con: &mut Connection, key: impl redis::ToRedisArgs) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(con)
        .expect("PEXPIRETIME")
}

/// The server's clock in ms, read on `con`.
pub fn server_ms(con: &mut Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con).expect("TIME");
    secs * 1_000 + micros / 1_000
}

/// Waits out the last `margin_ms` before the server's clock reaches a multiple of
/// `window_ms`, when fixed windows of that length could end mid-test and reset counts the
/// test expects to keep. Never waits longer than the margin (and a second past the edge).
pub fn stay_clear_of_window_edges(server: &Server, window_ms: i64, margin_ms: i64) {
    let into_window = server.time_ms().rem_euclid(window_ms);
    if into_window > window_ms - margin_ms {
        let until_past_edge = window_ms - into_window + 1_000;
        std::thread::sleep(Duration::from_millis(until_past_edge as u64));
    }
}

/// A window of about an hour, in whole minutes, whose current epoch-aligned instance ends
/// at least two minutes from now: fixed and sliding windows of it (and of its multiples,
/// whose edges are among its edges) keep their counts for a whole test without a sleep.
pub fn window_clear_of_edges(con: &mut Connection) -> i64 {
    const MARGIN_MS: i64 = 120_000;
    let now = server_ms(con);
    [60, 59, 61, 58, 62]
        .into_iter()
        .map(|minutes| minutes * 60_000)
        .find(|w| w - now.rem_euclid(*w) > MARGIN_MS)
        .expect("some window near an hour has two minutes left")
}

/// A key name per purpose and number, with NUL, CR LF and non-UTF-8 bytes in it.
pub fn key(what: &str, n: usize) -> Vec<u8> {
    [
        b"rl:".as_slice(),
        what.as_bytes(),
        b"\0\xff\r\n",
        n.to_string().as_bytes(),
    ]
    .concat()
}

/// GET and PEXPIRETIME together: what "nothing was written" compares.
pub fn stored(con: &mut Connection, key: &[u8]) -> (Option<Vec<u8>>, i64) {
    (get_bytes(&mut *con, key), pexpiretime(con, key))
}

/// Whether a transaction on `watcher` that WATCHed `key` before `meanwhile` ran still
/// executes: it does exactly when nothing signalled the key as modified.
pub fn watch_survives(
    watcher: &mut Connection,
    key: impl redis::ToRedisArgs,
    meanwhile: impl FnOnce(),
) -> bool {
    redis::cmd("WATCH").arg(key).exec(watcher).expect("WATCH");
    meanwhile();
    let executed: Option<(String,)> = redis::pipe()
        .atomic()
        .cmd("PING")
        .query(watcher)
        .expect("EXEC");
    executed.is_some()
}

/// Every algorithm's name, as `ALGO` takes it.
pub const ALGORITHMS: [&str; 5] = ["fixed", "sliding", "log", "token", "gcra"];

/// The RESP3 field names of a decision, in reply order.
pub const FIELDS: [&str; 5] = [
    "allowed",
    "limit",
    "remaining",
    "reset_after_ms",
    "retry_after_ms",
];

/// Runs `command key <spec split on spaces>` and decodes the RESP2 array of five.
pub fn rl(con: &mut Connection, command: &str, key: &[u8], spec: &str) -> Reply {
    let args: Vec<&str> = spec.split_whitespace().collect();
    let values: Vec<i64> = redis::cmd(command)
        .arg(key)
        .arg(&args)
        .query(con)
        .unwrap_or_else(|e| panic!("{command} {key:?} {spec}: {e}"));
    decode_reply(&values)
}
