//! The shape most request tests share: send a run of request variants through one stack,
//! then assert what the run came to, namely each answer's status, how many requests the
//! upstream served, and which keys Redis holds. One assertion, so that a test says only
//! its variants and its expectations.

use super::{keys, Server, Upstream};

/// What a run of requests should leave behind.
#[derive(Debug, Clone, Copy)]
pub struct Spent<'a> {
    /// Each answer's status, in the order sent.
    pub statuses: &'a [u16],
    /// How many requests the upstream has served by the end of the run; `None` when no
    /// upstream is counted (check mode has none).
    pub served: Option<u64>,
    /// Which keys are read: a `KEYS` pattern (`"*"` for every key, `"rl:*"` for the
    /// gateway's prefix).
    pub pattern: &'a str,
    /// The keys matching `pattern` at the end of the run, sorted.
    pub keys: &'a [&'a str],
}

impl Spent<'_> {
    /// Refused, every one with `status`: nothing reached the upstream, nothing was
    /// counted (no key at all in Redis).
    pub fn all_refused(statuses: &[u16]) -> Spent<'_> {
        Spent {
            statuses,
            served: Some(0),
            pattern: "*",
            keys: &[],
        }
    }
}

/// Sends each of `requests` with `send`, which answers the status (and may assert more
/// of each answer), then asserts the run against `expected`: the statuses in order, the
/// upstream's count when `upstream` is given, the keys matching `expected.pattern`.
/// `what` names the case in every failure (the flavor, say).
pub fn assert_spent<T>(
    what: &str,
    redis: &Server,
    upstream: Option<&Upstream>,
    requests: impl IntoIterator<Item = T>,
    send: impl FnMut(T) -> u16,
    expected: Spent<'_>,
) {
    let statuses: Vec<u16> = requests.into_iter().map(send).collect();
    assert_eq!(statuses, expected.statuses, "{what}: the statuses");
    assert_eq!(
        upstream.map(Upstream::requests),
        expected.served,
        "{what}: the requests the upstream served"
    );
    assert_eq!(
        keys(redis, expected.pattern),
        expected.keys,
        "{what}: the keys matching {}",
        expected.pattern
    );
}
