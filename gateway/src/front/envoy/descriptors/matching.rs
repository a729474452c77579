//! The descriptor tree of a domain and how a request descriptor finds its node:
//! envoyproxy/ratelimit's matching (an exact value, then a `*` pattern, then any value,
//! level by level).

use super::pattern::Pattern;
use super::DescriptorLimit;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Default)]
pub(super) struct Level {
    /// By entry key.
    pub(super) keys: HashMap<String, KeyNodes>,
}

#[derive(Debug, Default)]
pub(super) struct KeyNodes {
    pub(super) exact: HashMap<String, Node>,
    /// Values with a `*`, in file order: the first that matches is taken.
    pub(super) patterns: Vec<(Pattern, Node)>,
    pub(super) any: Option<Node>,
}

#[derive(Debug, Default)]
pub(super) struct Node {
    pub(super) limit: Option<Arc<DescriptorLimit>>,
    /// `share_threshold: true` (only on a node whose value has a `*`): every value the
    /// pattern matches counts in one key, written with the pattern for the value.
    pub(super) share_threshold: bool,
    /// `value_to_metric: true`: the metric name of a limit at or below this node shows the
    /// request's value for this entry (when the node matched it by a pattern or as any
    /// value; an exact value is shown anyway).
    pub(super) value_to_metric: bool,
    pub(super) children: Level,
}

/// How one entry of a request descriptor matched its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via<'d> {
    /// The node of exactly this value.
    Exact,
    /// The node of this `*` pattern (as written in the file).
    Pattern {
        pattern: &'d str,
        share_threshold: bool,
        value_to_metric: bool,
    },
    /// The node of this key without a value.
    Any { value_to_metric: bool },
}

impl<'d> Via<'d> {
    fn of(node: &Node, pattern: Option<&'d Pattern>, exact: bool) -> Via<'d> {
        match (exact, pattern) {
            (true, _) => Via::Exact,
            (false, Some(pattern)) => Via::Pattern {
                pattern: pattern.text(),
                share_threshold: node.share_threshold,
                value_to_metric: node.value_to_metric,
            },
            (false, None) => Via::Any {
                value_to_metric: node.value_to_metric,
            },
        }
    }

    /// The pattern that stands for the request's value in the Redis key: a
    /// `share_threshold` node's.
    pub(crate) fn shared(self) -> Option<&'d str> {
        match self {
            Via::Pattern {
                pattern,
                share_threshold: true,
                ..
            } => Some(pattern),
            _ => None,
        }
    }
}

/// What a request descriptor matched: the limit of its node, and how each entry matched on
/// the way there (for the key, under `share_threshold`, and the metric name).
#[derive(Debug)]
pub struct Found<'d> {
    pub(crate) limit: &'d Arc<DescriptorLimit>,
    /// One per entry, in order.
    pub(crate) via: SmallVec<[Via<'d>; 4]>,
}

impl<'d> Found<'d> {
    /// The matched node's limit.
    pub fn limit(&self) -> &'d Arc<DescriptorLimit> {
        self.limit
    }

    /// The (key, value) pairs the Redis key is written from: the request's, with the
    /// pattern in place of the value for each entry a `share_threshold` node matched.
    pub fn key_entries<'a, I>(
        &'a self,
        entries: I,
    ) -> impl Iterator<Item = (&'a str, &'a str)> + Clone + 'a
    where
        I: Iterator<Item = (&'a str, &'a str)> + Clone + 'a,
        'd: 'a,
    {
        entries
            .zip(self.via.iter())
            .map(|((key, value), via)| (key, via.shared().unwrap_or(value)))
    }

    /// Whether any entry counts under its pattern rather than its value.
    pub fn shares(&self) -> bool {
        self.via.iter().any(|v| v.shared().is_some())
    }
}

/// One domain's descriptors.
#[derive(Debug)]
pub struct Domain {
    pub(super) root: Level,
}

impl Domain {
    /// The node that `entries` (key, value pairs, in order) match, one level per entry, if
    /// it has a limit. At each level an entry tries the node of its key and exactly its
    /// value, then the nodes of its key whose value is a `*` pattern (in file order), then
    /// the node of its key without a value.
    pub fn find<'e>(
        &self,
        entries: impl IntoIterator<Item = (&'e str, &'e str)>,
    ) -> Option<Found<'_>> {
        let mut level = &self.root;
        let mut node: Option<&Node> = None;
        let mut via = SmallVec::new();
        for (key, value) in entries {
            if let Some(previous) = node {
                level = &previous.children;
            }
            let nodes = level.keys.get(key)?;
            let (next, step) = if let Some(n) = nodes.exact.get(value) {
                (n, Via::of(n, None, true))
            } else if let Some((p, n)) = nodes.patterns.iter().find(|(p, _)| p.matches(value)) {
                (n, Via::of(n, Some(p), false))
            } else {
                let n = nodes.any.as_ref()?;
                (n, Via::of(n, None, false))
            };
            via.push(step);
            node = Some(next);
        }
        let limit = node?.limit.as_ref()?;
        Some(Found { limit, via })
    }
}

/// Every domain loaded.
#[derive(Debug, Default)]
pub struct Domains {
    pub(super) domains: HashMap<String, Domain>,
}

impl Domains {
    /// The domain named `domain`, if a file defines it.
    pub fn get(&self, domain: &str) -> Option<&Domain> {
        self.domains.get(domain)
    }

    /// How many domains were loaded.
    pub fn len(&self) -> usize {
        self.domains.len()
    }

    /// Whether no file defined a domain.
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
                        .chain(k.patterns.iter().map(|(_, n)| n))
                        .chain(k.any.iter())
                        .map(|n| usize::from(n.limit.is_some()) + count(&n.children))
                        .sum::<usize>()
                })
                .sum()
        }
        self.domains.values().map(|d| count(&d.root)).sum()
    }
}
