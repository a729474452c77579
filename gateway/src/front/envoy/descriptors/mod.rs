//! envoyproxy/ratelimit's YAML configuration, read as it is: one `domain` per file (files
//! of one domain merged under `[envoy] merge_domains`, refused otherwise), its nested
//! `descriptors` of `key` and optional `value`, each with an optional `rate_limit`
//! {`unit`, `requests_per_unit`} or {`unlimited: true`}, `name` and `replaces`, and
//! `shadow_mode`, `quota_mode`, `detailed_metric`, `value_to_metric`, `share_threshold` and
//! `metadata`. A directory loads every `*.yaml` / `*.yml` in it. Their refusals are ours
//! (an empty domain or key, a key and value twice at one level, `replaces` naming its own
//! limit or nothing, `share_threshold` without a `*`, a unit beside `unlimited`), each
//! naming the file and the place.
//!
//! Matching is theirs: a request descriptor of n entries matches a node n levels deep, each
//! entry trying, at its level, the node with its key and exactly its value, then the nodes
//! whose value is a `*` pattern (`pattern.rs`, in file order), then the node with its key and
//! no value (any value, one counter per value). No match, or a node without a
//! `rate_limit`, is not limited. [`Domain::find`] says how each entry matched ([`Found`]):
//! under `share_threshold` the pattern stands for the value in the Redis key, and
//! `detailed_metric` / `value_to_metric` put request values into the metric name
//! (`names.rs`), as in their stats keys.
//!
//! Our extensions are fields of their own names, which envoyproxy/ratelimit would refuse:
//! in `rate_limit`, `algorithm`, `burst`, `tiers` (more `n/window` tiers) and `policy` (a
//! named policy stored in Redis); on a descriptor (or for the whole file, at the top),
//! `subject` (which entry's key and value are the hash tag, see [`key`]), `limit_override`
//! and `on_failure` (`local`, the default, `ok`, `over_limit` or `unavailable`).

mod compile;
mod error;
mod limit;
mod load;
mod matching;
mod metadata;
mod modes;
mod names;
mod pattern;
mod schema;
mod unit;

pub use error::DescriptorError;
pub(crate) use limit::DescriptorLimit;
pub use load::{from_texts, from_texts_merging, load};
#[cfg(test)]
pub(crate) use load::{parse, MAX_DEPTH, MAX_FILES, MAX_FILE_BYTES};
pub use matching::{Domain, Domains, Found};
pub(crate) use modes::{FailMode, OverrideMode};
pub use names::key;
#[cfg(test)]
use names::{metric_label, rule_name};
pub(crate) use names::{metric_name, request_metric_name};
pub use unit::Unit;

#[cfg(test)]
mod peer_metric_tests;
#[cfg(test)]
mod peer_tests;
#[cfg(test)]
mod tests;
