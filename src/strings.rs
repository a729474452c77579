//! Server strings the module makes once and reuses when it propagates effects.
//!
//! `RedisModule_Replicate` with the `s` format takes a reference to a string the module
//! already holds: a reference-count increment, where the `b`, `c` and `l` formats build a
//! new string object per argument on every call. So the constant `PXAT`, the small counts
//! a fixed window stores, and the latest expiry time (shared by every key whose window
//! ends at the same moment) are made once and kept.

use crate::server::string::{KeptString, ReusedString, ServerStr, ServerString};
use ratelimit_core::encoding::encode_count;
use std::sync::OnceLock;

/// Counts below this are propagated from the table made at load.
const TABLE_SIZE: usize = 1024;

/// The strings made at load, kept while the module is loaded.
struct Strings {
    pxat: KeptString,
    counts: Vec<KeptString>,
}

static STRINGS: OnceLock<Strings> = OnceLock::new();

/// The latest expiry string, keyed by its time; replaced when another time is needed.
static EXPIRY: ReusedString = ReusedString::new();

/// The strings, made on first use (at load: `init`).
fn strings() -> &'static Strings {
    STRINGS.get_or_init(|| Strings {
        pxat: KeptString::new(b"PXAT"),
        counts: (0..TABLE_SIZE)
            .map(|n| KeptString::new(n.to_string().as_bytes()))
            .collect(),
    })
}

/// Makes the strings; called once at load, so that no command pays for it.
pub fn init() {
    strings();
}

/// The string `PXAT`.
#[inline]
pub fn pxat() -> ServerStr<'static> {
    strings().pxat.as_str()
}

/// The decimal string of a small `count`, from the table, if there is one.
#[inline]
pub fn count(count: i64) -> Option<ServerStr<'static>> {
    let index = usize::try_from(count).ok()?;
    strings().counts.get(index).map(KeptString::as_str)
}

/// Runs `use_it` with the decimal string of `expires_at_ms`, reused while the same time
/// recurs (every key of a fixed window ends at the same moment).
#[inline]
pub fn with_expiry<R>(expires_at_ms: i64, use_it: impl FnOnce(ServerStr<'_>) -> R) -> R {
    EXPIRY.with(
        expires_at_ms,
        || ServerString::new(encode_count(expires_at_ms, &mut [0u8; 20])),
        use_it,
    )
}
