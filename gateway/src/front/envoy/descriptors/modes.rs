//! What a descriptor's `limit_override`, `on_failure` and `on_module_error` say.

/// What a request descriptor's own `limit` (Envoy's `RateLimitOverride`) may do to the
/// limit of the node it matches (`limit_override`, ours). Whatever the mode, the node's key
/// is charged for every request, so a caller that varies the override meets the same spent
/// budget, never a fresh one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OverrideMode {
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
    pub(super) fn parse(at: &str, text: &str) -> Result<OverrideMode, String> {
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
pub(crate) enum FailMode {
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
    pub(crate) fn refuses(self) -> bool {
        matches!(self, FailMode::OverLimit | FailMode::Unavailable)
    }

    pub(super) fn parse(text: &str) -> Option<FailMode> {
        Some(match text {
            "ok" => FailMode::Ok,
            "local" => FailMode::Local,
            "over_limit" => FailMode::OverLimit,
            "unavailable" => FailMode::Unavailable,
            _ => return None,
        })
    }
}
