//! `concurrency = N` and `lease_ttl`: a rule that limits requests in flight, checked for
//! what a lease can do. A lease is taken before forwarding and given back when the response
//! ends, so only proxy mode sees both ends; and one `RL.ACQUIRE` decides it, so it cannot
//! share a call with other rules (stacking), a policy or a refund by status.

use super::schema::{CountSection, RuleSection, DEFAULT_LEASE_TTL};
use crate::rules::{Concurrency, Limit};
use ratelimit_core::args::Settings;
use ratelimit_core::lease::args::parse_ttl;
use ratelimit_core::lease::MAX_LEASES;

/// The rule's concurrency limit, if it has one, checked; `limit` is its (checked) limit.
pub(super) fn concurrency(
    section: &RuleSection,
    limit: &Limit,
) -> Result<Option<Concurrency>, String> {
    let Some(max) = section.concurrency else {
        if section.lease_ttl.is_some() {
            return Err("lease_ttl needs concurrency = N".into());
        }
        return Ok(None);
    };
    let cap = u64::try_from(MAX_LEASES).unwrap_or(u64::MAX);
    if !(1..=cap).contains(&max) {
        return Err(format!(
            "concurrency = {max}: must be from 1 to {cap} requests in flight"
        ));
    }
    let ttl_text = section.lease_ttl.as_deref().unwrap_or(DEFAULT_LEASE_TTL);
    let lease_ttl_ms = parse_ttl(ttl_text.trim().as_bytes(), &Settings::default())
        .ok()
        .and_then(|ms| u64::try_from(ms).ok())
        .ok_or_else(|| {
            format!(
                "lease_ttl '{ttl_text}' must be a duration like \"30s\" or \"500ms\", from 1ms \
                 to {}",
                ratelimit_core::args::format_duration(Settings::default().max_window_ms)
            )
        })?;
    if matches!(limit, Limit::Policy { .. }) {
        return Err(
            "concurrency with policy: a lease counts the rule's own limits in the same call, \
             and a policy's are stored in Redis; give limits instead"
                .into(),
        );
    }
    if matches!(&section.count, Some(CountSection::Statuses(_))) {
        return Err(
            "concurrency with count = [statuses]: the lease's hit is counted when it is taken, \
             before any status is known"
                .into(),
        );
    }
    let tier_options = section.algorithm.is_some()
        || section.burst.is_some()
        || section.tz.is_some()
        || section.anchor.is_some()
        || section.cost != 1;
    if *limit == Limit::Unlimited && tier_options {
        return Err(
            "algorithm, burst, tz, anchor and cost apply to limits, and this concurrency rule \
             has none: a request takes one slot"
                .into(),
        );
    }
    if section.stack {
        return Err(
            "concurrency with stack = true: a lease and its limits are one RL.ACQUIRE, which \
             cannot be all or nothing with other rules' keys"
                .into(),
        );
    }
    if section.mode == "shadow" {
        return Err(
            "concurrency with mode = \"shadow\": a shadow rule must not hold slots that \
             enforced requests then lack"
                .into(),
        );
    }
    let concurrency = Concurrency::new(max, lease_ttl_ms, limit);
    crate::module_grammar::check_acquire(&concurrency.acquire_args).map_err(|e| e.to_string())?;
    Ok(Some(concurrency))
}

#[cfg(test)]
mod tests {
    use crate::config::{assert_refused, parse, parse_after_server};

    fn rule(rest: &str) -> String {
        format!("[[rule]]\nname = \"llm\"\npath = \"/llm\"\n{rest}\n")
    }

    #[test]
    fn a_lease_takes_its_tiers_in_one_call() {
        let set = parse_after_server(&rule(
            "concurrency = 2\nlease_ttl = \"30s\"\nlimits = [\"10/1m\"]",
        ))
        .unwrap()
        .rules;
        let lease = set.rules[0]
            .concurrency
            .clone()
            .expect("a concurrency rule");
        assert_eq!((lease.max, lease.lease_ttl_ms), (2, 30_000));
        assert_eq!(lease.acquire_args, ["2", "30000ms", "10", "60000ms"]);
        let alone = parse_after_server(&rule("concurrency = 3")).unwrap().rules;
        let lease = alone.rules[0]
            .concurrency
            .clone()
            .expect("concurrency alone");
        assert_eq!(
            lease.acquire_args,
            ["3", "60000ms"],
            "lease_ttl defaults to 60s"
        );
    }

    #[test]
    fn what_a_lease_cannot_do_is_refused() {
        assert_refused(&[
            (
                &rule("concurrency = 0"),
                "concurrency = 0: must be from 1 to 10000",
            ),
            (
                &rule("concurrency = 10001"),
                "concurrency = 10001: must be from 1 to 10000",
            ),
            (
                &rule("concurrency = 2\nlease_ttl = \"0s\""),
                "lease_ttl '0s' must be a duration",
            ),
            (
                &rule("concurrency = 2\nlease_ttl = \"soon\""),
                "lease_ttl 'soon'",
            ),
            (&rule("concurrency = 2\nlease_ttl = \"400d\""), "to 366d"),
            (
                &rule("limits = [\"5/1m\"]\nlease_ttl = \"30s\""),
                "lease_ttl needs concurrency",
            ),
            (
                &rule("concurrency = 2\npolicy = \"p\""),
                "concurrency with policy",
            ),
            (
                &rule("concurrency = 2\nlimits = [\"5/1m\"]\ncount = [200]"),
                "count = [statuses]",
            ),
            (
                &rule("concurrency = 2\nstack = true"),
                "concurrency with stack = true",
            ),
            (
                &rule("concurrency = 2\nmode = \"shadow\""),
                "mode = \"shadow\"",
            ),
            (
                &rule("concurrency = 2\ncost = 2"),
                "has none: a request takes one slot",
            ),
            (
                &rule("concurrency = 2\nlimits = [\"5/1m\"]\nburst = 3"),
                "RL.HIT would refuse '5 60000ms BURST 3'",
            ),
            (
                "[[rule]]\nname = \"all\"\npath = \"/**\"\nlimits = [\"5/1m\"]\nstack = true\n\
                 [[rule]]\nname = \"llm\"\npath = \"/llm\"\nconcurrency = 2\n",
                "rule 'llm': concurrency after the stacking rule 'all'",
            ),
        ]);
        let check =
            "[server]\nlisten = \"127.0.0.1:8080\"\nmode = \"check\"\n[default]\nconcurrency = 2\n";
        let error = parse(check).unwrap_err().to_string();
        assert!(
            error.contains("concurrency needs mode = \"proxy\""),
            "{error}"
        );
    }
}
