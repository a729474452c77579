//! One key's allowance: the units Redis granted this gateway (`RL.TAKE`), spent in memory
//! oldest first, each lot only while it still counts. Pure: the time is passed in.
//!
//! A lot is what one take granted. It may be spent until the window Redis counted it in
//! ends (fixed and sliding windows: derived from the take's reply, measured from when the
//! take was sent, so never later than Redis's own end) and, for every algorithm, within
//! `hold` of its take: a bucket's unit spent later than taken would let a burst through
//! that the bucket refilled meanwhile for another gateway. What is left of a lot goes back
//! to Redis before either ends.

use super::rate::Arrivals;
use super::QuotaSettings;
use crate::rules::Rule;
use crate::verdict::Verdict;
use smallvec::SmallVec;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Units of one take, and how long they count.
#[derive(Debug, Clone)]
pub(super) struct Lot {
    pub(super) units: u64,
    /// When the take was sent: no later than when Redis counted the units.
    asked_at: Instant,
    /// The units are spent before then, and what is left goes back to Redis at then: a
    /// little before they stop counting, so that it arrives while their window still
    /// counts them.
    give_back_at: Instant,
    /// The take's answer, for the headers of the requests the lot admits.
    verdict: Verdict,
}

impl Lot {
    /// A lot of `units` from a take sent at `asked_at` that answered `verdict`, for a rule
    /// whose tiers' windows are `windows` (ms, in the reply's tier order; empty when the
    /// windows do not bound the lot: buckets and the log).
    pub(super) fn new(
        units: u64,
        asked_at: Instant,
        verdict: Verdict,
        windows: &[u64],
        settings: &QuotaSettings,
    ) -> Lot {
        let hold = settings.hold;
        let counts_for = window_left(&verdict, windows).map_or(hold, |left| left.min(hold));
        let spend_until = asked_at + counts_for;
        // Given back one interval before the end (a round trip is far shorter), or at the
        // hold when that comes first; never before the take.
        let lead = settings.interval.min(counts_for / 4);
        Lot {
            units,
            asked_at,
            give_back_at: spend_until - lead,
            verdict,
        }
    }

    fn spendable(&self, now: Instant) -> bool {
        self.units > 0 && now < self.give_back_at
    }
}

/// How long after the take the units still count in their window: the soonest end over the
/// tiers. `None` when the reply does not give every tier (the Functions library answers
/// only the binding tier) or the rule's windows are not given.
///
/// After a grant a fixed window's `reset_after_ms` is its end; a sliding window's is its
/// end plus one window (the current count weighs on the next window): the current window
/// ends at `reset - window` when that is positive. A calendar tier's nominal length may be
/// shorter than its period: the end is then taken earlier than it is, the safe side.
fn window_left(verdict: &Verdict, windows: &[u64]) -> Option<Duration> {
    let tiers = verdict.tiers();
    if windows.is_empty() || tiers.len() != windows.len() {
        return None;
    }
    tiers
        .iter()
        .zip(windows)
        .map(|(tier, &window)| match tier.reset_after_ms {
            reset if reset > window => reset - window,
            reset => reset,
        })
        .min()
        .map(Duration::from_millis)
}

/// What spending from an allowance came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Spend {
    /// Spent here: the answer for the request's headers.
    Spent(Verdict),
    /// Not enough units that still count: Redis decides.
    Short,
}

/// One key's allowance.
pub(super) struct Allowance {
    /// The rule the units were taken under: they are spent for it only, and given back
    /// with its words.
    pub(super) rule: Arc<Rule>,
    /// Oldest first; rarely more than two (the lot being spent and its refill).
    pub(super) lots: SmallVec<[Lot; 2]>,
    /// The units of the last grant: a refill is asked when half of them are spent.
    last_grant: u64,
    /// A take for this key is on its way: no other is started.
    pub(super) taking: bool,
    pub(super) arrivals: Arrivals,
    /// Takes answer only the binding tier: the units of one cannot be held (see
    /// `Quotas::granted`).
    pub(super) unbatched: bool,
}

impl Allowance {
    pub(super) fn new(rule: Arc<Rule>, now: Instant) -> Allowance {
        Allowance {
            rule,
            lots: SmallVec::new(),
            last_grant: 0,
            taking: false,
            arrivals: Arrivals::new(now),
            unbatched: false,
        }
    }

    /// Units held that may still be spent.
    pub(super) fn held(&self, now: Instant) -> u64 {
        self.lots
            .iter()
            .filter(|lot| lot.spendable(now))
            .map(|lot| lot.units)
            .sum()
    }

    /// Spends `cost` units, oldest lots first, when the spendable ones add up to it.
    pub(super) fn spend(&mut self, cost: u64, now: Instant) -> Spend {
        if self.held(now) < cost {
            return Spend::Short;
        }
        let mut due = cost;
        for lot in self.lots.iter_mut().filter(|lot| lot.spendable(now)) {
            let part = due.min(lot.units);
            lot.units -= part;
            due -= part;
            if due == 0 {
                break;
            }
        }
        // The newest lot's answer speaks for the key: the latest Redis gave, with what is
        // held here now.
        let held = self.held(now);
        match self.lots.last() {
            Some(lot) => {
                let age = now.saturating_duration_since(lot.asked_at).as_millis();
                let age = u64::try_from(age).unwrap_or(u64::MAX);
                Spend::Spent(lot.verdict.holding(held, age))
            }
            None => Spend::Short,
        }
    }

    /// Adds what a take granted beyond the request it was for.
    pub(super) fn add(&mut self, lot: Lot, granted: u64) {
        self.last_grant = granted;
        if lot.units > 0 {
            self.lots.push(lot);
        }
    }

    /// Whether a refill should be asked now: half of the last grant is spent (what is held
    /// is at most half of it), none is on its way, and the key is busy enough to batch.
    pub(super) fn wants_refill(&self, batch: u64, now: Instant) -> bool {
        !self.taking && batch > 1 && self.held(now).saturating_mul(2) <= self.last_grant
    }

    /// Takes out the units of every lot whose time to go back has come (all of them with
    /// `all`): the units to give back.
    pub(super) fn due(&mut self, now: Instant, all: bool) -> u64 {
        let mut units = 0;
        self.lots.retain(|lot| {
            let going = all || now >= lot.give_back_at || lot.units == 0;
            if going {
                // Past its window's end a give-back would be refused by the module
                // anyway (never into another window): it is sent all the same, which
                // costs a call and is always safe.
                units += lot.units;
            }
            !going
        });
        units
    }

    /// Whether the allowance holds nothing and asks nothing: it can be forgotten.
    pub(super) fn is_idle(&self) -> bool {
        self.lots.is_empty() && !self.taking
    }
}
