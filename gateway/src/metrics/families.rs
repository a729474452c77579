//! The labelled families, kept in prometheus-client's [`Family`], with what it leaves to
//! its user: the counters the hot path bumps are found without allocating (a lookup by
//! `&str`, then an atomic add), every value of a family's second label shows from the
//! first use of its rule (a series that is 0 rather than missing, so that `rate()` and
//! alerts see its first increase), and the number of `rule` labels is bounded.

use super::labels::LabelValue;
use prometheus_client::encoding::{
    EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::MetricType;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

/// The most rule labels one family keeps. A configured rule's name is bounded by the
/// configuration, but an Envoy descriptor's `detailed_metric` or `value_to_metric` puts
/// request values into the label: without a bound, a client that sends fresh values would
/// grow the gateway's memory and every scrape without end.
pub(crate) const MAX_RULE_LABELS: usize = 10_000;
/// The label a new name is counted under once [`MAX_RULE_LABELS`] are held.
pub(crate) const OTHER_RULE_LABEL: &str = "~other";

/// The labels of one series of a family split by rule: `rule`, then the label of `V`
/// (if it has one), in that order on the line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct RuleSeries<V> {
    rule: Arc<str>,
    value: V,
}

impl<V: LabelValue> EncodeLabelSet for RuleSeries<V> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("rule", &*self.rule).encode(encoder.encode_label())?;
        match V::NAME {
            Some(name) => (name, self.value.text()).encode(encoder.encode_label()),
            None => Ok(()),
        }
    }
}

/// A counter family labelled by rule (and by `V`), at most [`MAX_RULE_LABELS`] rules.
#[derive(Debug)]
pub(super) struct PerRule<V: LabelValue + Eq + std::hash::Hash> {
    family: Family<RuleSeries<V>, Counter>,
    /// Per rule, its counters in the order of `V::ALL`: the same counters as the family's
    /// (a prometheus-client counter is a shared atomic), found by `&str`.
    index: RwLock<HashMap<Arc<str>, Box<[Counter]>>>,
}

impl<V: LabelValue + Eq + std::hash::Hash> PerRule<V> {
    pub(super) fn new() -> PerRule<V> {
        PerRule {
            family: Family::default(),
            index: RwLock::new(HashMap::new()),
        }
    }

    /// The family, to register (a clone shares its series).
    pub(super) fn family(&self) -> Always<Family<RuleSeries<V>, Counter>> {
        Always(self.family.clone())
    }

    /// Adds `n` to the series of `rule` and `value`, made with the rule's other series on
    /// its first use (once [`MAX_RULE_LABELS`] are held, a new name is counted as
    /// [`OTHER_RULE_LABEL`]).
    pub(super) fn add(&self, rule: &str, value: V, n: u64) {
        {
            let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
            let counters = index
                .get(rule)
                .or_else(|| match index.len() >= MAX_RULE_LABELS {
                    true => index.get(OTHER_RULE_LABEL),
                    false => None,
                });
            if let Some(counters) = counters {
                counters[value.index()].inc_by(n);
                return;
            }
        }
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        let name = match index.len() >= MAX_RULE_LABELS && !index.contains_key(rule) {
            true => OTHER_RULE_LABEL,
            false => rule,
        };
        if !index.contains_key(name) {
            let rule: Arc<str> = Arc::from(name);
            let counters = V::ALL
                .iter()
                .map(|&value| {
                    let series = RuleSeries {
                        rule: rule.clone(),
                        value,
                    };
                    self.family.get_or_create_owned(&series)
                })
                .collect();
            index.insert(rule, counters);
        }
        if let Some(counters) = index.get(name) {
            counters[value.index()].inc_by(n);
        }
    }
}

/// A counter family split by one label whose values are all known (`V::ALL`), each
/// series made at start: the hot path indexes an array.
#[derive(Debug)]
pub(super) struct ByLabel<V: LabelValue> {
    family: Family<[(&'static str, &'static str); 1], Counter>,
    counters: Box<[Counter]>,
    _value: std::marker::PhantomData<V>,
}

impl<V: LabelValue> ByLabel<V> {
    pub(super) fn new() -> ByLabel<V> {
        let family = Family::<[(&'static str, &'static str); 1], Counter>::default();
        let name = V::NAME.unwrap_or("value");
        let counters = V::ALL
            .iter()
            .map(|value| family.get_or_create_owned(&[(name, value.text())]))
            .collect();
        ByLabel {
            family,
            counters,
            _value: std::marker::PhantomData,
        }
    }

    pub(super) fn family(&self) -> Family<[(&'static str, &'static str); 1], Counter> {
        self.family.clone()
    }

    pub(super) fn inc(&self, value: V) {
        self.counters[value.index()].inc();
    }
}

/// A metric whose HELP and TYPE lines are written even when it holds no series yet:
/// prometheus-client leaves an empty family out, and the gateway has always described
/// every family in every scrape (its tests and the operators' tooling find them there).
#[derive(Debug)]
pub(super) struct Always<M>(M);

impl<M: EncodeMetric> EncodeMetric for Always<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}
