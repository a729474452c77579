//! The one key builder: every Redis key a request charges, for an HTTP rule and for an
//! Envoy descriptor, is written here, with the same escaping and the same hash for what
//! is too long. The two fronts keep the two key formats they have always had (budgets in
//! Redis must not reset on upgrade), chosen by one parameter, [`Alphabet`]:
//!
//! - HTTP rules (`<prefix>{<subject>}:<rule>[:lease][:<METHOD> <path>]`): bytes outside
//!   the printable ASCII, `%` and braces are percent-encoded, and each part a client
//!   chooses is bounded on its own, hashed from its raw bytes ([`KeyBuilder::part`]).
//! - Envoy descriptors (`<prefix>{<k>=<v>}:<domain>:<k1>=<v1>:...`): everything but
//!   letters, digits and `._-/@+*` is percent-encoded, so `:` and `=` in a value cannot
//!   pass for the key's own punctuation, and the tag and the rest are each bounded as a
//!   whole, hashed from what was written ([`KeyBuilder::group`]).

use super::{budget_method, KeySource, RequestFacts, Rule};
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// The longest key a request can make (in Redis and in the deny cache), given
/// [`MAX_KEY_PREFIX_BYTES`] and [`MAX_RULE_NAME_BYTES`], which the configuration enforces.
pub const MAX_KEY_BYTES: usize = 256;
/// The longest `[redis] key_prefix`.
pub const MAX_KEY_PREFIX_BYTES: usize = 32;
/// The longest rule name.
pub const MAX_RULE_NAME_BYTES: usize = 48;

/// The longest header value, path segment or path written out in a key; a longer one is
/// written as its hash, so that a client cannot make keys as large as a request's head.
const MAX_KEY_PART: usize = 64;
/// The longest method written out (a method is at most 32 bytes, but a key must stay
/// bounded whatever it is handed).
const MAX_KEY_METHOD: usize = 33;
/// What follows the rule's name in a lease key.
const LEASE_KEY_MARK: &str = ":lease";
/// `{`, `seg:` (the longest tag), `}:`, `:lease`, `:` and ` `.
const KEY_PUNCTUATION: usize = 1 + 4 + 2 + LEASE_KEY_MARK.len() + 1 + 1;
const _: () = assert!(
    MAX_KEY_PREFIX_BYTES
        + MAX_RULE_NAME_BYTES
        + KEY_PUNCTUATION
        + 2 * MAX_KEY_PART
        + MAX_KEY_METHOD
        <= MAX_KEY_BYTES
);
/// `#` and 32 hex digits.
const HASHED_PART: usize = 33;
const _: () = assert!(HASHED_PART <= MAX_KEY_METHOD && HASHED_PART <= MAX_KEY_PART);

/// The longest descriptor hash tag written out: `key=value` escaped; longer, its hash.
const MAX_TAG: usize = 64;
/// The longest rest of a descriptor key written out (domain, entries, override); longer,
/// its hash.
const MAX_REST: usize = 150;
const _: () = assert!(MAX_KEY_PREFIX_BYTES + 1 + MAX_TAG + 2 + MAX_REST <= MAX_KEY_BYTES);

/// Which bytes a key writes as they are; every other byte is percent-encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alphabet {
    /// HTTP rules: printable ASCII but `%`, `{` and `}` (which would move the hash tag).
    Printable,
    /// Envoy descriptors: letters, digits and `._-/@+*`.
    Narrow,
}

impl Alphabet {
    fn keeps(self, b: u8) -> bool {
        match self {
            Alphabet::Printable => b.is_ascii_graphic() && !matches!(b, b'%' | b'{' | b'}'),
            Alphabet::Narrow => {
                b.is_ascii_alphanumeric()
                    || matches!(b, b'.' | b'_' | b'-' | b'/' | b'@' | b'+' | b'*')
            }
        }
    }
}

/// A key being written: punctuation as it is, what a client chose escaped in one
/// [`Alphabet`], and what would be too long as `#` and the hex of the first 16 bytes of
/// a SHA-256 (the same on every gateway, so they all charge the same budget).
pub(crate) struct KeyBuilder {
    key: String,
    alphabet: Alphabet,
}

impl KeyBuilder {
    /// A key starting with `prefix` (the configuration's, written as it is).
    pub(crate) fn new(prefix: &str, alphabet: Alphabet, capacity: usize) -> Self {
        let mut key = String::with_capacity(prefix.len() + capacity);
        key.push_str(prefix);
        KeyBuilder { key, alphabet }
    }

    /// Punctuation or a name the configuration checked, as it is.
    pub(crate) fn raw(&mut self, text: &str) -> &mut Self {
        self.key.push_str(text);
        self
    }

    /// An IP address the gateway found, as it is shown.
    pub(crate) fn ip(&mut self, ip: std::net::IpAddr) -> &mut Self {
        crate::rules::client_ip::push_ip(&mut self.key, ip);
        self
    }

    /// `bytes` escaped, whole.
    pub(crate) fn escaped(&mut self, bytes: &[u8]) -> &mut Self {
        self.escape_until(bytes, usize::MAX);
        self
    }

    /// `bytes` escaped, or the hash of `bytes` when escaped they would be longer than
    /// `limit` (the escaping stops there, so a huge value costs no huge string).
    pub(crate) fn part(&mut self, bytes: &[u8], limit: usize) -> &mut Self {
        let start = self.key.len();
        self.escape_until(bytes, limit);
        if self.key.len() - start > limit {
            self.key.truncate(start);
            self.hash(bytes);
        }
        self
    }

    /// What `write` adds, or the hash of what it wrote when that is longer than `limit`.
    pub(crate) fn group(&mut self, limit: usize, write: impl FnOnce(&mut Self)) -> &mut Self {
        let start = self.key.len();
        write(self);
        if self.key.len() - start > limit {
            let written = self.key.split_off(start);
            self.hash(written.as_bytes());
        }
        self
    }

    /// The key.
    pub(crate) fn finish(self) -> String {
        self.key
    }

    fn escape_until(&mut self, bytes: &[u8], limit: usize) {
        let start = self.key.len();
        for &b in bytes {
            if self.key.len() - start > limit {
                return;
            }
            if self.alphabet.keeps(b) {
                self.key.push(char::from(b));
            } else {
                let _ = write!(self.key, "%{b:02X}");
            }
        }
    }

    fn hash(&mut self, bytes: &[u8]) {
        self.key.push('#');
        for b in &Sha256::digest(bytes)[..16] {
            let _ = write!(self.key, "{b:02x}");
        }
    }
}

impl Rule {
    /// The Redis key of the budget `request` spends: `<prefix>{<subject>}:<rule>`, then
    /// `:<METHOD> <path>` when the rule counts per endpoint. The subject is the hash tag, so
    /// in Redis Cluster all of a client's keys are on one slot. Every part a client
    /// chooses is bounded, so that with the prefix and name the file may have the key is
    /// at most [`MAX_KEY_BYTES`] long; the path is named without its trailing `/`, which
    /// matching ignores too.
    ///
    /// A rule with `concurrency` keeps its leases in another key family:
    /// `<prefix>{<subject>}:<rule>:lease`, then `:<METHOD> <path>` per endpoint. The subject,
    /// and so the Cluster slot, stays the same; the key cannot be any rule's `RL.HIT` key,
    /// since after the rule's name those have the end or `:<METHOD> ` with a space, and no
    /// method has a `:`. A rule changed to or from `concurrency` does not meet its old key
    /// (of another type) on the next request.
    pub fn key(&self, prefix: &str, request: &RequestFacts<'_>) -> String {
        let mut key = KeyBuilder::new(prefix, Alphabet::Printable, 48);
        key.raw("{");
        let subject = match &self.key {
            KeySource::ClientIp => None,
            KeySource::Global => Some(("global", &b""[..])),
            // Any spelling with `_` for `-` too, which a CGI-style upstream reads as this
            // header (only present under `headers_with_underscores_action = "allow"`).
            KeySource::Header(name) => crate::rules::header_names::get(request.headers, name)
                .map(|value| ("h:", value.as_bytes())),
            KeySource::Segment(n) => request
                .path
                .split('/')
                .filter(|s| !s.is_empty())
                .nth(n - 1)
                .map(|segment| ("seg:", segment.as_bytes())),
        };
        match subject {
            Some((tag, value)) => key.raw(tag).part(value, MAX_KEY_PART),
            None => key.raw("ip:").ip(request.client_ip),
        };
        key.raw("}:").raw(&self.name);
        if self.concurrency.is_some() {
            key.raw(LEASE_KEY_MARK);
        }
        if self.per_endpoint {
            let method = budget_method(request.method).as_bytes();
            key.raw(":").part(method, MAX_KEY_METHOD).raw(" ");
            let path = request.path;
            let path = path
                .strip_suffix('/')
                .filter(|p| !p.is_empty())
                .unwrap_or(path);
            key.part(path.as_bytes(), MAX_KEY_PART);
        }
        key.finish()
    }
}

/// The Redis key of one Envoy request descriptor: `<prefix>{<tag>}:<domain>:<k1>=<v1>:...`;
/// with `own_limit` (`requests_per_unit` and the unit's name), the key of the descriptor's
/// own limit under `tighten`: the same and `:limit=<n>/<unit>`. The tag is the `key=value`
/// of the entry named `subject` (the first entry when none is named or the request lacks
/// it), so that descriptors sharing that entry share a Cluster slot. A tag over 64 bytes
/// or a rest over 150 is written as its hash: no key is over [`MAX_KEY_BYTES`].
pub(crate) fn descriptor_key<'e>(
    prefix: &str,
    domain: &str,
    subject: Option<&str>,
    entries: impl Iterator<Item = (&'e str, &'e str)> + Clone,
    own_limit: Option<(u32, &str)>,
) -> String {
    let mut key = KeyBuilder::new(prefix, Alphabet::Narrow, 96);
    let tagged = subject
        .and_then(|s| entries.clone().find(|(k, _)| *k == s))
        .or_else(|| entries.clone().next());
    key.raw("{").group(MAX_TAG, |key| {
        if let Some((k, v)) = tagged {
            key.escaped(k.as_bytes()).raw("=").escaped(v.as_bytes());
        }
    });
    key.raw("}:").group(MAX_REST, |key| {
        key.escaped(domain.as_bytes());
        for (k, v) in entries {
            key.raw(":")
                .escaped(k.as_bytes())
                .raw("=")
                .escaped(v.as_bytes());
        }
        if let Some((n, unit)) = own_limit {
            key.raw(&format!(":limit={n}/{unit}"));
        }
    });
    key.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two alphabets, written out: what each front has always escaped.
    #[test]
    fn each_front_keeps_its_alphabet() {
        let bytes = b"a:b={c}%d e/@+*";
        let mut http = KeyBuilder::new("", Alphabet::Printable, 0);
        http.escaped(bytes);
        assert_eq!(http.finish(), "a:b=%7Bc%7D%25d%20e/@+*");
        let mut envoy = KeyBuilder::new("", Alphabet::Narrow, 0);
        envoy.escaped(bytes);
        assert_eq!(envoy.finish(), "a%3Ab%3D%7Bc%7D%25d%20e/@+*");
    }

    /// A part is hashed from its raw bytes, a group from what it wrote: the two formats
    /// of today, byte for byte.
    #[test]
    fn parts_hash_their_bytes_and_groups_their_text() {
        let long = "x:".repeat(40);
        let digest = |bytes: &[u8]| {
            let mut out = String::from("#");
            for b in &Sha256::digest(bytes)[..16] {
                let _ = write!(out, "{b:02x}");
            }
            out
        };
        let mut part = KeyBuilder::new("p", Alphabet::Printable, 0);
        part.part(long.as_bytes(), MAX_KEY_PART);
        assert_eq!(part.finish(), format!("p{}", digest(long.as_bytes())));
        let mut group = KeyBuilder::new("p", Alphabet::Narrow, 0);
        group.group(MAX_TAG, |k| {
            k.escaped(long.as_bytes());
        });
        let written = "x%3A".repeat(40);
        assert_eq!(group.finish(), format!("p{}", digest(written.as_bytes())));
    }
}
