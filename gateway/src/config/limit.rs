//! A rule's limit: `limits = ["5/1m", ...]` with its algorithm, burst and cost, or a named
//! `policy`. Only what the TOML says is read here (which fields go together); what the
//! limit means is checked by the one limit compiler, [`crate::rules::limit`], which the
//! Envoy descriptors use too.

use super::schema::RuleSection;
use crate::rules::limit::{compile, tier, LimitError};
use crate::rules::Limit;

/// The limit `section` names, checked as the module will check the call.
pub(super) fn limit(section: &RuleSection) -> Result<Limit, String> {
    if section.cost == 0 {
        return Err("cost must be at least 1".into());
    }
    let limit = match (&section.limits, &section.policy) {
        (Some(_), Some(_)) => return Err("has both limits and policy: choose one".into()),
        // A concurrency limit alone: the lease is the whole limit.
        (None, None) if section.concurrency.is_some() => return Ok(Limit::Unlimited),
        (None, None) => {
            return Err("needs limits (e.g. [\"5/1m\"]), a policy name or concurrency".into())
        }
        (None, Some(policy)) => {
            if section.algorithm.is_some()
                || section.burst.is_some()
                || section.tz.is_some()
                || section.anchor.is_some()
            {
                return Err(
                    "algorithm, burst, tz and anchor belong to the policy, not to a rule naming \
                     one"
                    .into(),
                );
            }
            Limit::Policy {
                name: policy.clone(),
                cost: section.cost,
            }
        }
        (Some(limits), None) if limits.is_empty() => return Ok(Limit::Unlimited),
        (Some(limits), None) => Limit::Tiers {
            tiers: limits
                .iter()
                .map(|l| tier(l))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?,
            algorithm: section.algorithm.clone(),
            burst: section.burst,
            tz: section.tz.clone(),
            anchor: section.anchor,
            cost: section.cost,
        },
    };
    compile(limit).map_err(|error| match error {
        LimitError::PolicyName(_) => format!("policy name {error}"),
        error => error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{assert_refused, parse_after_server as with};

    #[test]
    fn mistakes_in_a_limit_are_named() {
        assert_refused(&[
            (
                "[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5\"]\n",
                "limit '5'",
            ),
            (
                "[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"0/1m\"]\n",
                "at least 1",
            ),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\n", "needs limits"),
            (
                "[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\npolicy = \"p\"\n",
                "both limits and policy",
            ),
            (
                "[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\ncost = 6\n",
                "cost 6",
            ),
            (
                "[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"1000000000000000/1m\"]\n",
                "at most",
            ),
        ]);
    }

    #[test]
    fn calendar_limits_send_the_module_its_words() {
        use crate::rules::{call_args, Limit};
        let rule = |rest: &str| format!("[[rule]]\nname = \"a\"\npath = \"/a\"\n{rest}\n");
        let section =
            |rest: &str| with(&rule(rest)).map(|config| config.rules.rules[0].limit.clone());
        let limit =
            section("limits = [\"10/1s\", \"1000/month\"]\ntz = \"Europe/Paris\"\nanchor = 5")
                .expect("valid");
        assert!(matches!(limit, Limit::Tiers { .. }));
        assert_eq!(
            call_args(&limit),
            [
                "10",
                "1000ms",
                "1000",
                "month",
                "TZ",
                "Europe/Paris",
                "ANCHOR",
                "5"
            ]
        );
        let day = section("limits = [\"5/Day\"]").expect("valid");
        assert_eq!(call_args(&day), ["5", "day"]);
        for (rest, reason) in [
            (
                "limits = [\"5/month\"]\ntz = \"Mars/Olympus\"",
                "TZ must be an IANA time zone name",
            ),
            (
                "limits = [\"5/1d\"]\ntz = \"Europe/Paris\"",
                "TZ applies to calendar windows",
            ),
            (
                "limits = [\"5/day\"]\nanchor = 3",
                "ANCHOR applies to a month window",
            ),
            (
                "limits = [\"5/month\"]\nanchor = 32",
                "ANCHOR must be a day of the month",
            ),
            (
                "limits = [\"5/month\"]\nalgorithm = \"gcra\"",
                "count as ALGO fixed",
            ),
            ("policy = \"p\"\ntz = \"UTC\"", "belong to the policy"),
        ] {
            let error = section(rest).expect_err(rest);
            assert!(error.contains(reason), "{rest}: {error}");
        }
    }

    /// What the module refuses is refused when the rules load, with the module's own
    /// reason: the expected texts come from the core's parser, not from a copy here.
    #[test]
    fn the_module_grammar_is_the_cores() {
        use ratelimit_core::args::{ArgError, Settings};
        use ratelimit_core::duration::DurationError;
        use ratelimit_core::limiter::AlgorithmKind;
        let rule = |rest: &str| format!("[[rule]]\nname = \"a\"\npath = \"/a\"\n{rest}\n");
        let settings = Settings::default();
        let nine = ["\"1/1s\""; 9].join(", ");
        let cases = [
            (
                "limits = [\"5/400d\"]".to_owned(),
                ArgError::WindowAboveMax(settings.max_window_ms),
            ),
            (
                "limits = [\"5/367d\"]".to_owned(),
                ArgError::WindowAboveMax(settings.max_window_ms),
            ),
            (
                "limits = [\"5/1w\"]".to_owned(),
                ArgError::Window(DurationError::UnknownUnit),
            ),
            (
                "limits = [\"5/0s\"]".to_owned(),
                ArgError::Window(DurationError::TooShort),
            ),
            (format!("limits = [{nine}]"), ArgError::TooManyTiers),
            (
                "limits = [\"5/1m\"]\nalgorithm = \"leaky\"".to_owned(),
                ArgError::Algo,
            ),
            (
                "limits = [\"5/1m\"]\nburst = 3".to_owned(),
                ArgError::BurstNotApplicable,
            ),
            (
                "limits = [\"5/1m\", \"9/1h\"]\nalgorithm = \"gcra\"\nburst = 3".to_owned(),
                ArgError::BurstNotApplicable,
            ),
            (
                "limits = [\"5/1m\"]\nalgorithm = \"token\"\nburst = 0".to_owned(),
                ArgError::Burst,
            ),
            (
                "limits = [\"10001/1m\"]\nalgorithm = \"log\"".to_owned(),
                ArgError::LimitTooLarge(AlgorithmKind::Log, settings.max_log_limit),
            ),
        ];
        for (rest, expected) in cases {
            let text = rule(&rest);
            let error = with(&text)
                .err()
                .unwrap_or_else(|| panic!("accepted: {text}"));
            let reason = crate::module_grammar::reason(&expected);
            assert!(
                error.contains(&reason),
                "{text}: '{error}' lacks '{reason}'"
            );
        }
        assert!(with(&rule("limits = [\"5/366d\"]\nalgorithm = \"log\"")).is_ok());
        assert!(with(&rule("limits = [\"10000/1m\"]\nalgorithm = \"log\"")).is_ok());
        let error = with(&rule("limits = [\"5/1m\"]\non_module_error = \"maybe\"")).unwrap_err();
        assert!(error.contains("on_module_error 'maybe'"), "{error}");
    }
}
