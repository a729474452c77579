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

#[test]
fn every_corpus_file_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (name, target) in ratelimit_fuzz::TARGETS {
        let files = files_of(&root.join(name));
        assert!(!files.is_empty(), "no corpus for {name}");
        for file in &files {
            let data = std::fs::read(file).expect("a readable corpus file");
            // A panic names the file: that is the input to look at.
            eprintln!("{name}: {}", file.display());
            target(&data);
        }
        println!("{name}: {} files replayed", files.len());
    }
}
