//! Server strings the module makes once and reuses when it propagates effects.
//!
//! `RedisModule_Replicate` with the `s` format takes a reference to a string the module
//! already holds: a reference-count increment, where the `b`, `c` and `l` formats build a
//! new string object per argument on every call. So the constant `PXAT`, the small counts
//! a fixed window stores, and the latest expiry time (shared by every key whose window
//! ends at the same moment) are made once and kept.

use crate::ffi::api;
use ratelimit_core::encoding::encode_count;
use redis_module::raw::RedisModuleString;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicI64, AtomicPtr, Ordering};
use std::sync::OnceLock;

/// Counts below this are propagated from the table made at load.
const TABLE_SIZE: usize = 1024;

/// The strings made at load. Only the server's main thread, which runs every command,
/// touches them.
struct Strings {
    pxat: Owned,
    counts: Vec<Owned>,
}

/// A server string this module owns a reference to.
struct Owned(*mut RedisModuleString);

// SAFETY: the pointers are only dereferenced by the server on its main thread, inside
// command callbacks; the module never frees them while it is loaded.
unsafe impl Send for Owned {}
// SAFETY: as above.
unsafe impl Sync for Owned {}

static STRINGS: OnceLock<Strings> = OnceLock::new();

/// The latest expiry string and its time; replaced when another time is needed.
static EXPIRY_MS: AtomicI64 = AtomicI64::new(i64::MIN);
static EXPIRY: AtomicPtr<RedisModuleString> = AtomicPtr::new(null_mut());

/// A new server string holding `bytes`, owned by the caller (no auto memory).
pub fn create(bytes: &[u8]) -> *mut RedisModuleString {
    // SAFETY: a NULL context makes a string the caller frees; the bytes are copied.
    unsafe { api!(RedisModule_CreateString)(null_mut(), bytes.as_ptr().cast(), bytes.len()) }
}

/// Releases a string from [`create`].
pub fn free(string: *mut RedisModuleString) {
    // SAFETY: `string` came from `create` and is released exactly once.
    unsafe { api!(RedisModule_FreeString)(null_mut(), string) };
}

/// The strings, made on first use (at load: `init`).
fn strings() -> &'static Strings {
    STRINGS.get_or_init(|| Strings {
        pxat: Owned(create(b"PXAT")),
        counts: (0..TABLE_SIZE)
            .map(|n| Owned(create(n.to_string().as_bytes())))
            .collect(),
    })
}

/// Makes the strings; called once at load, so that no command pays for it.
pub fn init() {
    strings();
}

/// The string `PXAT`.
pub fn pxat() -> *mut RedisModuleString {
    strings().pxat.0
}

/// The decimal string of a small `count`, from the table, if there is one.
pub fn count(count: i64) -> Option<*mut RedisModuleString> {
    let index = usize::try_from(count).ok()?;
    strings().counts.get(index).map(|s| s.0)
}

/// The decimal string of `expires_at_ms`, reused while the same time recurs (every key
/// of a fixed window ends at the same moment). The string stays valid until the next call
/// asks for another time; `Replicate` takes its own reference before that.
pub fn expiry(expires_at_ms: i64) -> *mut RedisModuleString {
    let cached = EXPIRY.load(Ordering::Relaxed);
    if !cached.is_null() && EXPIRY_MS.load(Ordering::Relaxed) == expires_at_ms {
        return cached;
    }
    let fresh = create(encode_count(expires_at_ms, &mut [0u8; 20]));
    let old = EXPIRY.swap(fresh, Ordering::Relaxed);
    EXPIRY_MS.store(expires_at_ms, Ordering::Relaxed);
    if !old.is_null() {
        free(old);
    }
    fresh
}
