//! Server strings as three safe types: borrowed for a lifetime ([`ServerStr`]), owned and
//! freed on drop ([`ServerString`]), kept for as long as the module is loaded
//! ([`KeptString`]); and [`ReusedString`], one owned string kept and handed out again while
//! it is asked for with the same key.
//!
//! All of them are one pointer wide (`#[repr(transparent)]`), so that a slice of them is
//! the array of string pointers the server takes and gives.

use super::api::api;
use redis_module::raw::RedisModuleString;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicI64, AtomicPtr, Ordering};

/// A server string that stays alive (and unchanged) for `'a`: a command's argument, or a
/// borrow of one of the owned kinds below.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct ServerStr<'a> {
    ptr: *mut RedisModuleString,
    _lives: PhantomData<&'a RedisModuleString>,
}

impl<'a> ServerStr<'a> {
    /// Borrows `ptr` for `'a`.
    ///
    /// # Safety
    /// `ptr` must be a live server string that nothing frees or changes during `'a`.
    #[inline]
    pub(super) unsafe fn from_raw(ptr: *mut RedisModuleString) -> Self {
        ServerStr {
            ptr,
            _lives: PhantomData,
        }
    }

    /// The pointer, for a server call made during `'a`.
    #[inline]
    pub(super) fn as_ptr(self) -> *mut RedisModuleString {
        self.ptr
    }

    /// The string's bytes, borrowed for as long as the string lives.
    #[inline]
    pub fn bytes(self) -> &'a [u8] {
        let mut len = 0usize;
        // SAFETY: the string is live and unchanged during 'a (the type's invariant), so the
        // buffer StringPtrLen points to holds `len` bytes for all of 'a.
        unsafe {
            let ptr = api!(RedisModule_StringPtrLen)(self.ptr, &mut len);
            if ptr.is_null() {
                return &[];
            }
            std::slice::from_raw_parts(ptr.cast::<u8>(), len)
        }
    }
}

/// A server string the module made and owns (no auto memory); freed when dropped.
#[repr(transparent)]
pub struct ServerString(*mut RedisModuleString);

impl ServerString {
    /// A new server string holding a copy of `bytes`.
    #[inline]
    pub fn new(bytes: &[u8]) -> Self {
        // SAFETY: a NULL context makes a string that the caller owns and frees (Drop); the
        // bytes are copied during the call.
        ServerString(unsafe {
            api!(RedisModule_CreateString)(null_mut(), bytes.as_ptr().cast(), bytes.len())
        })
    }

    /// Borrows the string for as long as `self` lives.
    #[inline]
    pub fn as_str(&self) -> ServerStr<'_> {
        // SAFETY: `self` owns the string and frees it only on drop, after the borrow ends.
        unsafe { ServerStr::from_raw(self.0) }
    }

    /// Gives up ownership without freeing (the pointer is taken back by `from_owned_raw`).
    #[inline]
    fn into_raw(self) -> *mut RedisModuleString {
        ManuallyDrop::new(self).0
    }

    /// Takes ownership of a string given up by `into_raw`.
    ///
    /// # Safety
    /// `ptr` must come from `into_raw` and be taken back once.
    #[inline]
    unsafe fn from_owned_raw(ptr: *mut RedisModuleString) -> Self {
        ServerString(ptr)
    }
}

impl Drop for ServerString {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the string was made with a NULL context and is owned by self alone, so
        // this is its one release.
        unsafe { api!(RedisModule_FreeString)(null_mut(), self.0) };
    }
}

/// A server string made once (at load) and never freed while the module is loaded; shared
/// by every command that propagates it.
#[repr(transparent)]
pub struct KeptString(*mut RedisModuleString);

// SAFETY: the string is never freed, and only the server's main thread, which runs every
// command, hands it to the server (reference counts are not touched from other threads).
unsafe impl Send for KeptString {}
// SAFETY: as above; `&KeptString` only lends the pointer to server calls.
unsafe impl Sync for KeptString {}

impl KeptString {
    /// A new string holding `bytes`, kept until the module unloads.
    pub fn new(bytes: &[u8]) -> Self {
        KeptString(ServerString::new(bytes).into_raw())
    }

    /// Borrows the string: it lives as long as `self`.
    #[inline]
    pub fn as_str(&self) -> ServerStr<'_> {
        // SAFETY: a kept string is never freed or changed.
        unsafe { ServerStr::from_raw(self.0) }
    }
}

impl Default for ReusedString {
    fn default() -> Self {
        Self::new()
    }
}

/// One owned string kept between commands and reused while it is asked for with the same
/// key (an `i64`, e.g. the time it spells), else replaced.
pub struct ReusedString {
    key: AtomicI64,
    /// Owned by this value (a `ServerString` given up by `into_raw`), or NULL.
    string: AtomicPtr<RedisModuleString>,
}

impl ReusedString {
    /// Holds no string yet.
    pub const fn new() -> Self {
        ReusedString {
            key: AtomicI64::new(i64::MIN),
            string: AtomicPtr::new(null_mut()),
        }
    }

    /// Runs `use_it` with the string for `key`: the one held if it was made for `key`, else
    /// a new one from `make` (the one held is freed). The string is taken out while
    /// `use_it` runs, so nothing can free it meanwhile, and kept for the next call after.
    #[inline]
    pub fn with<R>(
        &self,
        key: i64,
        make: impl FnOnce() -> ServerString,
        use_it: impl FnOnce(ServerStr<'_>) -> R,
    ) -> R {
        let held = self.string.swap(null_mut(), Ordering::Relaxed);
        let string = if held.is_null() {
            make()
        } else {
            // SAFETY: a non-NULL pointer held here was given up by `into_raw` below, and
            // the swap took it out, so it is taken back once.
            let held = unsafe { ServerString::from_owned_raw(held) };
            if self.key.load(Ordering::Relaxed) == key {
                held
            } else {
                drop(held);
                make()
            }
        };
        let result = use_it(string.as_str());
        let left = self.string.swap(string.into_raw(), Ordering::Relaxed);
        self.key.store(key, Ordering::Relaxed);
        if !left.is_null() {
            // SAFETY: as above: given up by `into_raw` and taken out by this swap.
            drop(unsafe { ServerString::from_owned_raw(left) });
        }
        result
    }
}
