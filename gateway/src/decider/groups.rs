//! Which rules one call charges, and what happens when a call for several answers an
//! error: written once for the decision, its give-back and the looks.
//!
//! Keys in one slot (on one server: any keys) go in one `RL.MHIT` (`RL.MPEEK`,
//! `RL.MREFUND`), at most [`MAX_APPLYING`] of them. When such a call answers an error
//! reply, one rule's misconfiguration (a missing policy, say) is the likely cause: its
//! rules are then asked one by one, so that each call names the rule at fault and each
//! rule fails open or closed as it says.

use super::redis::same_slot;
use super::Applied;
use crate::rules::MAX_APPLYING;
use smallvec::SmallVec;

/// The rules (indexes into the applying ones) that one call charges.
pub(super) type Group = SmallVec<[usize; 2]>;

/// Whether a shadow rule may share a call with others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shadow {
    /// A shadow rule is a call of its own: a multi-key call counts all of its keys or
    /// none, and a shadow rule's denial must not deny the others.
    Apart,
    /// Any rules share a call (looks, which count nothing and take each key's verdict).
    Together,
}

/// The groups still to be called, taken in rule order of their first rule; inline for the
/// common cases (no allocation on the request path).
pub(super) struct Pending {
    /// Last group first, so that popping takes them in rule order.
    stack: SmallVec<[Group; 2]>,
}

impl Pending {
    /// The rules `indices` of `applying`, each joining the first group it may join (see
    /// [`may_join`]), or starting one of its own.
    pub(super) fn new(
        applying: &[Applied],
        indices: impl Iterator<Item = usize>,
        cluster: bool,
        shadow: Shadow,
    ) -> Self {
        Pending::with_alone(applying, indices, cluster, shadow, |_| false)
    }

    /// As [`Pending::new`], and each rule for which `alone` says so is a call of its own
    /// (a take of local quota: `RL.TAKE` is for one key).
    pub(super) fn with_alone(
        applying: &[Applied],
        indices: impl Iterator<Item = usize>,
        cluster: bool,
        shadow: Shadow,
        alone: impl Fn(usize) -> bool,
    ) -> Self {
        let apart = |i: usize| alone(i) || (shadow == Shadow::Apart && applying[i].rule.shadow);
        let mut groups: SmallVec<[Group; 2]> = SmallVec::new();
        for i in indices {
            let joins = match apart(i) {
                true => None,
                false => groups
                    .iter_mut()
                    .find(|g| !apart(g[0]) && may_join(applying, g, i, cluster)),
            };
            match joins {
                Some(group) => group.push(i),
                None => groups.push(smallvec::smallvec![i]),
            }
        }
        groups.reverse();
        Pending { stack: groups }
    }

    /// After `group`'s call for several keys answered an error reply: its rules are the
    /// next groups, one rule each, in rule order. `false` (nothing changed) for a group of
    /// one, whose error is its rule's own.
    pub(super) fn split(&mut self, group: &[usize]) -> bool {
        if group.len() < 2 {
            return false;
        }
        for &i in group.iter().rev() {
            self.stack.push(smallvec::smallvec![i]);
        }
        true
    }
}

impl Iterator for Pending {
    type Item = Group;

    fn next(&mut self) -> Option<Group> {
        self.stack.pop()
    }
}

/// Whether `applying[i]` may join `group` in one multi-key call: fewer than
/// [`MAX_APPLYING`] keys (the most RL.MHIT takes), in the same slot on a cluster, and not
/// its key again. The module refuses a key named twice (both mentions would be decided
/// from the same state), and Envoy descriptors repeated in one request name one key twice:
/// in calls of their own they are counted one after the other, and given back so.
fn may_join(applying: &[Applied], group: &[usize], i: usize, cluster: bool) -> bool {
    let key = &applying[i].key;
    group.len() < MAX_APPLYING
        && (!cluster || same_slot(&applying[group[0]].key, key))
        && group.iter().all(|&j| &applying[j].key != key)
}
