//! Decisions as replies: a RESP2 array of integers, or a RESP3 map with named fields.

use crate::server::reply::Reply;
use ratelimit_core::decision::Decision;
use ratelimit_core::lease::{Acquired, Held};
use ratelimit_core::limiter::{MultiOutcome, Outcome};
use redis_module::Context;
use std::ffi::CStr;

/// The RESP3 names of [`Decision::values`], as C strings for the reply API.
const FIELD_NAMES: [&CStr; 5] = [
    c"allowed",
    c"limit",
    c"remaining",
    c"reset_after_ms",
    c"retry_after_ms",
];

/// Replies the binding decision: RESP2 `[allowed, limit, remaining, reset_after_ms,
/// retry_after_ms]`; RESP3 a map from those names to the same integers, plus `tiers`, an
/// array of one such map per tier, when there is more than one tier, and `shadow_denied`
/// (0 or 1) when `shadow_denied` is given (a call through a shadow policy).
pub fn outcome(ctx: &Context, outcome: &Outcome, shadow_denied: Option<bool>) {
    let reply = Reply::to(ctx);
    if !reply.resp3() {
        integers(ctx, &outcome.decision.values());
        return;
    }
    let with_tiers = outcome.tiers.len() > 1;
    let entries = 5 + usize::from(with_tiers) + usize::from(shadow_denied.is_some());
    reply.map(entries);
    decision_fields(reply, &outcome.decision);
    if let Some(denied) = shadow_denied {
        reply.simple(c"shadow_denied");
        reply.integer(i64::from(denied));
    }
    if with_tiers {
        tiers(reply, outcome);
    }
}

/// The RESP3 entry `tiers`: one map of the five fields per tier.
fn tiers(reply: Reply<'_>, outcome: &Outcome) {
    reply.simple(c"tiers");
    reply.array(outcome.tiers.len());
    for tier in &outcome.tiers {
        reply.map(5);
        decision_fields(reply, tier);
    }
}

/// Replies a partial grant (RL.TAKE): RL.HIT's reply ([`outcome`]) with `granted`, the
/// units counted, after its five fields: RESP2 a sixth integer, RESP3 one more entry,
/// before `shadow_denied` and `tiers`.
pub fn grant(ctx: &Context, outcome: &Outcome, granted: i64, shadow_denied: Option<bool>) {
    let reply = Reply::to(ctx);
    if !reply.resp3() {
        let [allowed, limit, remaining, reset, retry] = outcome.decision.values();
        integers(ctx, &[allowed, limit, remaining, reset, retry, granted]);
        return;
    }
    let with_tiers = outcome.tiers.len() > 1;
    let entries = 6 + usize::from(with_tiers) + usize::from(shadow_denied.is_some());
    reply.map(entries);
    decision_fields(reply, &outcome.decision);
    reply.simple(c"granted");
    reply.integer(granted);
    if let Some(denied) = shadow_denied {
        reply.simple(c"shadow_denied");
        reply.integer(i64::from(denied));
    }
    if with_tiers {
        tiers(reply, outcome);
    }
}

/// Replies a several-keys call (RL.MHIT, RL.MPEEK, RL.MREFUND). RESP2: `[allowed, binding,
/// [key reply, ...]]`, each key's reply the five integers of RL.HIT; RESP3: a map `allowed`,
/// `binding` (the binding key's index, from 0), `keys` (an array of RL.HIT's map per key,
/// with `shadow_denied` where `shadow_denied(index)` gives one).
pub fn several(
    ctx: &Context,
    several: &MultiOutcome,
    shadow_denied: impl Fn(usize) -> Option<bool>,
) {
    let reply = Reply::to(ctx);
    let binding = i64::try_from(several.binding).unwrap_or(i64::MAX);
    if reply.resp3() {
        reply.map(3);
        reply.simple(c"allowed");
        reply.integer(i64::from(several.allowed));
        reply.simple(c"binding");
        reply.integer(binding);
        reply.simple(c"keys");
    } else {
        reply.array(3);
        reply.integer(i64::from(several.allowed));
        reply.integer(binding);
    }
    reply.array(several.keys.len());
    for (index, key) in several.keys.iter().enumerate() {
        outcome(ctx, &key.outcome, shadow_denied(index));
    }
}

/// The five name/value pairs of a decision, inside a map already opened.
fn decision_fields(reply: Reply<'_>, decision: &Decision) {
    for (value, name) in decision.values().into_iter().zip(FIELD_NAMES) {
        reply.simple(name);
        reply.integer(value);
    }
}

/// Replies an array of integers (the same in RESP2 and RESP3).
pub fn integers(ctx: &Context, values: &[i64]) {
    let reply = Reply::to(ctx);
    reply.array(values.len());
    for value in values {
        reply.integer(*value);
    }
}

/// Replies name/value pairs: a map in RESP3, a flat `[name, value, ...]` array in RESP2.
pub fn named_integers(ctx: &Context, pairs: &[(&CStr, i64)]) {
    let reply = Reply::to(ctx);
    if reply.resp3() {
        reply.map(pairs.len());
    } else {
        reply.array(2 * pairs.len());
    }
    for (name, value) in pairs {
        reply.simple(name);
        reply.integer(*value);
    }
}

/// Replies an array of bulk strings.
pub fn bulk_strings<T: AsRef<[u8]>>(ctx: &Context, items: &[T]) {
    let reply = Reply::to(ctx);
    reply.array(items.len());
    for item in items {
        reply.bulk(item.as_ref());
    }
}

/// Replies `+OK`.
pub fn ok(ctx: &Context) {
    Reply::to(ctx).simple(c"OK");
}

/// Replies a null.
pub fn null(ctx: &Context) {
    Reply::to(ctx).null();
}

/// Replies one integer.
pub fn integer(ctx: &Context, value: i64) {
    Reply::to(ctx).integer(value);
}

/// Replies RL.ACQUIRE: RESP2 `[acquired, max, free, id, ttl_ms, retry_after_ms]` (`id` a
/// bulk string, or null when no lease was taken); RESP3 a map with those names.
pub fn lease_acquired(ctx: &Context, acquired: &Acquired, id: Option<&[u8]>) {
    let reply = Reply::to(ctx);
    let named = reply.resp3();
    if named {
        reply.map(6);
    } else {
        reply.array(6);
    }
    let field = |name: &CStr| {
        if named {
            reply.simple(name);
        }
    };
    field(c"acquired");
    reply.integer(i64::from(acquired.acquired));
    field(c"max");
    reply.integer(acquired.max);
    field(c"free");
    reply.integer(acquired.free);
    field(c"id");
    match id {
        Some(id) if acquired.acquired => reply.bulk(id),
        _ => reply.null(),
    }
    field(c"ttl_ms");
    reply.integer(acquired.ttl_ms);
    field(c"retry_after_ms");
    reply.integer(acquired.retry_after_ms);
}

/// Replies RL.LEASES: RESP2 `[held, max, free, retry_after_ms, reset_after_ms]`; RESP3 a
/// map with those names.
pub fn leases_held(ctx: &Context, held: &Held) {
    let pairs = [
        (c"held", held.held),
        (c"max", held.max),
        (c"free", held.free),
        (c"retry_after_ms", held.retry_after_ms),
        (c"reset_after_ms", held.reset_after_ms),
    ];
    if Reply::to(ctx).resp3() {
        named_integers(ctx, &pairs);
    } else {
        integers(ctx, &pairs.map(|(_, value)| value));
    }
}
