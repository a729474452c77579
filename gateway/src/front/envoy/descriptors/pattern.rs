//! A descriptor value with `*` in it: each `*` matches any run of characters (none
//! included), the text before the first `*` is a prefix of the value and the text after
//! the last one a suffix, as in envoyproxy/ratelimit.
//!
//! One difference: envoyproxy/ratelimit matches the pattern against `key_value` (the
//! entry's key, `_` and its value), so that a pattern can run across the `_` into another
//! key (`value: "*"` under key `a` there also matches key `a_b`'s entries, when both keys
//! are at one level). Here a pattern is matched against the value alone, within the key
//! of its node.

/// A value pattern, split on its `*`s when the file is loaded, so that matching a request
/// allocates nothing.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    /// As written, `*`s included: what stands for the value in a shared key and in the
    /// metric names.
    text: String,
    /// The text before the first `*`.
    first: String,
    /// The texts between two `*`s, in order (empty for `**`).
    middle: Vec<String>,
    /// The text after the last `*`.
    last: String,
    /// The bytes a matching value has at least: every literal part's.
    min_len: usize,
}

impl Pattern {
    /// The pattern of `text`; `None` when it has no `*` (an exact value).
    pub(crate) fn new(text: &str) -> Option<Pattern> {
        let mut parts = text.split('*');
        let first = parts.next()?.to_owned();
        let mut rest: Vec<String> = parts.map(str::to_owned).collect();
        let last = rest.pop()?;
        let min_len = first.len() + last.len() + rest.iter().map(String::len).sum::<usize>();
        Some(Pattern {
            text: text.to_owned(),
            first,
            middle: rest,
            last,
            min_len,
        })
    }

    /// The pattern as written.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Whether `value` matches: it starts with the first part and ends with the last one
    /// (the two not overlapping), and holds the middle parts in order between them. Taking
    /// each middle part where it first occurs is enough: an earlier match leaves at least
    /// as much room for the parts after it.
    pub(crate) fn matches(&self, value: &str) -> bool {
        if value.len() < self.min_len {
            return false;
        }
        let Some(rest) = value.strip_prefix(self.first.as_str()) else {
            return false;
        };
        let Some(mut rest) = rest.strip_suffix(self.last.as_str()) else {
            return false;
        };
        for part in &self.middle {
            match rest.find(part.as_str()) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::Pattern;

    /// The definition, by backtracking over bytes: `*` takes none, or one more byte.
    fn naive(pattern: &[u8], value: &[u8]) -> bool {
        match pattern.split_first() {
            None => value.is_empty(),
            Some((b'*', rest)) => {
                naive(rest, value) || (!value.is_empty() && naive(pattern, &value[1..]))
            }
            Some((c, rest)) => value.first() == Some(c) && naive(rest, &value[1..]),
        }
    }

    /// Every string of up to `max` characters over `alphabet`.
    fn all(alphabet: &[char], max: usize) -> Vec<String> {
        let mut out = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..max {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            out.extend(last.iter().cloned());
        }
        out
    }

    #[test]
    fn the_peers_cases() {
        let cases = [
            ("foo*", "foo1", true),
            ("foo*", "foo", true),
            ("foo*", "bar", false),
            ("bar*b", "barab", true),
            ("bar*b", "bar123b", true),
            ("bar*b", "barb", true),
            ("bar*b", "bara", false),
            ("bar*b", "xbarb", false),
            ("foo*bar*baz", "foo123bar456baz", true),
            ("foo*bar*baz", "foobarbaz", true),
            ("foo*bar*baz", "foo123baz", false),
            ("foo*bar*baz", "bar456baz", false),
            ("/api/*/action", "/api/v1/action", true),
            ("/api/*/action", "/api//action", true),
            ("/api/*/action", "/api/action", false),
            ("ab*ba", "aba", false),
            ("ab*ba", "abba", true),
            ("*", "", true),
            ("**", "x", true),
            ("a*a*a", "aaa", true),
            ("a*a*a", "aa", false),
            ("é*ü", "éxü", true),
        ];
        for (pattern, value, expected) in cases {
            let compiled = Pattern::new(pattern).unwrap();
            assert_eq!(compiled.matches(value), expected, "{pattern} ~ {value}");
            assert_eq!(naive(pattern.as_bytes(), value.as_bytes()), expected);
        }
        assert!(Pattern::new("exact").is_none());
        assert_eq!(Pattern::new("a*b").unwrap().text(), "a*b");
    }

    /// Every pattern of up to 6 characters over `a`, `b` and `*` against every value of up
    /// to 7 over `a` and `b`: the same answer as the definition.
    #[test]
    fn agrees_with_the_definition_on_every_small_case() {
        let values = all(&['a', 'b'], 7);
        let mut compared = 0;
        for pattern in all(&['a', 'b', '*'], 6) {
            let Some(compiled) = Pattern::new(&pattern) else {
                continue;
            };
            for value in &values {
                assert_eq!(
                    compiled.matches(value),
                    naive(pattern.as_bytes(), value.as_bytes()),
                    "{pattern} ~ {value}"
                );
                compared += 1;
            }
        }
        assert!(compared > 100_000, "{compared}");
    }
}
