//! Rule compilation: `[[rule]]`, `[default]` and `[headers]` turned into a [`RuleSet`],
//! every rule checked (its name, methods, path pattern, key, counting, mode and failure
//! settings) so that a reload either swaps in rules that all apply or changes nothing.

use super::concurrency::concurrency;
use super::limit::limit;
use super::schema::{CountSection, HeadersSection, RuleSection};
use super::Mode;
use crate::rules::one_of::one_of;
use crate::rules::pattern::{PathPattern, PathPolicy};
use crate::rules::{Counting, KeySource, OnFailure, RedisFailure, Rule, RuleSet};
use std::sync::Arc;

/// The rule list, the default rule and `[headers]` of one file (or Redis key), checked for
/// a gateway in `mode` whose paths are canonicalised under `paths`.
pub(super) fn rule_set(
    headers: HeadersSection,
    sections: Vec<RuleSection>,
    default: Option<RuleSection>,
    mode: Mode,
    paths: &PathPolicy,
) -> Result<RuleSet, String> {
    let mut rules = Vec::with_capacity(sections.len());
    for (index, section) in sections.into_iter().enumerate() {
        // Named by its `name` when it has one, and by its place in the file.
        let place = match &section.name {
            Some(name) => format!("[[rule]] '{name}' (number {})", index + 1),
            None => format!("[[rule]] number {}", index + 1),
        };
        let rule = rule(section, RulePlace::List, paths).map_err(|e| format!("{place}: {e}"))?;
        if rules.iter().any(|r: &Arc<Rule>| r.name == rule.name) {
            return Err(format!("two rules are named '{}'", rule.name));
        }
        rules.push(Arc::new(rule));
    }
    // Every stacking rule and the one that ends the list may apply to one request, and all
    // of their keys can go into one RL.MHIT.
    let stacking = rules.iter().filter(|r| r.stack).count();
    if stacking >= crate::rules::MAX_APPLYING {
        return Err(format!(
            "{stacking} rules say stack = true; at most {} may, so that no request meets \
             more than {} rules",
            crate::rules::MAX_APPLYING - 1,
            crate::rules::MAX_APPLYING
        ));
    }
    let mut default = default
        .map(|section| rule(section, RulePlace::Default, paths).map(Arc::new))
        .transpose()
        .map_err(|e| format!("[default]: {e}"))?;
    mark_stacks_across_subjects(&mut rules, default.as_mut());
    check_concurrency(&rules, default.as_ref(), mode)?;
    if mode == Mode::Check && rules.iter().chain(&default).any(|r| r.counts_by_status()) {
        return Err(
            "count = [statuses] needs mode = \"proxy\": in check mode the gateway never sees \
             the response"
                .into(),
        );
    }
    let fail_open_header = hyper::header::HeaderName::from_bytes(headers.fail_open.as_bytes())
        .map_err(|_| {
            format!(
                "[headers] fail_open '{}' is not a header name",
                headers.fail_open
            )
        })?;
    Ok(RuleSet {
        rules,
        default,
        legacy_headers: headers.legacy,
        fail_open_header,
    })
}

/// Where a rule with `concurrency` may stand: in proxy mode (only there does the gateway
/// see the response end, when the lease is given back), and before every stacking rule (a
/// rule after one may apply together with it, and a lease cannot be all or nothing with
/// another rule's hit).
fn check_concurrency(
    rules: &[Arc<Rule>],
    default: Option<&Arc<Rule>>,
    mode: Mode,
) -> Result<(), String> {
    let mut stacking: Option<&str> = None;
    for rule in rules.iter().chain(default) {
        if rule.concurrency.is_some() {
            if mode == Mode::Check {
                return Err(format!(
                    "rule '{}': concurrency needs mode = \"proxy\": in check mode the gateway \
                     never sees the response end, so it could never give the slot back",
                    rule.name
                ));
            }
            if let Some(before) = stacking {
                return Err(format!(
                    "rule '{}': concurrency after the stacking rule '{before}', which may apply \
                     to the same request: a lease cannot be all or nothing with another \
                     rule's hit; put the concurrency rule first",
                    rule.name
                ));
            }
        }
        if rule.stack {
            stacking = stacking.or(Some(&rule.name));
        }
    }
    Ok(())
}

/// Sets [`Rule::stacks_across_subjects`] on every rule that may apply to a request together
/// with a rule keyed by another subject: a stacking rule and any later rule (the default
/// too), whether or not their patterns can both match (the safe side).
fn mark_stacks_across_subjects(rules: &mut [Arc<Rule>], default: Option<&mut Arc<Rule>>) {
    let all: Vec<Arc<Rule>> = rules
        .iter()
        .cloned()
        .chain(default.as_deref().cloned())
        .collect();
    let mut marked = vec![false; all.len()];
    for (i, first) in all.iter().enumerate() {
        if !first.stack {
            continue;
        }
        for (j, later) in all.iter().enumerate().skip(i + 1) {
            if first.key_source() != later.key_source() {
                marked[i] = true;
                marked[j] = true;
            }
        }
    }
    let mut targets: Vec<&mut Arc<Rule>> = rules.iter_mut().chain(default).collect();
    for (rule, marked) in targets.iter_mut().zip(marked) {
        if marked {
            Arc::make_mut(rule).stacks_across_subjects = true;
        }
    }
}

enum RulePlace {
    List,
    Default,
}

fn rule(section: RuleSection, place: RulePlace, paths: &PathPolicy) -> Result<Rule, String> {
    let name = match place {
        RulePlace::Default => default_name(&section)?,
        RulePlace::List => list_name(&section)?,
    };
    let methods = methods(section.methods.as_deref().unwrap_or_default())?;
    let path = section
        .path
        .as_deref()
        .map(PathPattern::parse)
        .transpose()
        .map_err(|e| e.to_string())?;
    // A pattern that no canonical path can match would leave its endpoint unlimited.
    if let Some(pattern) = &path {
        pattern.check_canonical(paths).map_err(|e| e.to_string())?;
    }
    let key = key_source(&section.key)?;
    let limit = limit(&section)?;
    let concurrency = concurrency(&section, &limit)?;
    let count = counting(section.count)?;
    let shadow = one_of(
        "mode",
        &section.mode,
        &[("enforce", false), ("shadow", true)],
    )?;
    let on_failure = OnFailure {
        redis: one_of(
            "on_redis_failure",
            &section.on_redis_failure,
            &[
                ("local", RedisFailure::Local),
                ("open", RedisFailure::Open),
                ("closed", RedisFailure::Closed),
            ],
        )?,
        error_closed: open_or_closed("on_module_error", &section.on_module_error)?,
    };
    if section.stack && limit == crate::rules::Limit::Unlimited {
        return Err(format!(
            "rule '{name}': stack = true with limits = [] does nothing (it counts nothing and \
             lets the next rules decide): remove the rule or give it limits"
        ));
    }
    let stack = section.stack;
    let local_quota = section.local_quota;
    let rule = Rule::new(
        name,
        methods,
        path,
        key,
        section.per_endpoint,
        limit,
        count,
        shadow,
        on_failure,
    )
    .stacking(stack)
    .limiting_concurrency(concurrency)
    .with_local_quota(local_quota);
    match rule.local_quota_refusal().filter(|_| local_quota) {
        Some(why) => Err(format!("rule '{}': local_quota = true: {why}", rule.name)),
        None => Ok(rule),
    }
}

/// `"open"` (false) or `"closed"` (true), the value of the setting `name`.
fn open_or_closed(name: &str, value: &str) -> Result<bool, String> {
    Ok(one_of(name, value, &[("open", false), ("closed", true)])?)
}

fn key_source(key: &str) -> Result<KeySource, String> {
    if key == "ip" {
        return Ok(KeySource::ClientIp);
    }
    if key == "global" {
        return Ok(KeySource::Global);
    }
    if let Some(header) = key.strip_prefix("header:") {
        return hyper::header::HeaderName::from_bytes(header.as_bytes())
            .map(KeySource::Header)
            .map_err(|_| format!("key '{key}': '{header}' is not a header name"));
    }
    if let Some(index) = key.strip_prefix("segment:") {
        return match index.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(KeySource::Segment(n)),
            _ => Err(format!("key '{key}': the segment number must be 1 or more")),
        };
    }
    Err(format!(
        "key '{key}' must be \"ip\", \"header:<name>\", \"segment:<n>\" or \"global\""
    ))
}

/// The default rule's name, once it is checked to have none of its own.
fn default_name(section: &RuleSection) -> Result<String, String> {
    if section.name.is_some() || section.methods.is_some() || section.path.is_some() {
        return Err("takes no name, methods or path (it applies to everything else)".into());
    }
    if section.stack {
        return Err(
            "stack = true makes no sense on the default rule: no rule comes after it".into(),
        );
    }
    Ok("default".to_owned())
}

/// A listed rule's `name`, checked, once the rule is checked to match something.
fn list_name(section: &RuleSection) -> Result<String, String> {
    let name = section.name.clone().ok_or("needs a name")?;
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(format!(
            "name '{name}' must be letters, digits, '-', '_' or '.'"
        ));
    }
    if name.len() > crate::rules::MAX_RULE_NAME_BYTES {
        return Err(format!(
            "name '{name}' is longer than {} bytes",
            crate::rules::MAX_RULE_NAME_BYTES
        ));
    }
    if name == "default" {
        return Err("the name 'default' belongs to the [default] rule".into());
    }
    if section.path.is_none() && section.methods.is_none() {
        return Err(format!("rule '{name}' needs a path or methods to match"));
    }
    Ok(name)
}

/// `methods`, upper-cased, each an HTTP method of at most 32 bytes.
fn methods(methods: &[String]) -> Result<Vec<String>, String> {
    methods
        .iter()
        .map(|m| {
            let upper = m.to_ascii_uppercase();
            hyper::Method::from_bytes(upper.as_bytes())
                .ok()
                .filter(|_| upper.len() <= crate::rules::methods::MAX_METHOD_BYTES)
                .map(|_| upper)
                .ok_or_else(|| format!("method '{m}' is not an HTTP method of at most 32 bytes"))
        })
        .collect()
}

/// `count`: every response, or only these statuses.
fn counting(count: Option<CountSection>) -> Result<Counting, String> {
    Ok(match count {
        None => Counting::All,
        Some(CountSection::Word(word)) if word == "all" => Counting::All,
        Some(CountSection::Word(word)) => {
            return Err(format!(
                "count '{word}' must be \"all\" or a list of statuses"
            ))
        }
        Some(CountSection::Statuses(statuses)) => {
            if statuses.is_empty() || statuses.iter().any(|s| !(100..=599).contains(s)) {
                return Err("count must list HTTP statuses (100-599)".into());
            }
            Counting::Statuses(statuses)
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{assert_refused, parse, parse_after_server};
    use crate::failure::Failure;

    #[test]
    fn mistakes_in_a_rule_are_named() {
        assert_refused(&[
            ("[[rule]]\npath = \"/a\"\nlimits = [\"5/1m\"]\n", "needs a name"),
            ("[[rule]]\nname = \"a\"\npath = \"a\"\nlimits = [\"5/1m\"]\n", "must start with '/'"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\nkey = \"cookie\"\n", "key 'cookie'"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\ncount = [42]\n", "statuses"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\nspeed = 3\n", "speed"),
            ("[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\n[[rule]]\nname = \"a\"\npath = \"/b\"\nlimits = [\"5/1m\"]\n", "two rules"),
            ("[default]\nname = \"x\"\nlimits = [\"5/1m\"]\n", "[default]"),
            ("[[rule]]\nname = \"default\"\npath = \"/a\"\nlimits = [\"5/1m\"]\n", "belongs"),
            ("[[rule]]\nname = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\npath = \"/a\"\nlimits = [\"5/1m\"]\n", "longer than 48"),
            ("[[rule]]\nname = \"a\"\nmethods = [\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"]\nlimits = [\"5/1m\"]\n", "at most 32"),
        ]);
    }

    #[test]
    fn stacking_mistakes_are_named() {
        let stacking = (0..16)
            .map(|i| {
                format!(
                    "[[rule]]\nname = \"r{i}\"\npath = \"/a\"\nlimits = [\"5/1m\"]\nstack = true\n"
                )
            })
            .collect::<String>();
        assert_refused(&[
            (
                "[default]\nlimits = [\"5/1m\"]\nstack = true\n",
                "no rule comes after it",
            ),
            (
                "[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = []\nstack = true\n",
                "does nothing",
            ),
            (&stacking, "16 rules say stack = true; at most 15"),
            (
                "[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\nstack = \"yes\"\n",
                "stack",
            ),
        ]);
        let fifteen = (0..15)
            .map(|i| {
                format!(
                    "[[rule]]\nname = \"r{i}\"\npath = \"/a\"\nlimits = [\"5/1m\"]\nstack = true\n"
                )
            })
            .collect::<String>();
        assert!(parse_after_server(&fifteen).is_ok());
    }

    #[test]
    fn rules_stacked_with_another_subject_are_marked() {
        let set = parse_after_server(
            "[[rule]]\nname = \"ip\"\npath = \"/a/**\"\nlimits = [\"5/1m\"]\nstack = true\n\
             [[rule]]\nname = \"ip2\"\npath = \"/a/b\"\nlimits = [\"5/1m\"]\n\
             [[rule]]\nname = \"other\"\npath = \"/c\"\nkey = \"global\"\nlimits = [\"5/1m\"]\n\
             [default]\nkey = \"global\"\nlimits = [\"5/1m\"]\n",
        )
        .unwrap()
        .rules;
        let marked: Vec<bool> = set
            .rules
            .iter()
            .chain(&set.default)
            .map(|r| r.stacks_across_subjects)
            .collect();
        // ip stacks before two global rules; ip2 shares its subject; nothing stacks after
        // "other", but "ip" may precede it.
        assert_eq!(marked, [true, false, true, true]);
    }

    #[test]
    fn module_errors_close_a_rule_unless_it_says_open() {
        let rule = |rest: &str| {
            let text = format!("[default]\nlimits = [\"5/1m\"]\n{rest}\n");
            parse_after_server(&text)
                .unwrap()
                .rules
                .default
                .unwrap()
                .on_failure
        };
        let default = rule("");
        assert!(default.closes(Failure::Error) && !default.closes(Failure::Timeout));
        assert!(
            default.decides_locally(Failure::Timeout) && !default.decides_locally(Failure::Error)
        );
        let open = rule("on_module_error = \"open\"\non_redis_failure = \"closed\"");
        assert!(!open.closes(Failure::Error) && open.closes(Failure::Connection));
    }

    #[test]
    fn check_mode_refuses_status_counting() {
        let text = "[server]\nlisten = \"127.0.0.1:8080\"\nmode = \"check\"\n[default]\nlimits = [\"5/1m\"]\ncount = [401]\n";
        assert!(parse(text).unwrap_err().to_string().contains("check mode"));
    }
}
