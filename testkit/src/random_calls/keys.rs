//! The keys and policy names that every client of a random-traffic run shares, so that the
//! module's calls and other clients' writes meet on the same keys.

use super::rng::Rng;

/// How many keys the clients share: few enough that calls, foreign writes and
/// transactions keep colliding.
pub const SHARED_KEYS: usize = 24;

/// The key that one client fills with an `ALGO log` state of 10,000 entries, the slowest
/// state a call can meet. Nobody else writes it.
pub const BIG_LOG_KEY: &[u8] = b"random:big-log";

/// Shared key number `n`: plain names, the empty name, and names with NUL, 0xff and CR LF.
pub fn shared_key(n: usize) -> Vec<u8> {
    match n % 6 {
        0 if n == 0 => Vec::new(),
        1 => format!("random:\0{n}").into_bytes(),
        2 => [b"\xff\xferandom".as_slice(), n.to_string().as_bytes()].concat(),
        3 => format!("random:\r\n{n}").into_bytes(),
        _ => format!("random:{n}").into_bytes(),
    }
}

/// A random shared key.
pub fn key(rng: &mut Rng) -> Vec<u8> {
    shared_key(rng.below(SHARED_KEYS))
}

/// A random policy name: a few real ones, the empty name and binary ones.
pub fn policy_name(rng: &mut Rng) -> Vec<u8> {
    rng.pick(&[
        &b"api"[..],
        b"login",
        b"p2",
        b"p3",
        b"",
        b"\0nul",
        b"\xff",
        b"API",
    ])
    .to_vec()
}
