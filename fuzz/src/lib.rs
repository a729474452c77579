//! The bodies of the fuzz targets, as plain functions of the input bytes. Each binary in
//! `fuzz_targets/` is one line calling one of them under libFuzzer; `tests/corpus_replay.rs`
//! calls the same functions over every file of `corpus/<target>/`, so that `make test`
//! keeps the targets compiling and replays what the fuzzer found without cargo-fuzz or
//! nightly flags. Every function panics exactly when it finds a bug: a panic of the code
//! under test, or a broken invariant (an `assert!` here).

pub mod args;
pub mod client_ip;
pub mod config;
pub mod descriptor;
pub mod key;
pub mod lease;
pub mod limiter;
pub mod path;
pub mod state;
pub mod words;

/// A target's body: panics on a bug, returns on anything else.
pub type Target = fn(&[u8]);

/// Every target: its name (the binary and the corpus directory) and its body.
pub const TARGETS: [(&str, Target); 9] = [
    ("args", args::fuzz),
    ("state", state::fuzz),
    ("limiter", limiter::fuzz),
    ("path", path::fuzz),
    ("client_ip", client_ip::fuzz),
    ("config", config::fuzz),
    ("key", key::fuzz),
    ("descriptor", descriptor::fuzz),
    ("lease", lease::fuzz),
];
