//! The one limit compiler. A TOML rule's `limits` and an Envoy descriptor's `rate_limit`
//! each say a [`Limit`] in their own words; what both mean is checked here, once: the
//! policy name, a `count/window` tier, the module's grammar (through
//! [`crate::module_grammar`], which asks the core) and a cost no tier could ever hold. The
//! words sent to the module after the key ([`call_args`]) are made here too.

use super::{Limit, Tier};
use crate::module_grammar::Refused;
use ratelimit_core::calendar::Period;

/// The largest integer a structured header field can carry.
const MAX_FIELD_INTEGER: u64 = 999_999_999_999_999;

/// Why a limit is refused. The message names the value; the caller adds where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LimitError {
    /// A policy name that is empty or has a byte that is not printable ASCII.
    PolicyName(String),
    /// A tier that is not `<count>/<window>`.
    TierSyntax(String),
    /// A tier of count 0.
    TierZero(String),
    /// A tier whose count a header field cannot carry.
    TierTooLarge(String),
    /// A tier whose window the module's duration grammar refuses: the text and the reason.
    TierWindow(String, String),
    /// The module would refuse the call.
    Refused(Refused),
    /// A cost more than a tier can ever hold: every request would be denied forever.
    CostAboveCapacity {
        cost: u64,
        capacity: u64,
        limit: u64,
        window: String,
    },
}

impl std::fmt::Display for LimitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitError::PolicyName(name) => write!(f, "'{name}' is empty or has spaces"),
            LimitError::TierSyntax(text) => {
                write!(f, "limit '{text}' must be <count>/<window>, e.g. \"5/1m\"")
            }
            LimitError::TierZero(text) => {
                write!(f, "limit '{text}': the count must be at least 1")
            }
            LimitError::TierTooLarge(text) => write!(
                f,
                "limit '{text}': the count must be at most {MAX_FIELD_INTEGER}"
            ),
            LimitError::TierWindow(text, reason) => write!(f, "limit '{text}': {reason}"),
            LimitError::Refused(refused) => refused.fmt(f),
            LimitError::CostAboveCapacity {
                cost,
                capacity,
                limit,
                window,
            } => write!(
                f,
                "cost {cost} is more than the {capacity} a request can ever get under \
                 {limit}/{window}"
            ),
        }
    }
}

impl std::error::Error for LimitError {}

impl From<Refused> for LimitError {
    fn from(refused: Refused) -> Self {
        LimitError::Refused(refused)
    }
}

/// Whether `name` may name a policy: printable ASCII, at least one byte. The stricter of
/// the two checks the fronts had (the TOML one refused only spaces and control bytes), so
/// a name is the same word to the module whichever file names it.
pub(crate) fn check_policy_name(name: &str) -> Result<(), LimitError> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(LimitError::PolicyName(name.to_owned()));
    }
    Ok(())
}

/// `limit` checked as the module will check its call, whichever file it comes from.
pub(crate) fn compile(limit: Limit) -> Result<Limit, LimitError> {
    match &limit {
        Limit::Unlimited => {}
        Limit::Policy { name, .. } => {
            check_policy_name(name)?;
            crate::module_grammar::check_call(&call_args(&limit))?;
        }
        Limit::Tiers {
            tiers, burst, cost, ..
        } => {
            // The tier count, the algorithm's name, the sliding log's cap and where BURST
            // applies are the module's grammar: `check_call` applies it to the call.
            crate::module_grammar::check_call(&call_args(&limit))?;
            // A request costing more than a tier can ever hold would be denied forever.
            let capacity = |tier: &Tier| burst.unwrap_or(tier.limit);
            if let Some(tier) = tiers.iter().find(|t| *cost > capacity(t)) {
                return Err(LimitError::CostAboveCapacity {
                    cost: *cost,
                    capacity: capacity(tier),
                    limit: tier.limit,
                    window: tier
                        .period
                        .map_or_else(|| format!("{}ms", tier.window_ms), |p| p.name().into()),
                });
            }
        }
    }
    Ok(limit)
}

/// `count/window`, e.g. `5/1m`, or a calendar window, e.g. `1000/month`.
pub(crate) fn tier(text: &str) -> Result<Tier, LimitError> {
    let bad = || LimitError::TierSyntax(text.to_owned());
    let (count, window) = text.split_once('/').ok_or_else(bad)?;
    let limit: u64 = count.trim().parse().map_err(|_| bad())?;
    if limit == 0 {
        return Err(LimitError::TierZero(text.to_owned()));
    }
    // Header integers (RFC 8941) have at most 15 digits.
    if limit > MAX_FIELD_INTEGER {
        return Err(LimitError::TierTooLarge(text.to_owned()));
    }
    if let Some(period) = Period::from_name(window.trim().as_bytes()) {
        let window_ms = u64::try_from(period.nominal_ms()).map_err(|_| bad())?;
        return Ok(Tier {
            limit,
            window_ms,
            period: Some(period),
        });
    }
    // The module's duration grammar; its cap on windows is checked with the whole call.
    let window_ms =
        ratelimit_core::duration::parse_duration_ms(window.trim().as_bytes()).map_err(|error| {
            let reason =
                crate::module_grammar::reason(&ratelimit_core::args::ArgError::Window(error));
            LimitError::TierWindow(text.to_owned(), reason)
        })?;
    let window_ms = u64::try_from(window_ms).map_err(|_| bad())?;
    Ok(Tier {
        limit,
        window_ms,
        period: None,
    })
}

/// The words after the key of RL.HIT and RL.REFUND for `limit`.
/// `COST`, when the rule has one, is always the last two words: a request that brings its
/// own cost (`decider::Applied::cost`) replaces them.
pub(crate) fn call_args(limit: &Limit) -> Vec<String> {
    let mut args = Vec::new();
    match limit {
        Limit::Unlimited => {}
        Limit::Tiers {
            tiers,
            algorithm,
            burst,
            tz,
            anchor,
            cost,
        } => {
            for tier in tiers {
                args.push(tier.limit.to_string());
                args.push(match tier.period {
                    Some(period) => period.name().into(),
                    None => format!("{}ms", tier.window_ms),
                });
            }
            if let Some(algorithm) = algorithm {
                args.extend(["ALGO".into(), algorithm.clone()]);
            }
            if let Some(burst) = burst {
                args.extend(["BURST".into(), burst.to_string()]);
            }
            if let Some(tz) = tz {
                args.extend(["TZ".into(), tz.clone()]);
            }
            if let Some(anchor) = anchor {
                args.extend(["ANCHOR".into(), anchor.to_string()]);
            }
            if *cost != 1 {
                args.extend(["COST".into(), cost.to_string()]);
            }
        }
        Limit::Policy { name, cost } => {
            args.extend(["POLICY".into(), name.clone()]);
            if *cost != 1 {
                args.extend(["COST".into(), cost.to_string()]);
            }
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use crate::front::envoy::descriptors;
    use crate::rules::call_args;

    /// The limit of a TOML rule with `rest`, or the refusal.
    fn toml(rest: &str) -> Result<Vec<String>, String> {
        let text = format!("[[rule]]\nname = \"a\"\npath = \"/a\"\n{rest}\n");
        crate::config::parse_after_server(&text)
            .map(|config| call_args(&config.rules.rules[0].limit))
    }

    /// The limit of an Envoy descriptor whose `rate_limit` is `{rate_limit}`, or the
    /// refusal.
    fn yaml(rate_limit: &str) -> Result<Vec<String>, String> {
        let text =
            format!("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{{rate_limit}}}\n");
        let domain = descriptors::parse(&text).map_err(|e| e.to_string())?;
        let limit = domain.find([("a", "x")]).expect("the descriptor matches");
        Ok(limit.limit().rule.call_args.clone())
    }

    /// One limit said in both files: the same words to the module, and the same
    /// refusals with the same reasons.
    #[test]
    fn the_toml_and_the_yaml_path_make_the_same_call() {
        let same = [
            (
                "limits = [\"5/1m\", \"100/1h\"]\nalgorithm = \"gcra\"",
                "unit: minute, requests_per_unit: 5, tiers: [\"100/1h\"], algorithm: gcra",
            ),
            (
                "limits = [\"5/1s\"]\nalgorithm = \"token\"\nburst = 9",
                "unit: second, requests_per_unit: 5, algorithm: token, burst: 9",
            ),
            (
                "limits = [\"7/month\"]\ntz = \"Europe/Paris\"\nanchor = 3",
                "unit: month, requests_per_unit: 7, tz: Europe/Paris, anchor: 3",
            ),
            ("policy = \"login\"", "policy: login"),
        ];
        for (toml_rest, yaml_limit) in same {
            let words = toml(toml_rest).expect(toml_rest);
            assert_eq!(yaml(yaml_limit).expect(yaml_limit), words, "{toml_rest}");
        }
        let refused = [
            (
                "limits = [\"5/1m\"]\nalgorithm = \"leaky\"",
                "unit: minute, requests_per_unit: 5, algorithm: leaky",
                "RL.HIT would refuse '5 60000ms ALGO leaky'",
            ),
            (
                "limits = [\"5/1m\"]\nburst = 3",
                "unit: minute, requests_per_unit: 5, burst: 3",
                "RL.HIT would refuse '5 60000ms BURST 3'",
            ),
            (
                "limits = [\"5/1m\", \"5/0s\"]",
                "unit: minute, requests_per_unit: 5, tiers: [\"5/0s\"]",
                "limit '5/0s'",
            ),
            (
                "policy = \"a b\"",
                "policy: \"a b\"",
                "'a b' is empty or has spaces",
            ),
            (
                "policy = \"caf\u{e9}\"",
                "policy: \"caf\u{e9}\"",
                "'caf\u{e9}' is empty or has spaces",
            ),
        ];
        for (toml_rest, yaml_limit, reason) in refused {
            let toml_error = toml(toml_rest).expect_err(toml_rest);
            let yaml_error = yaml(yaml_limit).expect_err(yaml_limit);
            assert!(toml_error.contains(reason), "{toml_error}");
            assert!(yaml_error.contains(reason), "{yaml_error}");
        }
    }
}
