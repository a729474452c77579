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
    /// The units are spent before then, and what is left goes back to Redis at then: an
    /// interval before they stop counting, so that it arrives while their window still
    /// counts them.
    give_back_at: Instant,
    /// For units of a window: a give-back is sent only until then (half an interval before
    /// the window ends). Redis takes a refund off the window current when it runs, so one
    /// that arrived after the end would be taken off the next window, which never counted
    /// these units, and let its budget be spent twice; past then the units are left to end
    /// with their window. `None` for a bucket's or the log's units, which may go back at
    /// any time.
    refund_until: Option<Instant>,
    /// When the window the units count in ends, if before the hold.
    window_end: Option<Instant>,
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
        // Given back one interval before the hold ends (a round trip is far shorter).
        let at_hold = asked_at + hold - settings.interval.min(hold / 4);
        let (give_back_at, refund_until, window_end) = match window_left(&verdict, windows) {
            Some(left) if left <= hold => {
                let ends = asked_at + left;
                let lead = settings.interval;
                let give_back_at = ends.checked_sub(lead).unwrap_or(asked_at).max(asked_at);
                let refund_until = ends.checked_sub(lead / 2).unwrap_or(asked_at);
                (give_back_at, Some(refund_until), Some(ends))
            }
            // The hold ends first, or the units are a bucket's: they may go back any time.
            Some(_) => (at_hold, None, None),
            None if windows.is_empty() => (at_hold, None, None),
            // The window's end is unknown: nothing may be held (see `Quotas::granted`).
            None => (asked_at, Some(asked_at), Some(asked_at)),
        };
        Lot {
            units,
            asked_at,
            give_back_at,
            refund_until,
            window_end,
            verdict,
        }
    }

    fn spendable(&self, now: Instant) -> bool {
        self.units > 0 && now < self.give_back_at
    }

    /// Whether `now` is in the last interval of the window this lot counts in (when it
    /// ends before the hold): units taken then could neither be spent nor safely given
    /// back before the window ends.
    fn in_window_tail(&self, now: Instant) -> bool {
        self.window_end
            .is_some_and(|end| now >= self.give_back_at && now < end)
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
pub(super) fn window_left(verdict: &Verdict, windows: &[u64]) -> Option<Duration> {
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
    /// What Redis last answered a request of this key charged by `RL.HIT` while a take
    /// was out: the take's answer may be older than it.
    pub(super) hit_while_taking: Option<Verdict>,
    /// The newest lot as taken, kept after it is spent or given back for when its window
    /// ends.
    last_lot: Option<Lot>,
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
            hit_while_taking: None,
            last_lot: None,
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

    /// Puts `units` back into the lot of the take sent at `taken_at`, while it may still
    /// be spent (its time to go back has not come): they were taken in it and spent for a
    /// request that another rule denied.
    pub(super) fn put_back(&mut self, taken_at: Instant, units: u64, now: Instant) -> bool {
        let lot = self
            .lots
            .iter_mut()
            .find(|lot| lot.asked_at == taken_at && now < lot.give_back_at);
        match lot {
            Some(lot) => {
                lot.units = lot.units.saturating_add(units);
                true
            }
            None => false,
        }
    }

    /// Adds what a take granted beyond the request it was for.
    pub(super) fn add(&mut self, lot: Lot, granted: u64) {
        self.last_grant = granted;
        self.last_lot = Some(lot.clone());
        if lot.units > 0 {
            self.lots.push(lot);
        }
    }

    /// A hit of this key answered `verdict`. Every lot's take was answered before it was
    /// sent, so it is the newer word on what Redis has left, unless a take is out: that
    /// take's answer may be older or newer, and gets the lower of the two when it lands.
    pub(super) fn saw(&mut self, verdict: &Verdict) {
        if self.taking {
            self.hit_while_taking = Some(match self.hit_while_taking.take() {
                Some(earlier) => verdict.lowest(&earlier),
                None => verdict.clone(),
            });
        } else if let Some(lot) = self.lots.last_mut() {
            lot.verdict = lot.verdict.lowest(verdict);
        }
    }

    /// Whether a refill should be asked now: half of the last grant is spent (what is held
    /// is at most half of it), none is on its way, and the key is busy enough to batch.
    pub(super) fn wants_refill(&self, batch: u64, now: Instant) -> bool {
        !self.taking && batch > 1 && self.held(now).saturating_mul(2) <= self.last_grant
    }

    /// Takes out the units of every lot whose time to go back has come (all of them with
    /// `all`): the units to give back. A window's units found too late to go back safely
    /// (see [`Lot::refund_until`]) are dropped: they end with their window.
    pub(super) fn due(&mut self, now: Instant, all: bool) -> u64 {
        let mut units = 0;
        self.lots.retain(|lot| {
            let going = all || now >= lot.give_back_at || lot.units == 0;
            if going && lot.refund_until.is_none_or(|until| now <= until) {
                units += lot.units;
            }
            !going
        });
        units
    }

    /// Whether `now` is in the last interval of the window the newest lot counted in: a
    /// batch taken then could not be spent, nor safely given back, before the window ends,
    /// so the key's requests take their own units until it has ended.
    pub(super) fn in_window_tail(&self, now: Instant) -> bool {
        self.last_lot
            .as_ref()
            .is_some_and(|lot| lot.in_window_tail(now))
    }

    /// Whether the allowance holds nothing and asks nothing: it can be forgotten.
    pub(super) fn is_idle(&self) -> bool {
        self.lots.is_empty() && !self.taking
    }
}
