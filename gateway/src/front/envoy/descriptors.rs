//! envoyproxy/ratelimit's YAML configuration, read as it is: one `domain` per file, its
//! nested `descriptors` of `key` and optional `value`, each with an optional `rate_limit`
//! {`unit`, `requests_per_unit`} or {`unlimited: true`}, `name` and `replaces`, and
//! `shadow_mode`, `detailed_metric`. A directory loads every `*.yaml` / `*.yml` in it.
//!
//! Matching is theirs: a request descriptor of n entries matches a node n levels deep, each
//! entry trying, at its level, the node with its key and exactly its value, then a node
//! whose value ends in `*` and prefixes it, then the node with its key and no value (any
//! value, one counter per value). No match, or a node without a `rate_limit`, is not
//! limited.
//!
//! Our extensions are fields of their own names, which envoyproxy/ratelimit would refuse:
//! in `rate_limit`, `algorithm`, `burst`, `tiers` (more `n/window` tiers) and `policy` (a
//! named policy stored in Redis); on a descriptor (or for the whole file, at the top),
//! `quota_mode`, `subject` (which entry's key and value are the hash tag, see [`key`])
//! and `on_failure` (`local`, the default, `ok`, `over_limit` or `unavailable`).

use crate::failure::Failure;
use crate::rules::limit::{check_policy_name, compile, tier};
use crate::rules::{
    call_args, KeySource, Limit, OnFailure, RedisFailure, Rule, Tier, MAX_RULE_NAME_BYTES,
};
use ratelimit_core::calendar::Period;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The time units of Envoy's `RateLimitResponse.RateLimit.Unit`. A month and a year are
/// calendar windows (in UTC, or the descriptor's `tz`), never 30 or 365 days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// From the YAML (`second`, `SECOND`, ...); `None` for anything else.
    pub fn parse(text: &str) -> Option<Unit> {
        Some(match text.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    /// From Envoy's enum number; `None` for UNKNOWN (0) and numbers it does not define.
    pub fn from_proto(value: i32) -> Option<Unit> {
        Some(match value {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    /// Envoy's enum number.
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The window's length; a calendar period's nominal one.
    pub fn window_ms(self) -> u64 {
        let nominal = |period: Period| u64::try_from(period.nominal_ms()).unwrap_or(u64::MAX);
        match self {
            Unit::Second => 1_000,
            Unit::Minute => 60_000,
            Unit::Hour => 3_600_000,
            Unit::Day => 86_400_000,
            Unit::Week => 7 * 86_400_000,
            Unit::Month => nominal(Period::Month),
            Unit::Year => nominal(Period::Year),
        }
    }

    /// The calendar period this unit counts in: always for a month and a year, and for a
    /// day and a week when the descriptor names a time zone (`zoned`). Otherwise a day and
    /// a week are fixed windows of 24 h and 7 days, as in envoyproxy/ratelimit.
    pub fn calendar(self, zoned: bool) -> Option<Period> {
        match self {
            Unit::Month => Some(Period::Month),
            Unit::Year => Some(Period::Year),
            Unit::Day if zoned => Some(Period::Day),
            Unit::Week if zoned => Some(Period::Week),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The tier `requests_per_unit` per this unit.
    fn tier(self, requests_per_unit: u32, zoned: bool) -> Tier {
        Tier {
            limit: u64::from(requests_per_unit),
            window_ms: self.window_ms(),
            period: self.calendar(zoned),
        }
    }
}

/// What a request descriptor's own `limit` (Envoy's `RateLimitOverride`) may do to the
/// limit of the node it matches (`limit_override`, ours). Whatever the mode, the node's key
/// is charged for every request, so a caller that varies the override meets the same spent
/// budget, never a fresh one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverrideMode {
    /// `tighten` (the default): the override is charged too, in a key of its own beside the
    /// node's (the node's key and `:limit=<n>/<unit>`, in the same slot), so it can lower the
    /// limit and never raise it, and requests that bring another limit or none do not
    /// change the rule of either key.
    Tighten,
    /// `replace`: the override is the limit of the node's key, instead of the node's
    /// (envoyproxy/ratelimit's behaviour), for a deployment where Envoy's route
    /// configuration is trusted to raise limits. Requests that bring different limits for
    /// the same entries share the key under changing rules, which the module renews from
    /// its usage at each change.
    Replace,
    /// `ignore`: the node's limit applies, whatever the request says.
    Ignore,
}

impl OverrideMode {
    fn parse(at: &str, text: &str) -> Result<OverrideMode, String> {
        Ok(match text {
            "tighten" => OverrideMode::Tighten,
            "replace" => OverrideMode::Replace,
            "ignore" => OverrideMode::Ignore,
            _ => {
                return Err(format!(
                    "{at}: '{text}' is not one of tighten, replace, ignore"
                ))
            }
        })
    }
}

/// What a descriptor answers when Redis cannot decide within the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// Not limited (fail-open): code OK.
    Ok,
    /// Decided by the gateway's own memory at the limit divided by the live gateways.
    Local,
    /// Code OVER_LIMIT (fail-closed, the request is refused with 429).
    OverLimit,
    /// The call fails with gRPC UNAVAILABLE: Envoy's `failure_mode_deny` decides.
    Unavailable,
}

impl FailMode {
    /// Whether it refuses the request (OVER_LIMIT or UNAVAILABLE) rather than letting it
    /// through, limited locally or not.
    pub fn refuses(self) -> bool {
        matches!(self, FailMode::OverLimit | FailMode::Unavailable)
    }

    fn parse(text: &str) -> Option<FailMode> {
        Some(match text {
            "ok" => FailMode::Ok,
            "local" => FailMode::Local,
            "over_limit" => FailMode::OverLimit,
            "unavailable" => FailMode::Unavailable,
            _ => return None,
        })
    }
}

/// The limit of one configured descriptor node.
#[derive(Debug)]
pub struct DescriptorLimit {
    /// The rule the decider charges: the node's tiers, algorithm, burst or policy.
    pub rule: Arc<Rule>,
    /// `rate_limit.name`, which `replaces` of another limit names.
    pub name: Option<String>,
    pub replaces: Vec<String>,
    /// The configured limit as Envoy's `current_limit` shows it (`None` for a policy
    /// without `unit` and `requests_per_unit`).
    pub shown: Option<(u32, Unit)>,
    /// `unlimited: true`: OK without asking Redis.
    pub unlimited: bool,
    /// `requests_per_unit: 0`: every request is over the limit, without asking Redis.
    pub blocked: bool,
    /// Reports OK whatever the count says (and counts nothing it would deny).
    pub shadow: bool,
    /// Reports its own code, OVER_LIMIT included, without making the whole answer
    /// OVER_LIMIT.
    pub quota: bool,
    /// The metric names the matched value of a value-less node.
    pub detailed_metric: bool,
    /// This node has no value of its own (any value matches).
    pub value_less: bool,
    /// What Redis being unreachable, too slow or unable to take the call means.
    pub on_failure: FailMode,
    /// What an error reply of the module (a policy that does not exist) means: by default
    /// OVER_LIMIT, as an HTTP rule's `on_module_error` is closed by default, so that a
    /// misconfiguration does not silently become "no limit".
    pub on_module_error: FailMode,
    pub limit_override: OverrideMode,
    /// The entry key whose `key=value` is the hash tag; `None`: the first entry.
    pub subject: Option<String>,
}

impl DescriptorLimit {
    /// The mode that `failure` leaves this descriptor to.
    pub fn mode_for(&self, failure: Failure) -> FailMode {
        match failure {
            Failure::Error => self.on_module_error,
            Failure::Timeout | Failure::Connection | Failure::Unavailable | Failure::Breaker => {
                self.on_failure
            }
        }
    }

    /// The rule of a request descriptor's own `limit` of `requests_per_unit` per `unit`:
    /// that one tier, with this node's algorithm and burst (none for a calendar unit, which
    /// counts as a fixed window) and zone. `None` when this node ignores overrides, or when
    /// the module would refuse the call (a burst above a tighter limit, say).
    ///
    /// Under `tighten` it is charged in a key of its own, beside the node's key (see
    /// [`key`]); under `replace` it is charged in the node's key instead of the node's rule,
    /// and then a denial says nothing of requests that bring another limit or none: it is
    /// kept out of the deny cache.
    pub fn overridden(&self, requests_per_unit: u32, unit: Unit) -> Option<Arc<Rule>> {
        let (algorithm, burst, tz, anchor) = match &self.rule.limit {
            Limit::Tiers {
                algorithm,
                burst,
                tz,
                anchor,
                ..
            } => (algorithm.clone(), *burst, tz.clone(), *anchor),
            _ => (None, None, None, None),
        };
        let tier = unit.tier(requests_per_unit, tz.is_some());
        let calendar = tier.period.is_some();
        let month = tier.period == Some(Period::Month);
        let limit = Limit::Tiers {
            tiers: vec![tier],
            algorithm: algorithm.filter(|_| !calendar),
            burst: burst.filter(|_| !calendar),
            tz: tz.filter(|_| calendar),
            anchor: anchor.filter(|_| month),
            cost: 1,
        };
        if self.limit_override == OverrideMode::Ignore {
            return None;
        }
        let limit = compile(limit).ok()?;
        let args = call_args(&limit);
        let mut overridden = self.rule.as_ref().clone();
        overridden.limit = limit;
        overridden.call_args = args;
        overridden.deny_cache = self.limit_override != OverrideMode::Replace;
        Some(Arc::new(overridden))
    }
}
#[derive(Debug, Default)]
struct Level {
    /// By entry key.
    keys: HashMap<String, KeyNodes>,
}

#[derive(Debug, Default)]
struct KeyNodes {
    exact: HashMap<String, Node>,
    /// `value*`: the prefix, in file order.
    prefixed: Vec<(String, Node)>,
    any: Option<Node>,
}

#[derive(Debug, Default)]
struct Node {
    limit: Option<Arc<DescriptorLimit>>,
    children: Level,
}

/// One domain's descriptors.
#[derive(Debug)]
pub struct Domain {
    pub name: String,
    root: Level,
}

impl Domain {
    /// The limit of the most specific node that `entries` (key, value pairs, in order)
    /// match, if it has one.
    pub fn find<'e>(
        &self,
        entries: impl IntoIterator<Item = (&'e str, &'e str)>,
    ) -> Option<&Arc<DescriptorLimit>> {
        let mut level = &self.root;
        let mut node = None;
        for (key, value) in entries {
            if let Some(previous) = node {
                let previous: &Node = previous;
                level = &previous.children;
            }
            let nodes = level.keys.get(key)?;
            node = Some(
                nodes
                    .exact
                    .get(value)
                    .or_else(|| {
                        nodes
                            .prefixed
                            .iter()
                            .find(|(prefix, _)| value.starts_with(prefix.as_str()))
                            .map(|(_, n)| n)
                    })
                    .or(nodes.any.as_ref())?,
            );
        }
        node?.limit.as_ref()
    }
}

/// Every domain loaded.
#[derive(Debug, Default)]
pub struct Domains {
    domains: HashMap<String, Domain>,
}

impl Domains {
    pub fn get(&self, domain: &str) -> Option<&Domain> {
        self.domains.get(domain)
    }

    pub fn len(&self) -> usize {
        self.domains.len()
    }

    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// How many descriptor nodes have a `rate_limit`, over every domain.
    pub fn limit_count(&self) -> usize {
        fn count(level: &Level) -> usize {
            level
                .keys
                .values()
                .map(|k| {
                    k.exact
                        .values()
                        .chain(k.prefixed.iter().map(|(_, n)| n))
                        .chain(k.any.iter())
                        .map(|n| usize::from(n.limit.is_some()) + count(&n.children))
                        .sum::<usize>()
                })
                .sum()
        }
        self.domains.values().map(|d| count(&d.root)).sum()
    }
}

// ---------------------------------------------------------------------------------------
// The files
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    domain: Option<String>,
    #[serde(default)]
    descriptors: Vec<DescriptorDoc>,
    // Ours, inherited by every descriptor of the file.
    on_failure: Option<String>,
    on_module_error: Option<String>,
    limit_override: Option<String>,
    subject: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptorDoc {
    key: Option<String>,
    value: Option<String>,
    rate_limit: Option<RateLimitDoc>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    descriptors: Vec<DescriptorDoc>,
    // Ours.
    #[serde(default)]
    quota_mode: bool,
    on_failure: Option<String>,
    on_module_error: Option<String>,
    limit_override: Option<String>,
    subject: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitDoc {
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<ReplacesDoc>,
    unit: Option<String>,
    requests_per_unit: Option<u64>,
    #[serde(default)]
    unlimited: bool,
    // Ours.
    algorithm: Option<String>,
    burst: Option<u64>,
    #[serde(default)]
    tiers: Vec<String>,
    policy: Option<String>,
    /// The IANA zone of calendar units (a month and a year always are; a day and a week
    /// are when a zone is named), and a month's billing day.
    tz: Option<String>,
    anchor: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplacesDoc {
    name: Option<String>,
}

/// The largest descriptor file read (a larger one is refused before it is read whole).
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// The most files a directory of descriptors may hold.
pub const MAX_FILES: usize = 1000;
/// The deepest a descriptor may be nested: a request descriptor has at most this many
/// entries, so a deeper node could never match.
pub const MAX_DEPTH: usize = 16;

/// Loads `path`: one YAML file, or every `*.yaml` and `*.yml` directly in a directory (in
/// name order; dotfiles skipped). A domain in two files is refused, as
/// envoyproxy/ratelimit refuses it unless told to merge. Errors name the file and the
/// place in it. Bounded: at most [`MAX_FILES`] files of [`MAX_FILE_BYTES`] each, nodes at
/// most [`MAX_DEPTH`] deep, and YAML aliases expanded at most a hundred times the events
/// of the file (serde_yaml_ng's repetition limit), so that a billion-laughs file is
/// refused, not expanded.
pub fn load(path: &Path) -> Result<Domains, String> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let entries =
            std::fs::read_dir(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                !name.starts_with('.')
                    && (name.ends_with(".yaml") || name.ends_with(".yml"))
                    && p.is_file()
            })
            .collect();
        if files.len() > MAX_FILES {
            return Err(format!(
                "{}: {} descriptor files, at most {MAX_FILES}",
                path.display(),
                files.len()
            ));
        }
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut domains = Domains::default();
    let mut origin: HashMap<String, PathBuf> = HashMap::new();
    for file in files {
        let text = read_bounded(&file)?;
        let domain = parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        if let Some(first) = origin.get(&domain.name) {
            return Err(format!(
                "{}: domain '{}' is already loaded from {}",
                file.display(),
                domain.name,
                first.display()
            ));
        }
        origin.insert(domain.name.clone(), file.clone());
        domains.domains.insert(domain.name.clone(), domain);
    }
    Ok(domains)
}

/// The text of `file`, refused when over [`MAX_FILE_BYTES`] (read through a bound, so a
/// file that grows while it is read, or a device, is refused too).
fn read_bounded(file: &Path) -> Result<String, String> {
    use std::io::Read;
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", file.display());
    let mut text = String::new();
    std::fs::File::open(file)
        .map_err(cannot)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(cannot)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "{}: larger than {MAX_FILE_BYTES} bytes",
            file.display()
        ));
    }
    Ok(text)
}

/// Builds [`Domains`] from YAML texts given in memory (for tests and fuzzing); the same
/// checks as [`load`], each text named by its index.
pub fn from_texts(texts: &[&str]) -> Result<Domains, String> {
    let mut domains = Domains::default();
    for (i, text) in texts.iter().enumerate() {
        let domain = parse(text).map_err(|e| format!("text {i}: {e}"))?;
        if domains.domains.contains_key(&domain.name) {
            return Err(format!(
                "text {i}: domain '{}' is loaded twice",
                domain.name
            ));
        }
        domains.domains.insert(domain.name.clone(), domain);
    }
    Ok(domains)
}

/// The settings a descriptor inherits from those above it.
#[derive(Clone)]
struct Inherited<'a> {
    on_failure: FailMode,
    on_module_error: FailMode,
    limit_override: OverrideMode,
    subject: Option<&'a str>,
    /// `domain.key_value.key...`, the metric name of a node (envoyproxy/ratelimit's).
    stat: String,
    /// Where in the file, for errors: `descriptors[0].descriptors[2]`.
    at: String,
    /// How many levels are above.
    depth: usize,
}

/// One file's text, checked.
pub fn parse(text: &str) -> Result<Domain, String> {
    let doc: FileDoc = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    let name = doc.domain.unwrap_or_default();
    if name.is_empty() {
        return Err("domain: missing or empty".into());
    }
    let on_failure = match &doc.on_failure {
        Some(text) => fail_mode("on_failure", text)?,
        None => FailMode::Local,
    };
    let on_module_error = match &doc.on_module_error {
        Some(text) => fail_mode("on_module_error", text)?,
        None => FailMode::OverLimit,
    };
    let limit_override = match &doc.limit_override {
        Some(text) => OverrideMode::parse("limit_override", text)?,
        None => OverrideMode::Tighten,
    };
    let top = Inherited {
        on_failure,
        on_module_error,
        limit_override,
        subject: doc.subject.as_deref(),
        stat: name.clone(),
        at: String::new(),
        depth: 0,
    };
    let root = level(&doc.descriptors, &top)?;
    Ok(Domain { name, root })
}

fn fail_mode(at: &str, text: &str) -> Result<FailMode, String> {
    FailMode::parse(text)
        .ok_or_else(|| format!("{at}: '{text}' is not one of ok, local, over_limit, unavailable"))
}

fn level(docs: &[DescriptorDoc], above: &Inherited<'_>) -> Result<Level, String> {
    let mut this = Level::default();
    for (i, doc) in docs.iter().enumerate() {
        let at = if above.at.is_empty() {
            format!("descriptors[{i}]")
        } else {
            format!("{}.descriptors[{i}]", above.at)
        };
        let key = doc
            .key
            .as_deref()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| format!("{at}.key: missing or empty"))?;
        let mut stat = format!("{}.{key}", above.stat);
        if let Some(value) = &doc.value {
            let _ = write!(stat, "_{value}");
        }
        let on_failure = match &doc.on_failure {
            Some(text) => fail_mode(&format!("{at}.on_failure"), text)?,
            None => above.on_failure,
        };
        let on_module_error = match &doc.on_module_error {
            Some(text) => fail_mode(&format!("{at}.on_module_error"), text)?,
            None => above.on_module_error,
        };
        let limit_override = match &doc.limit_override {
            Some(text) => OverrideMode::parse(&format!("{at}.limit_override"), text)?,
            None => above.limit_override,
        };
        let here = Inherited {
            on_failure,
            on_module_error,
            limit_override,
            subject: doc.subject.as_deref().or(above.subject),
            stat,
            at,
            depth: above.depth + 1,
        };
        if here.depth > MAX_DEPTH {
            return Err(format!(
                "{}: nested more than {MAX_DEPTH} deep (a request descriptor has at most {MAX_DEPTH} entries)",
                here.at
            ));
        }
        let limit = match &doc.rate_limit {
            Some(rate_limit) => Some(Arc::new(descriptor_limit(doc, rate_limit, &here)?)),
            // shadow_mode without a limit means nothing, as in envoyproxy/ratelimit.
            None => None,
        };
        let node = Node {
            limit,
            children: level(&doc.descriptors, &here)?,
        };
        let nodes = this.keys.entry(key.to_owned()).or_default();
        let duplicate = match doc.value.as_deref() {
            None | Some("") => nodes.any.replace(node).is_some(),
            Some(value) => match value.strip_suffix('*') {
                Some(prefix) => {
                    let seen = nodes.prefixed.iter().any(|(p, _)| p == prefix);
                    nodes.prefixed.push((prefix.to_owned(), node));
                    seen
                }
                None => nodes.exact.insert(value.to_owned(), node).is_some(),
            },
        };
        if duplicate {
            return Err(format!(
                "{}: a descriptor with key '{key}' and this value is already defined at this level",
                here.at
            ));
        }
    }
    Ok(this)
}

fn descriptor_limit(
    doc: &DescriptorDoc,
    rate_limit: &RateLimitDoc,
    here: &Inherited<'_>,
) -> Result<DescriptorLimit, String> {
    let at = format!("{}.rate_limit", here.at);
    let unit = match &rate_limit.unit {
        Some(text) => Some(Unit::parse(text).ok_or_else(|| {
            format!("{at}.unit: '{text}' is not second, minute, hour, day, week, month or year")
        })?),
        None => None,
    };
    let requests_per_unit = match rate_limit.requests_per_unit {
        Some(n) => Some(
            u32::try_from(n)
                .map_err(|_| format!("{at}.requests_per_unit: {n} is more than {}", u32::MAX))?,
        ),
        None => None,
    };
    let extensions = rate_limit.algorithm.is_some()
        || rate_limit.burst.is_some()
        || !rate_limit.tiers.is_empty()
        || rate_limit.policy.is_some()
        || rate_limit.tz.is_some()
        || rate_limit.anchor.is_some();
    if rate_limit.unlimited {
        if unit.is_some() || requests_per_unit.is_some() || extensions {
            return Err(format!(
                "{at}: unlimited: true takes no unit, requests_per_unit or other limit"
            ));
        }
    } else if rate_limit.policy.is_some() {
        if rate_limit.algorithm.is_some()
            || rate_limit.burst.is_some()
            || !rate_limit.tiers.is_empty()
            || rate_limit.tz.is_some()
            || rate_limit.anchor.is_some()
        {
            return Err(format!(
                "{at}: algorithm, burst, tiers, tz and anchor belong to the policy, not to a limit naming one"
            ));
        }
        if unit.is_some() != requests_per_unit.is_some() {
            return Err(format!(
                "{at}: with a policy, unit and requests_per_unit only say what current_limit shows: give both or neither"
            ));
        }
    } else {
        if unit.is_none() {
            return Err(format!("{at}.unit: missing"));
        }
        if requests_per_unit.is_none() {
            return Err(format!("{at}.requests_per_unit: missing"));
        }
    }
    let replaces = rate_limit
        .replaces
        .iter()
        .enumerate()
        .map(|(i, r)| {
            r.name
                .clone()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| format!("{at}.replaces[{i}].name: missing or empty"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let blocked = requests_per_unit == Some(0) && rate_limit.policy.is_none();
    let limit = if rate_limit.unlimited || blocked {
        Limit::Unlimited
    } else if let Some(policy) = &rate_limit.policy {
        check_policy_name(policy).map_err(|e| format!("{at}.policy: {e}"))?;
        Limit::Policy {
            name: policy.clone(),
            cost: 1,
        }
    } else {
        let (Some(unit), Some(requests_per_unit)) = (unit, requests_per_unit) else {
            return Err(format!("{at}: needs unit and requests_per_unit"));
        };
        let mut tiers = vec![unit.tier(requests_per_unit, rate_limit.tz.is_some())];
        for (i, text) in rate_limit.tiers.iter().enumerate() {
            tiers.push(tier(text).map_err(|e| format!("{at}.tiers[{i}]: {e}"))?);
        }
        Limit::Tiers {
            tiers,
            algorithm: rate_limit.algorithm.clone(),
            burst: rate_limit.burst,
            tz: rate_limit.tz.clone(),
            anchor: rate_limit.anchor,
            cost: 1,
        }
    };
    let limit = compile(limit).map_err(|e| format!("{at}: {e}"))?;
    let name = rule_name(rate_limit.name.as_deref().unwrap_or(&here.stat));
    let shadow = doc.shadow_mode || doc.quota_mode;
    // A shadow or quota descriptor never refuses the request, so it never closes the
    // decision either: its failure is reported in its own status only.
    let on_failure = if shadow {
        OnFailure {
            redis: RedisFailure::Open,
            error_closed: false,
        }
    } else {
        OnFailure {
            redis: match here.on_failure {
                FailMode::Ok => RedisFailure::Open,
                FailMode::Local => RedisFailure::Local,
                FailMode::OverLimit | FailMode::Unavailable => RedisFailure::Closed,
            },
            error_closed: here.on_module_error != FailMode::Ok,
        }
    };
    Ok(DescriptorLimit {
        rule: Arc::new(rule(name, limit, shadow, on_failure)),
        name: rate_limit.name.clone(),
        replaces,
        shown: requests_per_unit.zip(unit),
        unlimited: rate_limit.unlimited,
        blocked,
        shadow: doc.shadow_mode,
        quota: doc.quota_mode && !doc.shadow_mode,
        detailed_metric: doc.detailed_metric,
        value_less: doc.value.as_deref().is_none_or(str::is_empty),
        on_failure: here.on_failure,
        on_module_error: here.on_module_error,
        limit_override: here.limit_override,
        subject: here.subject.map(str::to_owned),
    })
}

fn rule(name: String, limit: Limit, shadow: bool, on_failure: OnFailure) -> Rule {
    let mut rule = Rule::new(
        name,
        Vec::new(),
        None,
        KeySource::Global,
        false,
        limit,
        crate::rules::Counting::All,
        shadow,
        on_failure,
    );
    // Descriptors of one request may be keyed by different subjects: in a cluster, charged
    // one after the other and given back after the fact.
    rule.stacks_across_subjects = true;
    rule
}

/// A name for metrics and the RateLimit fields: letters, digits, `_`, `.` and `-` (other
/// bytes become `_`), at most [`MAX_RULE_NAME_BYTES`] (a longer one keeps its start and a
/// hash of the whole).
pub fn rule_name(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_RULE_NAME_BYTES {
        return clean;
    }
    let mut name: String = clean.chars().take(MAX_RULE_NAME_BYTES - 9).collect();
    name.push('~');
    for b in &Sha256::digest(text.as_bytes())[..4] {
        let _ = write!(name, "{b:02x}");
    }
    name
}

/// The metric name of a match: the node's rule name, and with `detailed_metric` on a
/// value-less node, the request's value of its last entry too.
pub fn metric_name(limit: &DescriptorLimit, last_value: &str) -> String {
    if limit.detailed_metric && limit.value_less && limit.name.is_none() {
        rule_name(&format!("{}_{last_value}", limit.rule.name))
    } else {
        limit.rule.name.clone()
    }
}

// ---------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------

/// The Redis key of one request descriptor, written by the one key builder
/// ([`crate::rules::key::descriptor_key`], where its format is described); with
/// `limit_override`, the key of the descriptor's own limit under `tighten` (the node's key
/// is charged beside it).
pub fn key<'e>(
    prefix: &str,
    domain: &str,
    subject: Option<&str>,
    entries: impl Iterator<Item = (&'e str, &'e str)> + Clone,
    limit_override: Option<(u32, Unit)>,
) -> String {
    let own_limit = limit_override.map(|(n, unit)| (n, unit.name()));
    crate::rules::key::descriptor_key(prefix, domain, subject, entries, own_limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGING: &str = r#"
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
"#;

    #[test]
    fn nested_and_value_less_descriptors_match_as_envoyproxy_ratelimit_does() {
        let domain = parse(MESSAGING).unwrap();
        let limit = domain
            .find([("message_type", "marketing"), ("to_number", "2061111111")])
            .unwrap();
        assert_eq!(limit.shown, Some((5, Unit::Day)));
        let limit = domain.find([("to_number", "2061111111")]).unwrap();
        assert_eq!(limit.shown, Some((100, Unit::Day)));
        assert!(domain.find([("message_type", "marketing")]).is_none());
        assert!(domain
            .find([("message_type", "other"), ("to_number", "1")])
            .is_none());
        assert!(domain.find([("to_number", "1"), ("extra", "x")]).is_none());
    }

    #[test]
    fn the_exact_value_wins_over_a_prefix_and_any_value() {
        let domain = parse(
            "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 10}\n  - key: ip\n    value: 50.0.0.5\n    rate_limit: {unit: second, requests_per_unit: 0}\n  - key: ip\n    value: '10.*'\n    rate_limit: {unit: minute, requests_per_unit: 7}\n",
        )
        .unwrap();
        assert!(domain.find([("ip", "50.0.0.5")]).unwrap().blocked);
        assert_eq!(
            domain.find([("ip", "10.1.1.1")]).unwrap().shown,
            Some((7, Unit::Minute))
        );
        assert_eq!(
            domain.find([("ip", "1.1.1.1")]).unwrap().shown,
            Some((10, Unit::Second))
        );
    }

    #[test]
    fn errors_name_the_place() {
        for (text, expected) in [
            ("descriptors: []\n", "domain"),
            ("domain: d\ndescriptors:\n  - value: x\n", "descriptors[0].key"),
            (
                "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
                "descriptors[0].descriptors[0].rate_limit.unit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n",
                "requests_per_unit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: magic}\n",
                "descriptors[0].rate_limit",
            ),
            ("domain: d\ndescriptors:\n  - key: a\n    colour: red\n", "colour"),
            (
                "domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
                "already defined",
            ),
            ("domain: d\non_failure: maybe\n", "on_failure"),
            ("domain: d\non_module_error: open\n", "on_module_error"),
            (
                "domain: d\ndescriptors:\n  - key: a\n    limit_override: raise\n",
                "descriptors[0].limit_override: 'raise' is not one of tighten, replace, ignore",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: month, requests_per_unit: 1, tz: Mars/Olympus}\n",
                "TZ must be an IANA time zone name",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, anchor: 5}\n",
                "descriptors[0].rate_limit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {policy: p, tz: UTC}\n",
                "belong to the policy",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn keys_are_bounded_escaped_and_tagged_by_the_subject() {
        let entries = [("user", "alice"), ("path", "/a:b={c}")];
        let key = key("rl:", "api", None, entries.iter().copied(), None);
        assert_eq!(key, "rl:{user=alice}:api:user=alice:path=/a%3Ab%3D%7Bc%7D");
        let tagged = super::key("rl:", "api", Some("path"), entries.iter().copied(), None);
        assert!(
            tagged.starts_with("rl:{path=/a%3Ab%3D%7Bc%7D}:"),
            "{tagged}"
        );
        let huge = "v".repeat(100_000);
        let many: Vec<(&str, &str)> = (0..16).map(|_| ("k", huge.as_str())).collect();
        let prefix = "p".repeat(crate::rules::MAX_KEY_PREFIX_BYTES);
        let key = super::key(
            &prefix,
            &huge,
            None,
            many.iter().copied(),
            Some((u32::MAX, Unit::Second)),
        );
        assert!(key.len() <= crate::rules::MAX_KEY_BYTES, "{}", key.len());
        let own = super::key(
            "rl:",
            "api",
            None,
            [("user", "alice")].into_iter(),
            Some((5, Unit::Month)),
        );
        assert_eq!(own, "rl:{user=alice}:api:user=alice:limit=5/month");
    }

    #[test]
    fn an_alias_bomb_a_deep_nest_and_a_huge_file_are_refused() {
        // Nine levels of ten aliases each: 10^9 descriptors if expanded.
        let mut bomb = String::from("domain: d\ndescriptors:\n  - key: k0\n    descriptors: &l0 [");
        bomb.push_str(&["{key: a, value: x}"; 10].join(", "));
        bomb.push_str("]\n");
        for i in 1..9 {
            let alias = format!("{{key: a, descriptors: *l{}}}", i - 1);
            bomb.push_str(&format!(
                "  - key: k{i}\n    descriptors: &l{i} [{}]\n",
                vec![alias; 10].join(", ")
            ));
        }
        let error = parse(&bomb).unwrap_err();
        assert!(error.contains("repetition limit"), "{error}");

        let mut deep = String::from("domain: d\ndescriptors:\n");
        for i in 0..=MAX_DEPTH {
            let indent = "    ".repeat(i);
            deep.push_str(&format!(
                "{indent}  - key: k{i}\n{indent}    descriptors:\n"
            ));
        }
        let error = parse(&deep).unwrap_err();
        assert!(error.contains("nested more than 16 deep"), "{error}");
        // 16 deep is fine.
        let mut fine = String::from("domain: d\ndescriptors:\n");
        for i in 0..MAX_DEPTH {
            let indent = "    ".repeat(i);
            fine.push_str(&format!(
                "{indent}  - key: k{i}\n{indent}    descriptors:\n"
            ));
        }
        fine.push_str(&format!("{}  []\n", "    ".repeat(MAX_DEPTH)));
        parse(&fine).unwrap();

        let dir = tempfile::tempdir().unwrap();
        let huge = dir.path().join("huge.yaml");
        let mut text = String::from("domain: d\ndescriptors:\n");
        while text.len() as u64 <= MAX_FILE_BYTES {
            text.push_str("# padding padding padding padding padding padding padding\n");
        }
        std::fs::write(&huge, &text).unwrap();
        let error = load(dir.path()).unwrap_err();
        assert!(error.contains("larger than 4194304 bytes"), "{error}");
        for i in 0..=MAX_FILES {
            std::fs::write(dir.path().join(format!("{i}.yml")), "domain: x\n").unwrap();
        }
        let error = load(dir.path()).unwrap_err();
        assert!(error.contains("at most 1000"), "{error}");
    }

    #[test]
    fn long_names_stay_bounded() {
        let name = rule_name(&"x".repeat(500));
        assert!(name.len() <= MAX_RULE_NAME_BYTES);
        assert_eq!(rule_name("a b\"c"), "a_b_c");
    }
}
