//! Turning fuzz input into command arguments.

/// The input split at spaces into arguments, as a client would send them (empty ones
/// included: `"a  b"` is `a`, ``, `b`). Spaces make seed files readable: `5 1m COST 2`.
pub fn split_words(data: &[u8]) -> Vec<&[u8]> {
    if data.is_empty() {
        return Vec::new();
    }
    data.split(|&b| b == b' ').collect()
}
