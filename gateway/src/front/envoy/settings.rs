//! What `[envoy]` says of the answer, beside the descriptors: the service-wide modes
//! envoyproxy/ratelimit sets in its environment (`SHADOW_MODE`, `QUOTA_MODE`,
//! `RESPONSE_DYNAMIC_METADATA`, `LIMIT_RESPONSE_HEADERS_ENABLED` and its header names,
//! `NEAR_LIMIT_RATIO`), and our RateLimit fields. Checked when the file loads
//! (`crate::config`); read by the answer, which stays pure.

/// How the answer is written, for every request.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerSettings {
    /// `response_headers`: the RateLimit / RateLimit-Policy fields (and Retry-After on
    /// OVER_LIMIT) in `response_headers_to_add`.
    pub response_headers: bool,
    /// `limit_headers`: envoyproxy/ratelimit's three headers of the status with the least
    /// remaining, under these names; `None` when off.
    pub limit_headers: Option<LimitHeaders>,
    /// `shadow_mode`: statuses keep their codes, the overall code is always OK.
    pub shadow_mode: bool,
    /// `quota_mode`: every descriptor is a quota descriptor.
    pub quota_mode: bool,
    /// `local_quota`: every descriptor limit that can takes its budget in batches
    /// (`local_quota = true` on a TOML rule).
    pub local_quota: bool,
    /// `response_dynamic_metadata`: the request and the passing descriptors' `metadata`
    /// in the response's `dynamic_metadata`.
    pub response_dynamic_metadata: bool,
    /// `near_limit_ratio`: the share of a limit above which hits count as `near_limit`,
    /// in (0, 1].
    pub near_limit_ratio: f64,
}

impl Default for AnswerSettings {
    fn default() -> Self {
        AnswerSettings {
            response_headers: true,
            limit_headers: None,
            shadow_mode: false,
            quota_mode: false,
            local_quota: false,
            response_dynamic_metadata: false,
            near_limit_ratio: DEFAULT_NEAR_LIMIT_RATIO,
        }
    }
}

/// envoyproxy/ratelimit's `NEAR_LIMIT_RATIO` default.
pub const DEFAULT_NEAR_LIMIT_RATIO: f64 = 0.8;

/// The names of envoyproxy/ratelimit's three response headers (`LIMIT_LIMIT_HEADER`,
/// `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitHeaders {
    /// The limit's `requests_per_unit`.
    pub limit: String,
    /// What is left of it.
    pub remaining: String,
    /// Seconds until it resets.
    pub reset: String,
}

impl Default for LimitHeaders {
    fn default() -> Self {
        LimitHeaders {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

impl AnswerSettings {
    /// Whether descriptors are charged each on its own, never given back for another's
    /// denial: when every descriptor is a quota one, or none can deny the request.
    pub(crate) fn charges_apart(&self) -> bool {
        self.quota_mode || self.shadow_mode
    }
}
