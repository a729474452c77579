//! One key of every kind of state, for the tests that check something of every kind
//! (it survives a reload, `RL.RESET` deletes it, a refund empties it, it lost its expiry):
//! every algorithm in every tier shape, each key seeded with a few hits and returned with
//! its arguments, so that the caller can assert per key.

use super::{key, rl, Reply, ALGORITHMS};
use redis::Connection;

/// How a key's tiers are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiers {
    /// `limit window`.
    One,
    /// `limit window outer_limit outer_window`.
    Two,
    /// `limit window BURST burst`, for the bucket algorithms only (the others refuse BURST).
    Burst,
}

/// The numbers every shape is built from.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub limit: i64,
    pub window_ms: i64,
    /// The second tier of [`Tiers::Two`].
    pub outer_limit: i64,
    pub outer_window_ms: i64,
    /// The burst of [`Tiers::Burst`]; `None` leaves that shape out.
    pub burst: Option<i64>,
}

/// A key of one kind, after its seeding hits.
#[derive(Debug, Clone)]
pub struct SeededKey {
    pub key: Vec<u8>,
    pub algo: &'static str,
    pub tiers: Tiers,
    /// The `RL.HIT` arguments, without `COST`.
    pub spec: String,
    /// What a reply gives as `limit` for this key: the burst if there is one, else the
    /// first tier's limit.
    pub capacity: i64,
    /// The reply to the last seeding hit.
    pub last: Reply,
}

impl SeededKey {
    /// Whether the key is stored in the short form, whose time is the key's expiry: a
    /// single tier (with or without a burst) of token or gcra.
    pub fn time_in_expiry(&self) -> bool {
        matches!(self.algo, "token" | "gcra") && self.tiers != Tiers::Two
    }
}

/// The arguments and capacity of `algo` in `tiers` under `rule`; `None` for a shape the
/// algorithm does not take or the rule leaves out.
fn spec(rule: &Rule, algo: &str, tiers: Tiers) -> Option<(String, i64)> {
    let Rule {
        limit,
        window_ms,
        outer_limit,
        outer_window_ms,
        burst,
    } = *rule;
    let first = format!("{limit} {window_ms}ms");
    match tiers {
        Tiers::One => Some((format!("{first} ALGO {algo}"), limit)),
        Tiers::Two => Some((
            format!("{first} {outer_limit} {outer_window_ms}ms ALGO {algo}"),
            limit,
        )),
        Tiers::Burst => {
            let burst = burst.filter(|_| matches!(algo, "token" | "gcra"))?;
            Some((format!("{first} ALGO {algo} BURST {burst}"), burst))
        }
    }
}

/// Puts one key of every algorithm in every tier shape of `rule` on `con`, named after
/// `what` (with NUL, CR LF and non-UTF-8 bytes, see [`key`]), and makes one `RL.HIT` of
/// each cost of `costs` on it; every one of them must be allowed.
pub fn seed_every_shape(
    con: &mut Connection,
    what: &str,
    rule: &Rule,
    costs: &[i64],
) -> Vec<SeededKey> {
    let mut seeded = Vec::new();
    for algo in ALGORITHMS {
        for (n, tiers) in [Tiers::One, Tiers::Two, Tiers::Burst]
            .into_iter()
            .enumerate()
        {
            let Some((spec, capacity)) = spec(rule, algo, tiers) else {
                continue;
            };
            let key = key(&format!("{what}:{algo}"), n);
            let mut last = None;
            for cost in costs {
                let reply = rl(con, "RL.HIT", &key, &format!("{spec} COST {cost}"));
                assert!(reply.allowed, "seeding {spec} COST {cost}: {reply:?}");
                last = Some(reply);
            }
            let last = last.unwrap_or_else(|| panic!("seeding {spec}: no cost given"));
            seeded.push(SeededKey {
                key,
                algo,
                tiers,
                spec,
                capacity,
                last,
            });
        }
    }
    seeded
}
