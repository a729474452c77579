//! Rewrites the generated tables of the configuration reference
//! (`docs/src/gateway/configuration.md`, and the rule table of `rules.md`) from the
//! configuration schema, the structs of `gateway/src/config/schema.rs`:
//!
//! ```text
//! cargo run -p rl-gateway --example config_reference
//! ```
//!
//! The prose around the tables is left as it is. The unit test
//! `config::reference::tests::the_reference_pages_are_the_generated_ones` fails while a
//! committed page differs from what this writes.
use rl_gateway::config::reference;
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match reference::rewrite(&workspace) {
        Ok(written) if written.is_empty() => {
            println!("config_reference: the pages are up to date");
            ExitCode::SUCCESS
        }
        Ok(written) => {
            for path in written {
                let shown = path.strip_prefix(&workspace).unwrap_or(&path);
                println!("config_reference: rewrote {}", shown.display());
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("config_reference: {error}");
            ExitCode::FAILURE
        }
    }
}
