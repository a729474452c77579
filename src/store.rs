//! The only code that opens keys, reads and writes values, sets expiry and propagates.
//!
//! Writes go through the low-level key API (fast, no command dispatch), which neither
//! propagates nor keeps a key's TTL on `StringSet`. So every write here sets the absolute
//! expiry itself and propagates its effect as `SET key <state> PXAT <expiry>` (or `DEL
//! key`, or for a large value changed in a few bytes `SETRANGE` of them and `PEXPIREAT`):
//! replicas and AOF replay then store the same bytes and the same absolute expiry without
//! reading any clock, and can do so without the module loaded.

use crate::listeners;
use crate::server::context::{
    self, replicate1, replicate2, replicate3, replicate4, replicate_all, EventClass,
};
use crate::server::key::{Key, Mode};
use crate::server::string::{ServerStr, ServerString};
use crate::{metrics, strings};
use ratelimit_core::encoding::decode_count;
use ratelimit_core::limiter::Write;
use redis_module::Context;
use std::borrow::Cow;
use std::cell::Cell;

/// The smallest value a write may be propagated as a patch of ([`StoredKey::patch`]):
/// below it, `SET` of the whole value costs about what the patch's two commands do.
const PATCH_MIN_BYTES: usize = 1024;

/// Why the store could not do what it was asked; the command layer turns it into the
/// client's error reply.
///
/// [`Display`](std::fmt::Display) gives the reply's text without its error code, as the
/// core's errors do: the reply is `WRONGTYPE ` and the text for
/// [`StoreError::WrongType`] (the server's own wording for another type), `ERR ` and the
/// text for the others ([`StoreError::reply`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The key holds another Redis type than a string.
    WrongType,
    /// The server would not propagate `command` (renamed away?); nothing was written.
    NotPropagated(Cow<'static, str>),
}

impl StoreError {
    /// The error reply: its error code, a space and the [`Display`](std::fmt::Display)
    /// text.
    pub fn reply(&self) -> String {
        let code = match self {
            StoreError::WrongType => "WRONGTYPE",
            StoreError::NotPropagated(_) => "ERR",
        };
        format!("{code} {self}")
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::WrongType => {
                f.write_str("Operation against a key holding the wrong kind of value")
            }
            StoreError::NotPropagated(command) => write!(
                f,
                "cannot propagate {command} to replicas and the AOF (is {command} renamed?): \
                 nothing was written"
            ),
        }
    }
}

impl std::error::Error for StoreError {}

/// How a command uses its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only reads (RL.PEEK): works on replicas and never changes the key.
    Read,
    /// May write.
    Write,
}

/// A key opened for the duration of one command.
pub struct StoredKey<'a> {
    ctx: &'a Context,
    name: ServerStr<'a>,
    key: Key<'a>,
    /// The key's absolute expiry once read (`Some(None)`: it has none).
    expiry: Cell<Option<Option<i64>>>,
    /// Rewrite in place only at the same length (see [`StoredKey::exact_size`]).
    exact: bool,
}

impl<'a> StoredKey<'a> {
    /// Opens the key `name` (an argument of the running command). A logically expired key
    /// reads as empty on a primary; on a replica it may still be there, and the core reads
    /// its absolute times as ended.
    #[inline]
    pub fn open(ctx: &'a Context, name: ServerStr<'a>, access: Access) -> Self {
        let mode = match access {
            Access::Read => Mode::Read,
            Access::Write => Mode::Write,
        };
        StoredKey {
            ctx,
            name,
            key: Key::open(ctx, name, mode),
            expiry: Cell::new(None),
            exact: false,
        }
    }

    /// Values of this key are written at their exact size: a value of another length gets
    /// a new string rather than an in-place rewrite, which would grow the old one greedily
    /// (up to twice its length). For lease values, which change length on every acquire
    /// and release and whose memory per lease is a stated bound.
    #[inline]
    pub fn exact_size(mut self) -> Self {
        self.exact = true;
        self
    }

    /// The key's string value; `None` for no key; `WRONGTYPE` for another type. The bytes
    /// are valid until the key is written, which `apply` taking `&mut self` enforces.
    #[inline]
    pub fn value(&self) -> Result<Option<&[u8]>, StoreError> {
        self.key.value().map_err(|_| StoreError::WrongType)
    }

    /// The key's absolute expiry in ms, `None` when it has none (or there is no key). Read
    /// from the server once per command.
    #[inline]
    pub fn expiry(&self) -> Option<i64> {
        if let Some(known) = self.expiry.get() {
            return known;
        }
        let expiry = self.key.expiry();
        if self.key.is_open() {
            self.expiry.set(Some(expiry));
        }
        expiry
    }

    /// Makes the change the limiter decided, and propagates it. `Nothing` writes and
    /// propagates nothing.
    ///
    /// The effect is handed to the server for propagation first, and the key is written
    /// only if that worked: the server sends what a command propagated once the command
    /// returns, so the order inside the command does not matter to replicas and the AOF,
    /// and a change that could not be propagated (the command it is spelt with renamed
    /// away) is not made here either.
    pub fn apply(&mut self, write: &Write) -> Result<(), StoreError> {
        if !self.key.is_open() {
            return Ok(());
        }
        let propagate = listeners::someone_listens(self.ctx);
        match write {
            Write::Nothing => return Ok(()),
            Write::Set {
                value,
                expires_at_ms,
            } => {
                let fresh = self.key.is_empty();
                if let Some((offset, bytes)) = self.patch(value).filter(|_| propagate) {
                    self.propagate_patch(offset, bytes, *expires_at_ms)?;
                    self.write_value(value, *expires_at_ms, None);
                } else if propagate {
                    let string = if fresh {
                        ValueString::Made(ServerString::new(value))
                    } else {
                        ValueString::for_value(value)
                    };
                    self.propagate_set(string.as_str(), *expires_at_ms)?;
                    self.write_value(value, *expires_at_ms, fresh.then(|| string.as_str()));
                } else {
                    self.count_unpropagated()?;
                    let made = fresh.then(|| ServerString::new(value));
                    self.write_value(value, *expires_at_ms, made.as_ref().map(|s| s.as_str()));
                }
            }
            Write::Delete => {
                if propagate {
                    self.propagate_del()?;
                } else {
                    self.count_unpropagated()?;
                }
                self.key.delete();
            }
        }
        context::signal_modified(self.ctx, self.name);
        Ok(())
    }

    /// Counts a write that nothing can receive (see `listeners`) as a change, unpropagated.
    fn count_unpropagated(&self) -> Result<(), StoreError> {
        replicated(
            context::count_change_unpropagated(self.ctx),
            Cow::Borrowed("SET"),
        )?;
        metrics::record_unpropagated_write();
        Ok(())
    }

    /// Stores `value` with its absolute expiry. A new key takes `new_key` (a string made
    /// for it); a live key is rewritten in place: no new object, and its expiry is only
    /// touched when it moves (never for a fixed window's next hit), or when it has none
    /// (after `PERSIST`), which this sets again.
    fn write_value(&mut self, value: &[u8], expires_at_ms: i64, new_key: Option<ServerStr>) {
        let same_length = || {
            let old = self.key.value().ok().flatten();
            old.map(<[u8]>::len) == Some(value.len())
        };
        if let Some(string) = new_key {
            self.create_value(string, expires_at_ms);
        } else if (!self.exact || same_length()) && self.key.overwrite(value) {
            if self.expiry() != Some(expires_at_ms) {
                self.key.set_expiry(expires_at_ms);
            }
        } else {
            let made = ServerString::new(value);
            self.create_value(made.as_str(), expires_at_ms);
        }
    }

    /// Sets the key to `string` (the server takes its own reference) with its absolute
    /// expiry.
    fn create_value(&mut self, string: ServerStr, expires_at_ms: i64) {
        self.key.set(string);
        self.key.set_expiry(expires_at_ms);
    }

    /// When `value` replaces a value of its length of at least [`PATCH_MIN_BYTES`] in a run
    /// of at most a quarter of it (a lease renewed among thousands), that run: its offset
    /// and bytes. Such a write is propagated as `SETRANGE` of the run (and `PEXPIREAT` when
    /// the expiry moves) instead of the whole value in a `SET`: a replica or an AOF replay,
    /// which holds the primary's bytes, ends with the same bytes and expiry either way.
    fn patch<'v>(&self, value: &'v [u8]) -> Option<(usize, &'v [u8])> {
        if value.len() < PATCH_MIN_BYTES || !crate::propagation::patches_available() {
            return None;
        }
        let old = self.key.value().ok().flatten()?;
        if old.len() != value.len() {
            return None;
        }
        let differs = |(a, b): (&u8, &u8)| a != b;
        let first = old.iter().zip(value).position(differs).unwrap_or(0);
        let last = old
            .iter()
            .zip(value)
            .rposition(differs)
            .map_or(first, |last| last + 1);
        let run = value.get(first..last)?;
        (run.len() <= value.len() / 4).then_some((first, run))
    }

    /// Propagates `SETRANGE key offset bytes` (when `bytes` is not empty), then `PEXPIREAT
    /// key expires_at_ms` when the key's expiry moves (or it has none); two calls of one
    /// command, which the server sends as one transaction.
    fn propagate_patch(
        &self,
        offset: usize,
        bytes: &[u8],
        expires_at_ms: i64,
    ) -> Result<(), StoreError> {
        let moves = self.expiry() != Some(expires_at_ms);
        if !bytes.is_empty() || !moves {
            let offset = ServerString::new(offset.to_string().as_bytes());
            let run = ServerString::new(bytes);
            let accepted = replicate3(
                self.ctx,
                c"SETRANGE",
                [self.name, offset.as_str(), run.as_str()],
            );
            replicated(accepted, Cow::Borrowed("SETRANGE"))?;
        }
        if moves {
            let accepted = strings::with_expiry(expires_at_ms, |expiry| {
                replicate2(self.ctx, c"PEXPIREAT", [self.name, expiry])
            });
            replicated(accepted, Cow::Borrowed("PEXPIREAT"))?;
        }
        Ok(())
    }

    /// Propagates `SET key value PXAT expires_at_ms`.
    fn propagate_set(&self, value: ServerStr, expires_at_ms: i64) -> Result<(), StoreError> {
        let accepted = strings::with_expiry(expires_at_ms, |expiry| {
            replicate4(
                self.ctx,
                c"SET",
                [self.name, value, strings::pxat(), expiry],
            )
        });
        replicated(accepted, Cow::Borrowed("SET"))
    }

    /// Propagates `DEL key`.
    fn propagate_del(&self) -> Result<(), StoreError> {
        replicated(
            replicate1(self.ctx, c"DEL", self.name),
            Cow::Borrowed("DEL"),
        )
    }
}

/// The server string of a value to propagate (and, for a new key, to store).
enum ValueString {
    /// Made for this write; freed after it.
    Made(ServerString),
    /// A small count from the table made at load; kept.
    Shared(ServerStr<'static>),
}

impl ValueString {
    #[inline]
    fn for_value(value: &[u8]) -> Self {
        match decode_count(value).and_then(strings::count) {
            Some(shared) => ValueString::Shared(shared),
            None => ValueString::Made(ServerString::new(value)),
        }
    }

    #[inline]
    fn as_str(&self) -> ServerStr<'_> {
        match self {
            ValueString::Made(s) => s.as_str(),
            ValueString::Shared(s) => *s,
        }
    }
}

/// The error for an effect the server would not propagate.
fn replicated(accepted: bool, command: Cow<'static, str>) -> Result<(), StoreError> {
    if accepted {
        return Ok(());
    }
    metrics::record_propagation_failure();
    Err(StoreError::NotPropagated(command))
}

/// Propagates `command args...`: for a command whose effect is deterministic (RL.POLICY,
/// which reads no clock), given in a form that means the same on every server, replaying
/// the command is replaying its effect.
pub fn propagate_command(
    ctx: &Context,
    command: &std::ffi::CStr,
    args: &[&[u8]],
) -> Result<(), StoreError> {
    let strings: Vec<ServerString> = args.iter().map(|a| ServerString::new(a)).collect();
    let accepted = replicate_all(ctx, command, &strings);
    drop(strings);
    replicated(accepted, Cow::Owned(command.to_string_lossy().into_owned()))
}

/// Fires the keyspace event `rl.denied` (class generic) on `key`, for watching abuse with
/// `SUBSCRIBE __keyevent@<db>__:rl.denied`.
pub fn notify_denied(ctx: &Context, key: ServerStr<'_>) {
    context::notify_keyspace_event(ctx, EventClass::Generic, c"rl.denied", key);
}
