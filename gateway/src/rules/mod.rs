//! Rules: which requests a rule applies to, whose counter a request charges, and the
//! module call that charges it. A [`RuleSet`] is what a reload swaps as a whole.
//!
//! What a request is, as rules see it, lives beside them: its method (`methods`, with the
//! override headers and parameters), its canonical path (`canonical`, `pattern`, and the
//! `[requests]` settings in `request_policy`), its header names (`header_names`) and its
//! client (`client_ip`).
//!
//! Both front ends share the one limit compiler (`limit`: a TOML rule's limits and an Envoy
//! descriptor's `rate_limit` checked alike, and the module call words made once) and the
//! one key builder (`key`). A setting that takes one of a few words, or a range, is
//! checked by `one_of`, with a typed error.

pub(crate) mod canonical;
pub(crate) mod client_ip;
pub(crate) mod header_names;
pub(crate) mod key;
pub(crate) mod limit;
pub(crate) mod methods;
pub(crate) mod one_of;
pub(crate) mod pattern;
pub(crate) mod request_policy;

use crate::failure::Failure;
use crate::rules::pattern::PathPattern;
use hyper::header::{HeaderMap, HeaderName};
use std::net::IpAddr;
use std::sync::Arc;

pub use key::{MAX_KEY_BYTES, MAX_KEY_PREFIX_BYTES, MAX_RULE_NAME_BYTES};
pub(crate) use limit::call_args;

/// The rules of one version of the file, tried in order, then the default.
#[derive(Debug, Clone)]
pub struct RuleSet {
    /// The `[[rule]]`s, in file order.
    pub rules: Vec<Arc<Rule>>,
    /// `[default]`: for a request no rule matches.
    pub default: Option<Arc<Rule>>,
    /// Also send `X-RateLimit-Limit`, `-Remaining` and `-Reset`.
    pub(crate) legacy_headers: bool,
    /// The request header that tells the upstream a decision failed open.
    pub(crate) fail_open_header: HeaderName,
}

impl RuleSet {
    /// How many rules, the default included.
    pub fn count(&self) -> usize {
        self.rules.len() + usize::from(self.default.is_some())
    }

    /// Every rule, the default last.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.rules.iter().chain(&self.default)
    }

    /// The first rule matching `method` and `path`, else the default rule.
    pub fn find(&self, method: &str, path: &str) -> Option<&Arc<Rule>> {
        self.find_with_case(method, path, false)
    }

    /// [`RuleSet::find`], with path letters compared regardless of case when
    /// `ignore_case` (`case_insensitive_paths`).
    pub(crate) fn find_with_case(
        &self,
        method: &str,
        path: &str,
        ignore_case: bool,
    ) -> Option<&Arc<Rule>> {
        self.rules
            .iter()
            .find(|rule| rule.matches(method, path, ignore_case))
            .or(self.default.as_ref())
    }

    /// Every rule that applies to `method` and `path`, in order: the first match, and after
    /// a match with `stack = true` the next match too, and so on; the default when no match
    /// ended the list (no match at all, or only stacking ones). Empty: not limited.
    pub(crate) fn applying(&self, method: &str, path: &str, ignore_case: bool) -> Applying<'_> {
        let mut applying = Applying::new();
        for rule in &self.rules {
            if rule.matches(method, path, ignore_case) {
                applying.push(rule);
                if !rule.stack {
                    return applying;
                }
            }
        }
        if let Some(default) = &self.default {
            applying.push(default);
        }
        applying
    }

    /// Whether a rule names `method` (any case), which then is accepted even if it is not
    /// a registered method.
    pub(crate) fn names_method(&self, method: &str) -> bool {
        self.rules
            .iter()
            .any(|rule| rule.methods.iter().any(|m| m.eq_ignore_ascii_case(method)))
    }
}

/// The rules that apply to one request, in rule order (most requests: one).
pub(crate) type Applying<'a> = smallvec::SmallVec<[&'a Arc<Rule>; 2]>;

/// The most rules one request can meet: the most keys one `RL.MHIT` takes.
pub(crate) const MAX_APPLYING: usize = 16;

/// Whose budget a request spends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// The client's address (`key = "ip"`), or its network under `[client_ip]`.
    ClientIp,
    /// The header's value; the client IP when the request has none.
    Header(HeaderName),
    /// The n-th path segment (1-based); the client IP when the path is shorter.
    Segment(usize),
    /// One budget for every client (`key = "global"`, hash tag `{global}`): a cap on the
    /// rule as a whole, or per endpoint with `per_endpoint`.
    Global,
}

/// One `<count>/<window>` tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tier {
    pub(crate) limit: u64,
    /// For a calendar window, the period's nominal length.
    pub(crate) window_ms: u64,
    /// A calendar window (`day`, `week`, `month`, `year`), in the rule's `tz`.
    pub(crate) period: Option<ratelimit_core::calendar::Period>,
}

/// How much a rule lets through, as the module will be asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// `limits = []`: matched, never limited, no Redis call.
    Unlimited,
    /// Tiers written in the rule, each checked by the module.
    Tiers {
        /// Every tier; a request passes only if each has room.
        tiers: Vec<Tier>,
        /// `ALGO`, when not the module's default.
        algorithm: Option<String>,
        /// `BURST`, for the algorithms that take one (requests).
        burst: Option<u64>,
        /// `TZ` of the calendar windows.
        tz: Option<String>,
        /// `ANCHOR` of the month windows.
        anchor: Option<u64>,
        /// What one request spends (`COST`, requests).
        cost: u64,
    },
    /// A policy stored in Redis (`RL.POLICY SET`).
    Policy {
        /// The policy's name in Redis.
        name: String,
        /// What one request spends (`COST`, requests).
        cost: u64,
    },
}

/// Which responses spend the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Counting {
    /// Every request counts, whatever its response.
    All,
    /// Only these statuses count: the hit is charged before forwarding and refunded when
    /// the response has another status.
    Statuses(Vec<u16>),
}

/// `concurrency = N`: at most `max` requests of one key in flight at once, each holding a
/// lease (`RL.ACQUIRE`) from before it is forwarded until its response ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Concurrency {
    pub(crate) max: u64,
    /// How long a lease lasts if it is never released (a gateway that died): the slot is
    /// free again after this at most.
    pub(crate) lease_ttl_ms: u64,
    /// The words after the key of `RL.ACQUIRE`: `max`, the lease's length, then the rule's
    /// tiers (counted in the same call, all or nothing). Made once.
    pub(crate) acquire_args: Vec<String>,
}

impl Concurrency {
    pub(crate) fn new(max: u64, lease_ttl_ms: u64, limit: &Limit) -> Self {
        let mut acquire_args = vec![max.to_string(), format!("{lease_ttl_ms}ms")];
        acquire_args.extend(call_args(limit));
        Concurrency {
            max,
            lease_ttl_ms,
            acquire_args,
        }
    }
}

/// What a rule does when Redis cannot decide: forward the request (open), decide in the
/// gateway's memory (local) or answer 503 (closed), chosen apart for the two kinds of
/// failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnFailure {
    /// `on_redis_failure`: Redis unreachable, too slow, or unable to take the call now.
    pub redis: RedisFailure,
    /// `on_module_error`: the module answered an error (a policy deleted in Redis, a
    /// window above the server's `ratelimit.max-window-ms`): a misconfiguration, which
    /// must not silently become "no limit".
    pub error_closed: bool,
}

/// `on_redis_failure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisFailure {
    /// Forwarded, unlimited while Redis cannot decide.
    Open,
    /// Decided by the gateway's own memory at the rule's limit divided by the live
    /// gateways ([`crate::decider::local_limits`]).
    Local,
    /// 503.
    Closed,
}

impl OnFailure {
    /// Whether `failure` closes the route.
    pub(crate) fn closes(self, failure: Failure) -> bool {
        match failure {
            Failure::Error => self.error_closed,
            Failure::Timeout | Failure::Connection | Failure::Unavailable | Failure::Breaker => {
                self.redis == RedisFailure::Closed
            }
        }
    }

    /// Whether `failure` is decided by the local limit.
    pub(crate) fn decides_locally(self, failure: Failure) -> bool {
        failure != Failure::Error && self.redis == RedisFailure::Local
    }
}

/// One `[[rule]]` (or `[default]`, or an Envoy descriptor's limit), checked and ready to
/// match requests and build keys.
#[derive(Debug, Clone)]
pub struct Rule {
    pub(crate) name: String,
    /// Upper-case method names; empty for any method.
    methods: Vec<String>,
    path: Option<PathPattern>,
    key: KeySource,
    per_endpoint: bool,
    /// What it lets through.
    pub limit: Limit,
    pub(crate) count: Counting,
    pub(crate) shadow: bool,
    pub(crate) on_failure: OnFailure,
    /// `stack = true`: matching goes on after this rule, so later rules apply too.
    pub(crate) stack: bool,
    /// It may apply together with a rule keyed by another subject, whose key (another
    /// hash tag) can be in another Cluster slot: then their hits are charged one call
    /// after the other, and this rule's may be given back after the fact.
    pub(crate) stacks_across_subjects: bool,
    /// The arguments of RL.HIT and RL.REFUND after the key, made once.
    pub call_args: Vec<String>,
    /// Whether a denial of its key is remembered in the deny cache, and a remembered one
    /// answers for it. Not for a rule made for one request (an Envoy descriptor's own
    /// limit): its key is the descriptor's, shared with requests that bring another limit
    /// or none, which that denial says nothing about.
    pub(crate) deny_cache: bool,
    /// `concurrency = N`: the rule takes a lease (with its tiers, if any) instead of a hit.
    pub(crate) concurrency: Option<Concurrency>,
    /// `local_quota = true`: its budget is taken in batches and spent in the gateway's
    /// memory ([`crate::decider::quota`]).
    pub(crate) local_quota: bool,
}

impl Rule {
    /// The longest window of its limits: how long a hit may still count. A policy's
    /// windows are in Redis: a minute is assumed.
    pub(crate) fn longest_window(&self) -> std::time::Duration {
        let ms = match &self.limit {
            Limit::Unlimited => 0,
            Limit::Tiers { tiers, .. } => tiers.iter().map(|t| t.window_ms).max().unwrap_or(0),
            Limit::Policy { .. } => 60_000,
        };
        std::time::Duration::from_millis(ms)
    }

    /// A rule from its checked parts, not stacking, without concurrency, using the deny
    /// cache; its module call words are made here, once.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: String,
        methods: Vec<String>,
        path: Option<PathPattern>,
        key: KeySource,
        per_endpoint: bool,
        limit: Limit,
        count: Counting,
        shadow: bool,
        on_failure: OnFailure,
    ) -> Self {
        let call_args = call_args(&limit);
        Rule {
            name,
            methods,
            path,
            key,
            per_endpoint,
            limit,
            count,
            shadow,
            on_failure,
            stack: false,
            stacks_across_subjects: false,
            call_args,
            deny_cache: true,
            concurrency: None,
            local_quota: false,
        }
    }

    /// Why the rule cannot take its budget in batches (`local_quota`), if it cannot: each
    /// reason is a rule whose meaning needs Redis on every request.
    pub(crate) fn local_quota_refusal(&self) -> Option<&'static str> {
        Some(match &self.limit {
            Limit::Unlimited => "limits = [] counts nothing: there is no budget to hold",
            Limit::Policy { .. } => {
                "a policy's windows and mode live in Redis, so the gateway cannot tell when \
                 units it holds stop counting; write the limits in the rule"
            }
            Limit::Tiers { .. } if self.shadow => {
                "a shadow rule never denies: there is nothing to decide locally"
            }
            Limit::Tiers { .. } if self.concurrency.is_some() => {
                "a concurrency rule takes a lease per request, which cannot be held in advance"
            }
            Limit::Tiers { .. } if self.counts_by_status() => {
                "count = [statuses] charges each request and refunds it by its status in Redis"
            }
            Limit::Tiers { .. } => return None,
        })
    }

    /// The same rule taking its budget in batches (`local_quota`).
    pub(crate) fn with_local_quota(mut self, local_quota: bool) -> Self {
        self.local_quota = local_quota;
        self
    }

    /// The same rule limiting requests in flight too (`concurrency`).
    pub(crate) fn limiting_concurrency(mut self, concurrency: Option<Concurrency>) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// The same rule with `stack` set.
    pub(crate) fn stacking(mut self, stack: bool) -> Self {
        self.stack = stack;
        self
    }

    fn matches(&self, method: &str, path: &str, ignore_case: bool) -> bool {
        let path_matches = |p: &PathPattern| match ignore_case {
            true => p.matches_ignoring_case(path),
            false => p.matches(path),
        };
        // A HEAD meets the rules for GET too (see `budget_method`).
        let head_as_get = budget_method(method);
        let named =
            |m: &String| m.eq_ignore_ascii_case(method) || m.eq_ignore_ascii_case(head_as_get);
        (self.methods.is_empty() || self.methods.iter().any(named))
            && self.path.as_ref().is_none_or(path_matches)
    }

    /// Whose budget the rule spends.
    pub(crate) fn key_source(&self) -> &KeySource {
        &self.key
    }

    /// The request header whose value names the budget, if the rule keys on one.
    pub(crate) fn key_header(&self) -> Option<&HeaderName> {
        match &self.key {
            KeySource::Header(name) => Some(name),
            _ => None,
        }
    }

    pub(crate) fn counts_by_status(&self) -> bool {
        matches!(self.count, Counting::Statuses(_))
    }

    /// Whether a response with `status` spends the budget.
    pub(crate) fn counts(&self, status: u16) -> bool {
        match &self.count {
            Counting::All => true,
            Counting::Statuses(statuses) => statuses.contains(&status),
        }
    }
}

/// The method whose budget a request spends: `HEAD` is `GET` without the body (RFC 9110,
/// 9.3.2), and Flask, Django, Rails and Go's `ServeMux` answer it with the GET handler, so
/// it meets the rules that name GET and spends the same per-endpoint budget; it is still
/// forwarded as HEAD.
fn budget_method(method: &str) -> &str {
    if method.eq_ignore_ascii_case("HEAD") {
        "GET"
    } else {
        method
    }
}

/// What a key may be made of, taken from one request.
pub struct RequestFacts<'a> {
    /// The HTTP method the rules' `methods` are compared with.
    pub method: &'a str,
    /// The canonical path, without query.
    pub path: &'a str,
    /// The request's headers, for a `key = "header:..."` rule.
    pub headers: &'a HeaderMap,
    /// The client as [`client_ip::client_ip`] found it.
    pub client_ip: IpAddr,
}

/// A rule of one tier, `limit` per `window_ms`, keyed by client IP, for unit tests.
#[cfg(test)]
pub(crate) fn test_rule(
    name: &str,
    limit: u64,
    window_ms: u64,
    algorithm: Option<&str>,
    cost: u64,
    redis: RedisFailure,
) -> Rule {
    let limit = Limit::Tiers {
        tiers: vec![Tier {
            limit,
            window_ms,
            period: None,
        }],
        algorithm: algorithm.map(str::to_owned),
        burst: None,
        tz: None,
        anchor: None,
        cost,
    };
    let on_failure = OnFailure {
        redis,
        error_closed: true,
    };
    Rule::new(
        name.into(),
        vec![],
        None,
        KeySource::ClientIp,
        false,
        limit,
        Counting::All,
        false,
        on_failure,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    fn rules(text: &str) -> RuleSet {
        let head = "[server]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:9000\"\n";
        parse(&format!("{head}{text}")).unwrap().rules
    }

    fn facts<'a>(method: &'a str, path: &'a str, headers: &'a HeaderMap) -> RequestFacts<'a> {
        RequestFacts {
            method,
            path,
            headers,
            client_ip: "10.1.2.3".parse().unwrap(),
        }
    }

    #[test]
    fn first_matching_rule_then_default() {
        let set = rules(
            "[[rule]]\nname = \"login\"\nmethods = [\"post\"]\npath = \"/auth/*\"\nlimits = [\"3/15m\"]\n\
             [[rule]]\nname = \"auth\"\npath = \"/auth/**\"\nlimits = [\"10/1m\"]\n\
             [default]\nlimits = [\"5/1m\"]\n",
        );
        assert_eq!(set.find("POST", "/auth/login").unwrap().name, "login");
        assert_eq!(set.find("GET", "/auth/login").unwrap().name, "auth");
        assert_eq!(set.find("GET", "/home").unwrap().name, "default");
    }

    #[test]
    fn stacking_rules_let_matching_go_on() {
        let set = rules(
            "[[rule]]\nname = \"per-ip\"\npath = \"/api/**\"\nlimits = [\"100/1m\"]\nstack = true\n\
             [[rule]]\nname = \"cap\"\npath = \"/api/orders\"\nkey = \"global\"\nlimits = [\"1000/1m\"]\nstack = true\n\
             [[rule]]\nname = \"orders\"\npath = \"/api/orders\"\nlimits = [\"10/1m\"]\n\
             [[rule]]\nname = \"never\"\npath = \"/api/orders\"\nlimits = [\"1/1m\"]\n\
             [default]\nlimits = [\"5/1m\"]\n",
        );
        let names = |path: &str| -> Vec<String> {
            set.applying("GET", path, false)
                .iter()
                .map(|r| r.name.clone())
                .collect()
        };
        assert_eq!(names("/api/orders"), ["per-ip", "cap", "orders"]);
        assert_eq!(
            names("/api/items"),
            ["per-ip", "default"],
            "no match ended the list: the default too"
        );
        assert_eq!(names("/home"), ["default"]);
        assert_eq!(set.find("GET", "/api/orders").unwrap().name, "per-ip");
    }

    #[test]
    fn a_global_key_is_one_budget_for_every_client() {
        let set = rules(
            "[[rule]]\nname = \"cap\"\npath = \"/a/**\"\nkey = \"global\"\nper_endpoint = true\nlimits = [\"5/1m\"]\n",
        );
        let empty = HeaderMap::new();
        let rule = set.find("GET", "/a/b").unwrap();
        let mut facts = facts("GET", "/a/b", &empty);
        let key = rule.key("rl:", &facts);
        assert_eq!(key, "rl:{global}:cap:GET /a/b");
        facts.client_ip = "192.0.2.9".parse().unwrap();
        assert_eq!(rule.key("rl:", &facts), key);
    }

    #[test]
    fn keys_by_ip_header_and_segment() {
        let set = rules(
            "[[rule]]\nname = \"ip\"\npath = \"/ip/**\"\nlimits = [\"5/1m\"]\nper_endpoint = true\n\
             [[rule]]\nname = \"hdr\"\npath = \"/h\"\nkey = \"header:X-Api-Key\"\nlimits = [\"5/1m\"]\n\
             [[rule]]\nname = \"seg\"\npath = \"/users/*/orders\"\nkey = \"segment:2\"\nlimits = [\"5/1m\"]\n",
        );
        let empty = HeaderMap::new();
        let rule = set.find("GET", "/ip/a").unwrap();
        assert_eq!(
            rule.key("rl:", &facts("GET", "/ip/a", &empty)),
            "rl:{ip:10.1.2.3}:ip:GET /ip/a"
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-api-key",
            "k{1} é".parse().unwrap_or_else(|_| {
                hyper::header::HeaderValue::from_bytes(b"k{1} \xc3\xa9").unwrap()
            }),
        );
        let rule = set.find("GET", "/h").unwrap();
        assert_eq!(
            rule.key("rl:", &facts("GET", "/h", &headers)),
            "rl:{h:k%7B1%7D%20%C3%A9}:hdr"
        );
        assert_eq!(
            rule.key("rl:", &facts("GET", "/h", &empty)),
            "rl:{ip:10.1.2.3}:hdr"
        );
        let rule = set.find("GET", "/users/42/orders").unwrap();
        assert_eq!(
            rule.key("rl:", &facts("GET", "/users/42/orders", &empty)),
            "rl:{seg:42}:seg"
        );
    }

    #[test]
    fn long_values_are_hashed_the_same_everywhere() {
        let set = rules("[[rule]]\nname = \"hdr\"\npath = \"/h/**\"\nkey = \"header:X-Api-Key\"\nlimits = [\"5/1m\"]\nper_endpoint = true\n");
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", "k".repeat(10_000).parse().unwrap());
        let path = format!("/h/{}", "p".repeat(500));
        let rule = set.find("GET", &path).unwrap();
        let key = rule.key("rl:", &facts("GET", &path, &headers));
        assert!(key.len() < 120, "{key}");
        assert!(key.starts_with("rl:{h:#"), "{key}");
        assert_eq!(
            key,
            rule.key("rl:", &facts("GET", &path, &headers)),
            "deterministic"
        );
        headers.insert("x-api-key", "k".repeat(10_001).parse().unwrap());
        assert_ne!(key, rule.key("rl:", &facts("GET", &path, &headers)));
    }

    #[test]
    fn no_key_exceeds_the_bound_whatever_the_request() {
        let name = "n".repeat(MAX_RULE_NAME_BYTES);
        let prefix = "p".repeat(MAX_KEY_PREFIX_BYTES);
        let set = rules(&format!(
            "[[rule]]\nname = \"{name}\"\npath = \"/**\"\nkey = \"header:X-Api-Key\"\nlimits = [\"5/1m\"]\nper_endpoint = true\n"
        ));
        let mut headers = HeaderMap::new();
        let method = "M".repeat(60_000);
        let path = "/%FF".repeat(5_000);
        let values = [
            b"k".repeat(64),
            b"k".repeat(65),
            b"{}".repeat(32),
            vec![0xff; 21],
            vec![0xff; 22],
        ];
        for value in values {
            headers.insert(
                "x-api-key",
                hyper::header::HeaderValue::from_bytes(&value).unwrap(),
            );
            let rule = set.find("GET", "/").unwrap();
            for (method, path) in [("GET", "/a"), (method.as_str(), path.as_str())] {
                let key = rule.key(&prefix, &facts(method, path, &headers));
                assert!(key.len() <= MAX_KEY_BYTES, "{} bytes: {key}", key.len());
            }
        }
        let rule = set.find("GET", "/").unwrap();
        assert_eq!(
            rule.key("rl:", &facts("GET", "/a/", &headers)),
            rule.key("rl:", &facts("GET", "/a", &headers)),
            "a trailing slash is not another endpoint"
        );
        assert!(rule
            .key("rl:", &facts("GET", "/", &headers))
            .ends_with(" /"));
    }

    #[test]
    fn a_lease_key_is_apart_from_hit_keys_on_the_same_slot() {
        let set = rules(
            "[[rule]]\nname = \"llm\"\npath = \"/llm\"\nconcurrency = 2\n\
             [[rule]]\nname = \"per\"\npath = \"/p/**\"\nconcurrency = 2\nper_endpoint = true\n",
        );
        let empty = HeaderMap::new();
        let llm = set.find("GET", "/llm").unwrap();
        assert_eq!(
            llm.key("rl:", &facts("GET", "/llm", &empty)),
            "rl:{ip:10.1.2.3}:llm:lease"
        );
        let per = set.find("GET", "/p/a").unwrap();
        assert_eq!(
            per.key("rl:", &facts("GET", "/p/a", &empty)),
            "rl:{ip:10.1.2.3}:per:lease:GET /p/a"
        );
    }

    #[test]
    fn methods_match_regardless_of_case() {
        let set = rules("[[rule]]\nname = \"login\"\nmethods = [\"POST\"]\npath = \"/Auth/*\"\nlimits = [\"3/1m\"]\n");
        assert!(set.find("post", "/Auth/login").is_some());
        assert!(set.find("POST", "/auth/login").is_none());
        assert!(set.find_with_case("POST", "/auth/login", true).is_some());
        assert!(set.names_method("post"));
        assert!(!set.names_method("GET"));
    }

    #[test]
    fn head_meets_get_rules_and_spends_their_budget() {
        let set = rules(
            "[[rule]]\nname = \"get\"\nmethods = [\"GET\"]\npath = \"/g\"\nper_endpoint = true\nlimits = [\"3/1m\"]\n\
             [[rule]]\nname = \"head\"\nmethods = [\"HEAD\"]\npath = \"/h\"\nlimits = [\"3/1m\"]\n",
        );
        let empty = HeaderMap::new();
        let rule = set.find("HEAD", "/g").unwrap();
        assert_eq!(rule.name, "get");
        assert_eq!(
            rule.key("rl:", &facts("HEAD", "/g", &empty)),
            rule.key("rl:", &facts("GET", "/g", &empty))
        );
        assert_eq!(set.find("HEAD", "/h").unwrap().name, "head");
        assert!(
            set.find("GET", "/h").is_none(),
            "a HEAD rule is not a GET rule"
        );
    }

    #[test]
    fn call_arguments() {
        let set = rules(
            "[[rule]]\nname = \"two\"\npath = \"/a\"\nlimits = [\"10/1s\", \"300/1m\"]\nalgorithm = \"gcra\"\ncost = 2\n\
             [[rule]]\nname = \"pol\"\npath = \"/p\"\npolicy = \"login\"\n",
        );
        let two = set.find("GET", "/a").unwrap();
        assert_eq!(
            two.call_args,
            ["10", "1000ms", "300", "60000ms", "ALGO", "gcra", "COST", "2"]
        );
        let pol = set.find("GET", "/p").unwrap();
        assert_eq!(pol.call_args, ["POLICY", "login"]);
    }
}
