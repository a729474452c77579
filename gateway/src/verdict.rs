//! What the module answered, read from its reply: RESP2 `[allowed, limit, remaining,
//! reset_after_ms, retry_after_ms]` or the RESP3 map of the same names, whose `tiers` array
//! gives every tier of a multi-tier call.

use redis::Value;
use smallvec::SmallVec;

/// One tier's state after a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TierState {
    pub(crate) allowed: bool,
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    pub(crate) reset_after_ms: u64,
    pub(crate) retry_after_ms: u64,
}

/// The whole answer: the binding tier (the one the reply leads with) and every tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    binding: TierState,
    /// Every tier in rule order; just the binding one for a single tier.
    tiers: SmallVec<[TierState; 2]>,
    /// A shadow policy would have denied (the RESP3 `shadow_denied` field).
    pub(crate) shadow_denied: bool,
}

impl Verdict {
    pub(crate) fn single(tier: TierState) -> Self {
        Verdict {
            binding: tier,
            tiers: SmallVec::from_slice(&[tier]),
            shadow_denied: false,
        }
    }

    /// A verdict of several tiers, `binding` leading.
    pub(crate) fn with_tiers(binding: TierState, tiers: SmallVec<[TierState; 2]>) -> Self {
        Verdict {
            binding,
            tiers,
            shadow_denied: false,
        }
    }

    pub(crate) fn allowed(&self) -> bool {
        self.binding.allowed
    }

    /// The reply's top-level answer: the binding tier's limit and remaining, the longest
    /// retry_after_ms, and the latest reset over all tiers (when everything is whole again).
    pub(crate) fn binding(&self) -> &TierState {
        &self.binding
    }

    /// The binding tier itself, with its own reset: the tier the top-level limit and
    /// remaining come from.
    pub(crate) fn binding_tier(&self) -> &TierState {
        let b = &self.binding;
        self.tiers
            .iter()
            .find(|t| t.allowed == b.allowed && t.limit == b.limit && t.remaining == b.remaining)
            .unwrap_or(b)
    }

    pub(crate) fn tiers(&self) -> &[TierState] {
        &self.tiers
    }

    /// What a look (`RL.PEEK` with `COST units`) that allowed says is left now: each
    /// allowing tier's remaining plus the units the look did not take.
    pub(crate) fn before_look(&self, units: u64) -> Verdict {
        let back = |t: &TierState| TierState {
            remaining: if t.allowed {
                t.remaining.saturating_add(units).min(t.limit)
            } else {
                t.remaining
            },
            ..*t
        };
        Verdict {
            binding: back(&self.binding),
            tiers: self.tiers.iter().map(back).collect(),
            shadow_denied: self.shadow_denied,
        }
    }

    /// The same verdict `ms` later: every wait shorter by that much.
    pub(crate) fn aged(&self, ms: u64) -> Verdict {
        let age = |t: &TierState| TierState {
            reset_after_ms: t.reset_after_ms.saturating_sub(ms),
            retry_after_ms: t.retry_after_ms.saturating_sub(ms),
            ..*t
        };
        Verdict {
            binding: age(&self.binding),
            tiers: self.tiers.iter().map(age).collect(),
            shadow_denied: self.shadow_denied,
        }
    }

    /// The same verdict `ms` later, with `held` more units in every allowing tier (at
    /// most its limit): what a client of a gateway holding `held` units of the key's
    /// budget (`local_quota`) can still spend.
    pub(crate) fn holding(&self, held: u64, ms: u64) -> Verdict {
        let aged = self.aged(ms);
        let more = |t: &TierState| TierState {
            remaining: if t.allowed {
                t.remaining.saturating_add(held).min(t.limit)
            } else {
                t.remaining
            },
            ..*t
        };
        Verdict {
            binding: more(&aged.binding),
            tiers: aged.tiers.iter().map(more).collect(),
            shadow_denied: aged.shadow_denied,
        }
    }

    /// Reads a reply of RL.TAKE: RL.HIT's verdict and the units granted (RESP2: a sixth
    /// integer; RESP3: the `granted` field). `None` when it is not one, or when what it
    /// says does not hold together (units granted on a denial, none on an allowance).
    pub(crate) fn from_take_reply(value: &Value) -> Option<(Verdict, u64)> {
        let (verdict, granted) = match value {
            Value::Array(items) => match items.as_slice() {
                [first @ .., granted] if first.len() == 5 => (
                    Verdict::single(tier_from_array(first)?),
                    non_negative(granted)?,
                ),
                _ => return None,
            },
            Value::Map(fields) => {
                let granted = fields
                    .iter()
                    .find(|(name, _)| field_name(name) == Some("granted"))
                    .and_then(|(_, value)| non_negative(value))?;
                (Verdict::from_reply(value)?, granted)
            }
            _ => return None,
        };
        (verdict.allowed() == (granted > 0)).then_some((verdict, granted))
    }

    /// Reads a reply of RL.HIT; `None` when it is not one.
    pub(crate) fn from_reply(value: &Value) -> Option<Verdict> {
        match value {
            Value::Array(items) => {
                let tier = tier_from_array(items)?;
                Some(Verdict::single(tier))
            }
            Value::Map(fields) => {
                let binding = tier_from_map(fields)?;
                let mut verdict = Verdict::single(binding);
                for (name, value) in fields {
                    match (field_name(name)?, value) {
                        ("tiers", Value::Array(tiers)) => {
                            verdict.tiers = tiers
                                .iter()
                                .map(|t| match t {
                                    Value::Map(fields) => tier_from_map(fields),
                                    _ => None,
                                })
                                .collect::<Option<_>>()?;
                        }
                        ("shadow_denied", Value::Int(flag)) => verdict.shadow_denied = *flag != 0,
                        _ => {}
                    }
                }
                Some(verdict)
            }
            _ => None,
        }
    }
}

/// What `RL.MHIT` (or `RL.MREFUND`) answered: RESP2 `[allowed, binding, [key reply ...]]`,
/// RESP3 a map `allowed`, `binding`, `keys`, each key's reply read as [`Verdict`] reads
/// RL.HIT's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MultiVerdict {
    pub(crate) allowed: bool,
    /// The index of the binding key, in key order.
    pub(crate) binding: usize,
    pub(crate) keys: Vec<Verdict>,
}

impl MultiVerdict {
    /// Reads a reply for `count` keys; `None` when it is not one (the wrong number of keys,
    /// a binding index outside them).
    pub(crate) fn from_reply(value: &Value, count: usize) -> Option<MultiVerdict> {
        let (allowed, binding, keys) = match value {
            Value::Array(items) => match items.as_slice() {
                [allowed, binding, Value::Array(keys)] => (allowed, binding, keys),
                _ => return None,
            },
            Value::Map(fields) => {
                let mut parts = [None, None, None];
                for (name, value) in fields {
                    let slot = match field_name(name)? {
                        "allowed" => 0,
                        "binding" => 1,
                        "keys" => 2,
                        _ => continue,
                    };
                    parts[slot] = Some(value);
                }
                match parts {
                    [Some(allowed), Some(binding), Some(Value::Array(keys))] => {
                        (allowed, binding, keys)
                    }
                    _ => return None,
                }
            }
            _ => return None,
        };
        let keys = keys
            .iter()
            .map(Verdict::from_reply)
            .collect::<Option<Vec<_>>>()?;
        let binding = usize::try_from(non_negative(binding)?).ok()?;
        let allowed = non_negative(allowed)? != 0;
        // Allowed exactly when every key allows; denied, the binding key is one that
        // denies. Anything else is not a decision to act on.
        if keys.len() != count
            || binding >= count
            || allowed != keys.iter().all(Verdict::allowed)
            || (!allowed && keys[binding].allowed())
        {
            return None;
        }
        Some(MultiVerdict {
            allowed,
            binding,
            keys,
        })
    }
}

/// What `RL.ACQUIRE` answered: RESP2 `[acquired, max, free, id, ttl_ms, retry_after_ms]`,
/// RESP3 a map of the same names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseVerdict {
    /// The lease's id when one was taken (`id` is null otherwise).
    pub(crate) id: Option<String>,
    pub(crate) max: u64,
    /// Slots left after this call.
    pub(crate) free: u64,
    pub(crate) ttl_ms: u64,
    /// 0 when taken; else the wait until a slot frees or the tiers allow, [`NEVER`] when
    /// the cost is above a tier's limit.
    pub(crate) retry_after_ms: u64,
}

impl LeaseVerdict {
    /// Reads a reply of RL.ACQUIRE; `None` when it is not one (a taken lease without an
    /// id, or an id with none taken).
    pub(crate) fn from_reply(value: &Value) -> Option<LeaseVerdict> {
        let fields: [Option<&Value>; 6] = match value {
            Value::Array(items) => match items.as_slice() {
                [a, b, c, d, e, f] => [Some(a), Some(b), Some(c), Some(d), Some(e), Some(f)],
                _ => return None,
            },
            Value::Map(pairs) => {
                let mut fields = [None; 6];
                for (name, value) in pairs {
                    let slot = match field_name(name)? {
                        "acquired" => 0,
                        "max" => 1,
                        "free" => 2,
                        "id" => 3,
                        "ttl_ms" => 4,
                        "retry_after_ms" => 5,
                        _ => continue,
                    };
                    fields[slot] = Some(value);
                }
                fields
            }
            _ => return None,
        };
        let [Some(acquired), Some(max), Some(free), Some(id), Some(ttl), Some(retry)] = fields
        else {
            return None;
        };
        let acquired = non_negative(acquired)? != 0;
        let id = match id {
            Value::Nil => None,
            Value::BulkString(bytes) => Some(String::from_utf8(bytes.clone()).ok()?),
            Value::SimpleString(text) => Some(text.clone()),
            _ => return None,
        };
        if acquired != id.is_some() {
            return None;
        }
        Some(LeaseVerdict {
            id,
            max: non_negative(max)?,
            free: non_negative(free)?,
            ttl_ms: non_negative(ttl)?,
            retry_after_ms: retry_after(retry)?,
        })
    }

    /// The same answer as a one-tier decision (limit `max`, remaining `free`), for the
    /// code that reports decisions; `reset_after_ms` is the lease's length.
    pub(crate) fn as_verdict(&self) -> Verdict {
        Verdict::single(TierState {
            allowed: self.id.is_some(),
            limit: self.max,
            remaining: self.free,
            reset_after_ms: self.ttl_ms,
            retry_after_ms: self.retry_after_ms,
        })
    }
}

fn non_negative(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// `retry_after_ms`: -1 is the module's "never" (the cost is more than the limit can ever
/// hold), kept as `u64::MAX`.
fn retry_after(value: &Value) -> Option<u64> {
    match value {
        Value::Int(-1) => Some(NEVER),
        other => non_negative(other),
    }
}

/// A wait that never ends.
pub(crate) const NEVER: u64 = u64::MAX;

fn tier_from_array(items: &[Value]) -> Option<TierState> {
    let [allowed, limit, remaining, reset, retry] = items else {
        return None;
    };
    Some(TierState {
        allowed: non_negative(allowed)? != 0,
        limit: non_negative(limit)?,
        remaining: non_negative(remaining)?,
        reset_after_ms: non_negative(reset)?,
        retry_after_ms: retry_after(retry)?,
    })
}

fn field_name(value: &Value) -> Option<&str> {
    match value {
        Value::SimpleString(s) => Some(s),
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        _ => None,
    }
}

fn tier_from_map(fields: &[(Value, Value)]) -> Option<TierState> {
    let mut values = [None; 5];
    for (name, value) in fields {
        let slot = match field_name(name)? {
            "allowed" => 0,
            "limit" => 1,
            "remaining" => 2,
            "reset_after_ms" => 3,
            "retry_after_ms" => 4,
            _ => continue,
        };
        values[slot] = Some(if slot == 4 {
            retry_after(value)?
        } else {
            non_negative(value)?
        });
    }
    let [allowed, limit, remaining, reset, retry] = values;
    Some(TierState {
        allowed: allowed? != 0,
        limit: limit?,
        remaining: remaining?,
        reset_after_ms: reset?,
        retry_after_ms: retry?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_replies_in_both_protocols() {
        let taken = Value::Array(vec![
            Value::Int(1),
            Value::Int(3),
            Value::Int(2),
            Value::BulkString(b"39de2d24".to_vec()),
            Value::Int(30_000),
            Value::Int(0),
        ]);
        let lease = LeaseVerdict::from_reply(&taken).expect("a lease");
        assert_eq!(lease.id.as_deref(), Some("39de2d24"));
        assert_eq!((lease.max, lease.free, lease.ttl_ms), (3, 2, 30_000));
        assert!(lease.as_verdict().allowed());
        let full = Value::Map(vec![
            (Value::SimpleString("acquired".into()), Value::Int(0)),
            (Value::SimpleString("max".into()), Value::Int(3)),
            (Value::SimpleString("free".into()), Value::Int(0)),
            (Value::SimpleString("id".into()), Value::Nil),
            (Value::SimpleString("ttl_ms".into()), Value::Int(0)),
            (Value::SimpleString("retry_after_ms".into()), Value::Int(-1)),
        ]);
        let denied = LeaseVerdict::from_reply(&full).expect("a denial");
        assert_eq!(denied.id, None);
        assert_eq!(denied.retry_after_ms, NEVER);
        assert!(!denied.as_verdict().allowed());
        // Taken without an id, or an RL.HIT reply: not a lease decision.
        let no_id = Value::Array(vec![
            Value::Int(1),
            Value::Int(3),
            Value::Int(2),
            Value::Nil,
            Value::Int(30_000),
            Value::Int(0),
        ]);
        assert_eq!(LeaseVerdict::from_reply(&no_id), None);
        let hit = Value::Array(vec![Value::Int(1); 5]);
        assert_eq!(LeaseVerdict::from_reply(&hit), None);
    }

    fn map(pairs: &[(&str, Value)]) -> Value {
        Value::Map(
            pairs
                .iter()
                .map(|(k, v)| (Value::SimpleString((*k).into()), v.clone()))
                .collect(),
        )
    }

    fn fields(values: [i64; 5]) -> Vec<(&'static str, Value)> {
        [
            "allowed",
            "limit",
            "remaining",
            "reset_after_ms",
            "retry_after_ms",
        ]
        .into_iter()
        .zip(values.map(Value::Int))
        .collect()
    }

    #[test]
    fn resp2_array() {
        let reply = Value::Array([1, 5, 4, 60_000, 0].map(Value::Int).to_vec());
        let verdict = Verdict::from_reply(&reply).unwrap();
        assert!(verdict.allowed());
        assert_eq!(verdict.binding().remaining, 4);
        assert_eq!(verdict.tiers().len(), 1);
    }

    #[test]
    fn resp3_map_with_tiers_and_shadow() {
        let mut top = fields([0, 10, 0, 900, 100]);
        top.push(("shadow_denied", Value::Int(1)));
        top.push((
            "tiers",
            Value::Array(vec![
                map(&fields([0, 10, 0, 900, 100])),
                map(&fields([1, 300, 290, 60_000, 0])),
            ]),
        ));
        let verdict = Verdict::from_reply(&map(&top)).unwrap();
        assert!(!verdict.allowed());
        assert!(verdict.shadow_denied);
        assert_eq!(verdict.tiers().len(), 2);
        assert_eq!(verdict.tiers()[1].remaining, 290);
        assert_eq!(verdict.binding_tier().limit, 10);
    }

    #[test]
    fn several_keys_in_both_shapes() {
        let key = |v: [i64; 5]| Value::Array(v.map(Value::Int).to_vec());
        let resp2 = Value::Array(vec![
            Value::Int(0),
            Value::Int(1),
            Value::Array(vec![key([1, 5, 4, 10, 0]), key([0, 2, 0, 900, 900])]),
        ]);
        let multi = MultiVerdict::from_reply(&resp2, 2).unwrap();
        assert!(!multi.allowed);
        assert_eq!(multi.binding, 1);
        assert_eq!(multi.keys[1].binding().retry_after_ms, 900);
        assert!(
            MultiVerdict::from_reply(&resp2, 3).is_none(),
            "three keys asked"
        );
        let resp3 = map(&[
            ("allowed", Value::Int(1)),
            ("binding", Value::Int(0)),
            (
                "keys",
                Value::Array(vec![
                    map(&fields([1, 5, 3, 10, 0])),
                    map(&fields([1, 9, 8, 10, 0])),
                ]),
            ),
        ]);
        let multi = MultiVerdict::from_reply(&resp3, 2).unwrap();
        assert!(multi.allowed);
        assert_eq!(multi.keys[0].binding().remaining, 3);
        let outside = map(&[
            ("allowed", Value::Int(1)),
            ("binding", Value::Int(2)),
            ("keys", Value::Array(vec![map(&fields([1, 5, 3, 10, 0]))])),
        ]);
        assert!(MultiVerdict::from_reply(&outside, 1).is_none());
        let inconsistent = Value::Array(vec![
            Value::Int(0),
            Value::Int(0),
            Value::Array(vec![key([1, 5, 4, 10, 0]), key([0, 2, 0, 900, 900])]),
        ]);
        assert!(
            MultiVerdict::from_reply(&inconsistent, 2).is_none(),
            "the binding key of a denial allows"
        );
    }

    #[test]
    fn anything_else_is_refused() {
        let never = Verdict::from_reply(&Value::Array([0, 5, 5, 0, -1].map(Value::Int).to_vec()));
        assert_eq!(never.unwrap().binding().retry_after_ms, NEVER);
        assert!(Verdict::from_reply(&Value::Okay).is_none());
        assert!(Verdict::from_reply(&Value::Array(vec![Value::Int(1)])).is_none());
        assert!(
            Verdict::from_reply(&Value::Array([1, -5, 4, 0, 0].map(Value::Int).to_vec())).is_none()
        );
        assert!(Verdict::from_reply(&map(&fields([1, 5, 4, 0, 0])[..4])).is_none());
    }
}
