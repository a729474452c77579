//! The descriptor tree of a domain and how a request descriptor finds its node:
//! envoyproxy/ratelimit's matching (an exact value, then a `value*` prefix, then any
//! value, level by level).

use super::DescriptorLimit;
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
    /// `value*`: the prefix, in file order.
    pub(super) prefixed: Vec<(String, Node)>,
    pub(super) any: Option<Node>,
}

#[derive(Debug, Default)]
pub(super) struct Node {
    pub(super) limit: Option<Arc<DescriptorLimit>>,
    pub(super) children: Level,
}

/// One domain's descriptors.
#[derive(Debug)]
pub struct Domain {
    pub(crate) name: String,
    pub(super) root: Level,
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
