//! Replays every committed corpus file through its target's function (`make test` runs
//! this), so that what the fuzzer found stays a regression test and the targets keep
//! compiling, without cargo-fuzz, libFuzzer or nightly flags.

use std::path::{Path, PathBuf};

/// The files of `dir`, sorted; none if it does not exist.
fn files_of(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    files
}

/// Runs every file of `<root>/<target>/` through its target; returns how many.
fn replay(root: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(root);
    let mut total = 0;
    for (name, target) in ratelimit_fuzz::TARGETS {
        let files = files_of(&root.join(name));
        for file in &files {
            let data = std::fs::read(file).expect("a readable corpus file");
            // A panic names the file: that is the input to look at.
            eprintln!("{name}: {}", file.display());
            target(&data);
        }
        println!("{name}: {} files replayed", files.len());
        total += files.len();
    }
    total
}

#[test]
fn every_corpus_file_passes_its_target() {
    for (name, _) in ratelimit_fuzz::TARGETS {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .join(name);
        assert!(
            !files_of(&dir).is_empty(),
            "{} has no corpus",
            dir.display()
        );
    }
    replay("corpus");
}

/// Crashes the fuzzer found in code outside the core, not fixed yet on this branch (see
/// the README, Fuzzing): run with `--ignored` once the fix is in, then move the files into
/// `corpus/<target>/`, where they stay regressions.
#[test]
#[ignore]
fn known_crashes_pass_their_target_once_fixed() {
    assert!(replay("known-crashes") > 0);
}
