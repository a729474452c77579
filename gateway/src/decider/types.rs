//! What goes into a decision and what comes out of it: the rules that apply, with their
//! keys, and what became of each of them and of the request as a whole.

use crate::failure::Failure;
use crate::rules::Rule;
use crate::verdict::Verdict;
use smallvec::SmallVec;
use std::sync::Arc;

/// One rule that applies to a request, with the key it charges.
pub(crate) struct Applied {
    pub(crate) rule: Arc<Rule>,
    pub(crate) key: String,
    /// The units this request counts, when the front end says (Envoy's `hits_addend`):
    /// sent as `COST n` after the rule's words, which then carry no `COST` of their own.
    /// `None`: the rule's own cost.
    pub(crate) cost: Option<u64>,
}

/// A call that decides nothing about admission: what a hit would do, or a refund.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// `RL.PEEK` / `RL.MPEEK`: counts nothing.
    Peek,
    /// `RL.REFUND` / `RL.MREFUND`: gives back up to the cost, never above the limit.
    Refund,
}

impl Look {
    /// The command for one key and the one for several.
    pub(super) fn commands(self) -> (&'static str, &'static str) {
        match self {
            Look::Peek => ("RL.PEEK", "RL.MPEEK"),
            Look::Refund => ("RL.REFUND", "RL.MREFUND"),
        }
    }
}

/// What became of one applying rule.
#[derive(Debug, Clone)]
pub(crate) enum RuleOutcome {
    /// The rule has no limits: nothing to ask.
    Unlimited,
    /// Not asked: the deny cache, another rule's denial or a fail-closed failure decided
    /// first.
    NotAsked,
    /// Counted, and still counted.
    Allowed(Verdict),
    /// Would allow, but nothing of the request is counted: another key of its `RL.MHIT`
    /// denied, or it was counted and given back after a later rule denied or closed. The
    /// verdict is what it holds now.
    Uncounted(Verdict),
    /// `cached`: answered from the deny cache, without Redis.
    Denied {
        verdict: Verdict,
        cached: bool,
    },
    /// A shadow rule (or policy) would have denied; nothing was counted.
    ShadowDenied,
    /// Redis could not decide (`failure`) and the rule's local limit did
    /// (`on_redis_failure = "local"`): counted in the gateway's memory when allowed.
    Local {
        verdict: Verdict,
        failure: Failure,
    },
    Failed(Failure),
}

/// What the rules together decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// No applying rule has limits.
    Unlimited,
    /// Every limited rule allowed, would have (shadow), or failed open.
    Allowed,
    /// The rule at `binding` denied: its wait is the one to report.
    Denied { binding: usize, cached: bool },
    /// The rule at `rule` could not be decided and fails closed: 503.
    Closed { rule: usize, failure: Failure },
}

/// The decision on one request: each applying rule's outcome, in rule order, and the end.
pub(crate) struct Stacked {
    pub(crate) outcomes: SmallVec<[RuleOutcome; 2]>,
    pub(crate) end: End,
    /// What became of the lease of a rule with `concurrency`, asked for under the id the
    /// caller chose: the caller holds a lease taken until the response ends, then gives it
    /// back with [`super::Decider::release`].
    pub(crate) lease: LeaseAnswer,
}

/// What became of the lease a `concurrency` rule asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseAnswer {
    /// None was asked for, or Redis answered that it took none (no free slot, a tier
    /// denied, an error reply), or the call was never sent (the breaker).
    NotTaken,
    /// Taken: held until the response ends.
    Taken,
    /// The call was sent but its answer did not come (the deadline passed, the connection
    /// broke): Redis may have taken the lease, or may yet, so it must be given back.
    Unknown,
}

/// What `RL.RELEASE` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The lease was held and is free now.
    Freed,
    /// Not held (never taken, already expired): nothing changed.
    NotHeld,
    /// No answer: a lease still held ends by its `lease_ttl`.
    Failed,
}
