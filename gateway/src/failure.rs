//! Why a decision could not be made: what the backend makes of a Redis error
//! ([`crate::decider::redis::classify`]) and what the decider adds (its deadline passing, its
//! breaker open). The metrics count it by reason; a rule's `on_*` settings say whether it
//! closes the route.

/// Why Redis could not decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No answer within the deadline.
    Timeout,
    /// No connection (refused, dropped, not yet made).
    Connection,
    /// The server answered that it cannot take the command now: OOM, LOADING, READONLY,
    /// MASTERDOWN, CLUSTERDOWN, TRYAGAIN, BUSY.
    Unavailable,
    /// Any other error reply, e.g. the module is not loaded or a policy does not exist.
    Error,
    /// The circuit breaker is open: Redis was not asked.
    Breaker,
}

impl Failure {
    pub(crate) const ALL: [Failure; 5] = [
        Failure::Timeout,
        Failure::Connection,
        Failure::Unavailable,
        Failure::Error,
        Failure::Breaker,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Connection => "connection",
            Failure::Unavailable => "unavailable",
            Failure::Error => "error",
            Failure::Breaker => "breaker",
        }
    }
}
