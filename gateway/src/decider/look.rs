//! [`Decider::look`]: what a hit would do (`RL.PEEK`), or a refund (`RL.REFUND`), for every
//! key of a request; neither decides whether the request goes through.

use super::groups::{Pending, Shadow};
use super::{Applied, Decider, Look, Transport};
use crate::failure::Failure;
use crate::rules::Limit;
use crate::verdict::Verdict;
use smallvec::SmallVec;

/// Each rule's answer to a look, in order; a rule without limits answers `Ok(None)`.
pub(crate) type LookAnswers = SmallVec<[Result<Option<Verdict>, Failure>; 2]>;

impl<T: Transport> Decider<T> {
    /// Looks at (`RL.PEEK`) or gives back to (`RL.REFUND`) every key of `applying`, each
    /// with its own cost, under one deadline, through the breaker: keys in one slot (on
    /// one server: all of them) in one `RL.MPEEK` / `RL.MREFUND`; when one of those answers
    /// an error, its keys are asked one by one, each answering for itself. Each rule's
    /// answer, in order; a rule without limits answers `Ok(None)`. The deny cache is not
    /// asked: a look must say what Redis holds, and a refund changes it (so the denials it
    /// remembers for these keys are forgotten).
    pub(crate) async fn look(&self, applying: &[Applied], look: Look) -> LookAnswers {
        let mut answers: LookAnswers = applying.iter().map(|_| Ok(None)).collect();
        let (one, many) = look.commands();
        let limited: SmallVec<[usize; 4]> = applying
            .iter()
            .enumerate()
            .filter(|(_, a)| a.rule.limit != Limit::Unlimited)
            .map(|(i, _)| i)
            .collect();
        if look == Look::Refund {
            for &i in &limited {
                self.deny_cache.forget(&applying[i].key);
            }
        }
        let cluster = self.backend.is_cluster();
        let mut pending = Pending::new(applying, limited.into_iter(), cluster, Shadow::Together);
        let deadline = tokio::time::Instant::now() + self.deadline;
        while let Some(group) = pending.next() {
            let result: Result<SmallVec<[Verdict; 2]>, Failure> = match group[..] {
                [i] => self
                    .call(one, &applying[i], deadline, None)
                    .await
                    .map(|v| SmallVec::from_elem(v, 1)),
                _ => self
                    .call_multi(many, applying, &group, deadline, None)
                    .await
                    .map(|multi| multi.keys.into_iter().collect()),
            };
            match result {
                Err(Failure::Error) if pending.split(&group) => continue,
                Ok(verdicts) => {
                    for (&i, verdict) in group.iter().zip(verdicts) {
                        if look == Look::Refund && verdict.allowed() {
                            self.metrics.refund(&applying[i].rule.name);
                        }
                        answers[i] = Ok(Some(verdict));
                    }
                }
                Err(failure) => {
                    for &i in &group {
                        answers[i] = Err(failure);
                    }
                }
            }
        }
        answers
    }
}
