//! Puts the git commit the gateway is built from into `RL_GATEWAY_COMMIT`, for
//! `rl-gateway --version`: a version number alone does not tell two builds of one release
//! apart. Outside a git checkout (a source tarball) it is "unknown".

use std::process::Command;

/// `git <args>` run in this package's directory: its trimmed output, if it succeeded.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short", "HEAD"]);
    // Built again when HEAD moves (a checkout) or its branch gets a commit, and only then:
    // without these lines any file of the package changing would run this again.
    if commit.is_some() {
        let branch = git(&["symbolic-ref", "-q", "HEAD"]);
        let names = ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref());
        for name in names {
            // A path that does not exist would have Cargo run this on every build.
            let path = git(&["rev-parse", "--git-path", name]);
            if let Some(path) = path.filter(|p| std::path::Path::new(p).exists()) {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    let commit = commit.unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=RL_GATEWAY_COMMIT={commit}");
}
