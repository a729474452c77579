//! What the counters are split by: the values of their second label (`outcome`, `event`,
//! `result`, `cause`, `stat`), each an enum whose label text is part of the metrics'
//! interface (dashboards and alerts select on it).

/// One value of a label, rendered as given, and its place among the label's values (the
/// index of its counter in the hot path's arrays).
pub(crate) trait LabelValue: Copy + std::fmt::Debug + Send + Sync + 'static {
    /// The label's name, or `None` for a family labelled by `rule` only.
    const NAME: Option<&'static str>;
    /// Every value, in the order their series are made.
    const ALL: &'static [Self];
    /// The text of the label's value.
    fn text(self) -> &'static str;
    /// Where `self` is in [`LabelValue::ALL`].
    fn index(self) -> usize;
}

/// What happened to one request that a rule applied to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    /// Answered from the local cache of denied keys, without Redis.
    DeniedCached,
    /// A shadow rule would have denied it; it went through.
    ShadowDenied,
    FailOpen,
    FailClosed,
    /// Redis could not decide; the rule's local limit allowed it.
    LocalAllowed,
    /// Redis could not decide; the rule's local limit denied it.
    LocalDenied,
}

impl LabelValue for Outcome {
    const NAME: Option<&'static str> = Some("outcome");
    const ALL: &'static [Outcome] = &[
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::DeniedCached,
        Outcome::ShadowDenied,
        Outcome::FailOpen,
        Outcome::FailClosed,
        Outcome::LocalAllowed,
        Outcome::LocalDenied,
    ];

    fn text(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::DeniedCached => "denied_cached",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::FailOpen => "fail_open",
            Outcome::FailClosed => "fail_closed",
            Outcome::LocalAllowed => "local_allowed",
            Outcome::LocalDenied => "local_denied",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What became of one lease (`concurrency` rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LeaseEvent {
    Acquired,
    /// No free slot, or a tier of the rule denied: 429.
    Denied,
    /// Given back (`RL.RELEASE` answered).
    Released,
    /// The release found no Redis: the lease ends by its `lease_ttl`.
    ReleaseFailed,
    /// Taken by Redis after the gateway stopped waiting for `RL.ACQUIRE` (the deadline
    /// passed, the connection broke, or the client went away mid-call), and given back at
    /// once: a slot that would otherwise have been held for `lease_ttl` by no request.
    Reclaimed,
    /// Renewed while its response was still in flight (every half of lease_ttl).
    Renewed,
    /// Found gone by a renewal while its response was still in flight: it ended because
    /// Redis could not be reached in time to renew it.
    Lost,
}

impl LabelValue for LeaseEvent {
    const NAME: Option<&'static str> = Some("event");
    const ALL: &'static [LeaseEvent] = &[
        LeaseEvent::Acquired,
        LeaseEvent::Denied,
        LeaseEvent::Released,
        LeaseEvent::ReleaseFailed,
        LeaseEvent::Reclaimed,
        LeaseEvent::Renewed,
        LeaseEvent::Lost,
    ];

    fn text(self) -> &'static str {
        match self {
            LeaseEvent::Acquired => "acquired",
            LeaseEvent::Denied => "denied",
            LeaseEvent::Released => "released",
            LeaseEvent::ReleaseFailed => "release_failed",
            LeaseEvent::Reclaimed => "reclaimed",
            LeaseEvent::Renewed => "renewed",
            LeaseEvent::Lost => "lost",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Why a lease was given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ReleaseCause {
    /// The response body was sent to its end.
    End,
    /// The upstream failed (502, 504) or its body broke off.
    Error,
    /// The response was dropped before its end: the client went away.
    Dropped,
}

impl LabelValue for ReleaseCause {
    const NAME: Option<&'static str> = Some("cause");
    const ALL: &'static [ReleaseCause] = &[
        ReleaseCause::End,
        ReleaseCause::Error,
        ReleaseCause::Dropped,
    ];

    fn text(self) -> &'static str {
        match self {
            ReleaseCause::End => "end",
            ReleaseCause::Error => "error",
            ReleaseCause::Dropped => "dropped",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What became of one `ShouldRateLimit` call, or of one of its descriptors that no
/// rule limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EnvoyResult {
    Ok,
    OverLimit,
    /// Answered gRPC UNAVAILABLE: Redis could not decide and the descriptor says so.
    Unavailable,
    /// Refused with INVALID_ARGUMENT.
    Invalid,
    /// A domain no file defines: OK, not limited.
    UnknownDomain,
    /// A descriptor no node matches (or one without a limit): OK, not limited.
    NoMatch,
    /// A descriptor's own `limit` that its node's `limit_override` ignores.
    OverrideIgnored,
    /// Would have been OVER_LIMIT (or UNAVAILABLE), answered OK by `[envoy] shadow_mode`.
    ShadowMode,
}

impl LabelValue for EnvoyResult {
    const NAME: Option<&'static str> = Some("result");
    const ALL: &'static [EnvoyResult] = &[
        EnvoyResult::Ok,
        EnvoyResult::OverLimit,
        EnvoyResult::Unavailable,
        EnvoyResult::Invalid,
        EnvoyResult::UnknownDomain,
        EnvoyResult::NoMatch,
        EnvoyResult::OverrideIgnored,
        EnvoyResult::ShadowMode,
    ];

    fn text(self) -> &'static str {
        match self {
            EnvoyResult::Ok => "ok",
            EnvoyResult::OverLimit => "over_limit",
            EnvoyResult::Unavailable => "unavailable",
            EnvoyResult::Invalid => "invalid_argument",
            EnvoyResult::UnknownDomain => "unknown_domain",
            EnvoyResult::NoMatch => "no_match",
            EnvoyResult::OverrideIgnored => "override_ignored",
            EnvoyResult::ShadowMode => "shadow_mode",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The `stat` of an Envoy descriptor's hits, as envoyproxy/ratelimit's per-limit
/// statistics name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum HitStat {
    TotalHits,
    OverLimit,
    NearLimit,
    WithinLimit,
    ShadowMode,
}

impl LabelValue for HitStat {
    const NAME: Option<&'static str> = Some("stat");
    const ALL: &'static [HitStat] = &[
        HitStat::TotalHits,
        HitStat::OverLimit,
        HitStat::NearLimit,
        HitStat::WithinLimit,
        HitStat::ShadowMode,
    ];

    fn text(self) -> &'static str {
        match self {
            HitStat::TotalHits => "total_hits",
            HitStat::OverLimit => "over_limit",
            HitStat::NearLimit => "near_limit",
            HitStat::WithinLimit => "within_limit",
            HitStat::ShadowMode => "shadow_mode",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One Envoy descriptor's hits (`hits_addend` units), split as envoyproxy/ratelimit's
/// per-limit statistics split them: all of them, those over the limit, those between the
/// near-limit threshold and the limit, those within it (near ones included), and those a
/// shadow limit let through over it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HitCounts {
    pub(crate) total: u64,
    pub(crate) over_limit: u64,
    pub(crate) near_limit: u64,
    pub(crate) within_limit: u64,
    pub(crate) shadow_mode: u64,
}

impl HitCounts {
    /// Each count with its stat.
    pub(super) fn by_stat(&self) -> [(HitStat, u64); 5] {
        [
            (HitStat::TotalHits, self.total),
            (HitStat::OverLimit, self.over_limit),
            (HitStat::NearLimit, self.near_limit),
            (HitStat::WithinLimit, self.within_limit),
            (HitStat::ShadowMode, self.shadow_mode),
        ]
    }
}

/// The one value of a family labelled by `rule` alone (refunds, module errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct RuleOnly;

impl LabelValue for RuleOnly {
    const NAME: Option<&'static str> = None;
    const ALL: &'static [RuleOnly] = &[RuleOnly];

    fn text(self) -> &'static str {
        ""
    }

    fn index(self) -> usize {
        0
    }
}

/// The values of the `rl_gateway_fail_open_total` label `reason`.
impl LabelValue for crate::failure::Failure {
    const NAME: Option<&'static str> = Some("reason");
    const ALL: &'static [Self] = &Self::ALL;

    fn text(self) -> &'static str {
        self.label()
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What came of a reload of the rules (or the Envoy descriptors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ReloadResult {
    Ok,
    Refused,
}

impl LabelValue for ReloadResult {
    const NAME: Option<&'static str> = Some("result");
    const ALL: &'static [ReloadResult] = &[ReloadResult::Ok, ReloadResult::Refused];

    fn text(self) -> &'static str {
        match self {
            ReloadResult::Ok => "ok",
            ReloadResult::Refused => "refused",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}
