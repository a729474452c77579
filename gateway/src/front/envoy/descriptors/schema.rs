//! The YAML files as serde reads them: envoyproxy/ratelimit's fields and ours, any other
//! field refused.

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileDoc {
    pub(super) domain: Option<String>,
    #[serde(default)]
    pub(super) descriptors: Vec<DescriptorDoc>,
    // Ours, inherited by every descriptor of the file.
    pub(super) on_failure: Option<String>,
    pub(super) on_module_error: Option<String>,
    pub(super) limit_override: Option<String>,
    pub(super) subject: Option<String>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a descriptor: a mapping with a key (and value, rate_limit, descriptors...)"
)]
pub(super) struct DescriptorDoc {
    pub(super) key: Option<String>,
    pub(super) value: Option<String>,
    pub(super) rate_limit: Option<RateLimitDoc>,
    #[serde(default)]
    pub(super) shadow_mode: bool,
    #[serde(default)]
    pub(super) detailed_metric: bool,
    #[serde(default)]
    pub(super) value_to_metric: bool,
    #[serde(default)]
    pub(super) share_threshold: bool,
    /// Any YAML; checked and turned into a protobuf `Struct` by [`super::metadata`].
    pub(super) metadata: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    pub(super) descriptors: Vec<DescriptorDoc>,
    // Ours.
    #[serde(default)]
    pub(super) quota_mode: bool,
    pub(super) on_failure: Option<String>,
    pub(super) on_module_error: Option<String>,
    pub(super) limit_override: Option<String>,
    pub(super) subject: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RateLimitDoc {
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) replaces: Vec<ReplacesDoc>,
    pub(super) unit: Option<String>,
    pub(super) requests_per_unit: Option<u64>,
    #[serde(default)]
    pub(super) unlimited: bool,
    // Ours.
    pub(super) algorithm: Option<String>,
    pub(super) burst: Option<u64>,
    #[serde(default)]
    pub(super) tiers: Vec<String>,
    pub(super) policy: Option<String>,
    /// The IANA zone of calendar units (a month and a year always are; a day and a week
    /// are when a zone is named), and a month's billing day.
    pub(super) tz: Option<String>,
    pub(super) anchor: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReplacesDoc {
    pub(super) name: Option<String>,
}
