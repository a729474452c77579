//! envoyproxy/ratelimit's per-limit statistics (pure): how one descriptor's hits split
//! into `over_limit`, `near_limit`, `within_limit` and `shadow_mode`, from what its key
//! held before the hits and its limit. A request that straddles a threshold splits: the
//! hits past the limit are over, those between the near-limit threshold and the limit are
//! near, and a request wholly past a threshold counts all of its hits there.

use super::descriptors::DescriptorLimit;
use crate::decider::RuleOutcome;
use crate::metrics::HitCounts;
use crate::verdict::Verdict;

/// The hits of a request of `cost` units on a limit of `limit` whose key held `before`
/// (the near-limit threshold is `limit × ratio`, rounded down); `shadow`: the limit lets
/// through what is over it, which is counted in `shadow_mode` too.
pub(super) fn split(limit: u64, before: u64, cost: u64, ratio: f64, shadow: bool) -> HitCounts {
    let after = before.saturating_add(cost);
    // An f64 holds every limit up to 2^53 exactly; the product is rounded down as theirs.
    let near = (limit as f64 * ratio).floor() as u64;
    let mut hits = HitCounts {
        total: cost,
        ..HitCounts::default()
    };
    if after > limit {
        let past = if before >= limit { cost } else { after - limit };
        hits.over_limit = past;
        if before < limit {
            hits.near_limit = limit - near.max(before);
        }
        if shadow {
            hits.shadow_mode = past;
        }
    } else {
        hits.within_limit = cost;
        if after > near {
            hits.near_limit = if before >= near { cost } else { after - near };
        }
    }
    hits
}

/// The hits of one descriptor of `cost` units on `limit`, from what the charge of the key
/// that decided it came to (`None`: not charged, as when another descriptor was over
/// first).
pub(super) fn of_outcome(
    outcome: Option<&RuleOutcome>,
    limit: &DescriptorLimit,
    cost: u64,
    ratio: f64,
) -> HitCounts {
    let all_over = HitCounts {
        total: cost,
        over_limit: cost,
        shadow_mode: if limit.shadow { cost } else { 0 },
        ..HitCounts::default()
    };
    let only_total = HitCounts {
        total: cost,
        ..HitCounts::default()
    };
    // What the key held before the hits, from a verdict after them (`counted`) or one that
    // counted nothing.
    let from = |verdict: &Verdict, counted: bool| {
        let tier = verdict.binding_tier();
        let held = tier.limit.saturating_sub(tier.remaining);
        let before = if counted {
            held.saturating_sub(cost)
        } else {
            held
        };
        split(tier.limit, before, cost, ratio, limit.shadow)
    };
    match outcome {
        Some(RuleOutcome::Allowed(v)) => from(v, true),
        Some(RuleOutcome::Local { verdict, .. }) => from(verdict, verdict.allowed()),
        Some(RuleOutcome::Uncounted(v)) => from(v, false),
        Some(RuleOutcome::Denied { verdict, cached }) => match cached {
            // The deny cache says it is over, not by how much: all of it, as theirs counts
            // a hit its local cache refuses.
            true => all_over,
            false => from(verdict, false),
        },
        // A shadow or quota key over its limit says nothing of what it holds: all of it
        // is counted over.
        Some(RuleOutcome::ShadowDenied) => all_over,
        Some(RuleOutcome::Failed(_) | RuleOutcome::NotAsked | RuleOutcome::Unlimited) | None => {
            only_total
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split;
    use crate::metrics::HitCounts;

    fn counts(total: u64, over: u64, near: u64, within: u64, shadow: u64) -> HitCounts {
        HitCounts {
            total,
            over_limit: over,
            near_limit: near,
            within_limit: within,
            shadow_mode: shadow,
        }
    }

    /// The thresholds of a limit of 10 at 0.8: near above 8, over above 10.
    #[test]
    fn a_request_splits_its_hits_at_the_thresholds_it_straddles() {
        // Wholly below the near threshold: within.
        assert_eq!(split(10, 0, 5, 0.8, false), counts(5, 0, 0, 5, 0));
        // 7 -> 9: one hit past 8 is near; all within.
        assert_eq!(split(10, 7, 2, 0.8, false), counts(2, 0, 1, 2, 0));
        // 8 -> 10: both near (the threshold itself is not near), within.
        assert_eq!(split(10, 8, 2, 0.8, false), counts(2, 0, 2, 2, 0));
        // 9 -> 10: already past near: all of it near.
        assert_eq!(split(10, 9, 1, 0.8, false), counts(1, 0, 1, 1, 0));
        // 9 -> 12: two over, the one up to the limit near; none within.
        assert_eq!(split(10, 9, 3, 0.8, false), counts(3, 2, 1, 0, 0));
        // 0 -> 20: ten over, the near band (8..10) near, the rest nowhere, as theirs.
        assert_eq!(split(10, 0, 20, 0.8, false), counts(20, 10, 2, 0, 0));
        // Already at the limit: every hit over.
        assert_eq!(split(10, 10, 4, 0.8, false), counts(4, 4, 0, 0, 0));
        // A shadow limit counts what is over in shadow_mode too.
        assert_eq!(split(10, 9, 3, 0.8, true), counts(3, 2, 1, 0, 2));
        assert_eq!(split(10, 12, 3, 0.8, true), counts(3, 3, 0, 0, 3));
    }

    #[test]
    fn the_near_threshold_is_the_limit_times_the_ratio_rounded_down() {
        // 7 × 0.8 = 5.6: near above 5.
        assert_eq!(split(7, 5, 1, 0.8, false), counts(1, 0, 1, 1, 0));
        assert_eq!(split(7, 4, 1, 0.8, false), counts(1, 0, 0, 1, 0));
        // Ratio 1: nothing is near before it is over.
        assert_eq!(split(10, 9, 1, 1.0, false), counts(1, 0, 0, 1, 0));
        assert_eq!(split(10, 9, 2, 1.0, false), counts(2, 1, 0, 0, 0));
        // No hits (a look): nothing at all.
        assert_eq!(split(10, 9, 0, 0.8, false), counts(0, 0, 0, 0, 0));
    }
}
