//! The README's and the book's gateway configurations, checked as a reader would check
//! them: every ```` ```toml ```` block and every ```` ```yaml ```` Envoy descriptor file goes
//! through `rl-gateway --check-config`, and a block that says it is taken from a file
//! (`from=FILE`) holds exactly that file's tables (or, in another language, is that file).
//! CONTRIBUTING.md ("Every example is run") is the convention read here.
use std::path::Path;
use std::process::Command;
use testkit::doc_blocks::{blocks, pages, Block};
use testkit::gateway::*;

/// What a fragment (a block without `[server]`) is checked after: a proxy and a Redis.
const FRAGMENT_PREFIX: &str = "[server]\nlisten = \"127.0.0.1:8080\"\n\
    upstream = \"http://127.0.0.1:9000\"\n\n[redis]\nurl = \"redis://127.0.0.1:6379\"\n\n";

#[test]
fn every_documented_configuration_passes_check_config() {
    let mut checked = 0;
    let mut refused = Vec::new();
    for page in pages() {
        let page_blocks = blocks(&page);
        let descriptors: Vec<&Block> = page_blocks
            .iter()
            .filter(|block| block.language() == "yaml" && !block.norun())
            .collect();
        for block in page_blocks.iter().filter(|block| !block.norun()) {
            let problem = match block.language() {
                "toml" => check_toml(block, &descriptors),
                "yaml" => check_descriptors(block),
                _ if block.attribute("from").is_some() => copy_differs(block),
                _ => continue,
            };
            checked += 1;
            if let Some(problem) = problem {
                refused.push(format!("{}: {problem}", block.place()));
            }
        }
    }
    println!("{checked} documented configurations checked");
    assert!(checked > 0, "no toml or yaml block found");
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

/// A TOML block, completed when it is a fragment, with the page's descriptor files where
/// its `[envoy] descriptors` points.
fn check_toml(block: &Block, descriptors: &[&Block]) -> Option<String> {
    let text = block.text();
    let parsed: toml::Table = match text.parse() {
        Ok(table) => table,
        Err(e) => return Some(format!("not TOML: {e}")),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let envoy_files = parsed
        .get("envoy")
        .and_then(|envoy| envoy.get("descriptors"))
        .and_then(toml::Value::as_str);
    if let Some(relative) = envoy_files {
        let target = dir.path().join(relative);
        std::fs::create_dir_all(&target).expect("descriptor directory");
        for (n, descriptor) in descriptors.iter().enumerate() {
            std::fs::write(target.join(format!("doc{n}.yaml")), descriptor.text())
                .expect("descriptor file");
        }
    }
    let file = if parsed.contains_key("server") {
        text
    } else {
        format!("{FRAGMENT_PREFIX}{text}")
    };
    if let Some(problem) = check_config(dir.path(), &file) {
        return Some(problem);
    }
    block
        .attribute("from")
        .and_then(|source| differs_from(&parsed, source))
}

/// An Envoy descriptor file, behind an `[envoy]` section.
fn check_descriptors(block: &Block) -> Option<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("descriptors")).expect("descriptor directory");
    std::fs::write(dir.path().join("descriptors/doc.yaml"), block.text()).expect("write");
    let file = format!(
        "{FRAGMENT_PREFIX}[envoy]\nlisten = \"127.0.0.1:8081\"\ndescriptors = \"descriptors/\"\n"
    );
    check_config(dir.path(), &file)
}

/// `rl-gateway --check-config` on `file` written into `dir`; its complaint when it refuses.
fn check_config(dir: &Path, file: &str) -> Option<String> {
    let path = dir.join("gateway.toml");
    std::fs::write(&path, file).expect("write the configuration");
    let output = Command::new(gateway_binary())
        .arg("--check-config")
        .arg(&path)
        .output()
        .expect("rl-gateway runs");
    (!output.status.success()).then(|| {
        format!(
            "--check-config refuses it: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// A block of another language that says it is a file (`from=FILE`) must be that file.
fn copy_differs(block: &Block) -> Option<String> {
    let source = block.attribute("from")?;
    let path = workspace_root().join(source);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{source}: {e}"));
    (text != block.text()).then(|| format!("the block is not {source} as it is"))
}

/// Where the block's tables differ from the same tables of the checkout's `source` file:
/// `[[rule]]` tables matched by `name`, every other table by its key.
fn differs_from(shown: &toml::Table, source: &str) -> Option<String> {
    let path = workspace_root().join(source);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{source}: {e}"));
    let file: toml::Table = text.parse().unwrap_or_else(|e| panic!("{source}: {e}"));
    for (key, value) in shown {
        if key == "rule" {
            let rules = value.as_array().map(Vec::as_slice).unwrap_or_default();
            for rule in rules {
                let name = rule.get("name");
                let same = file
                    .get("rule")
                    .and_then(toml::Value::as_array)
                    .and_then(|all| all.iter().find(|r| r.get("name") == name));
                if same != Some(rule) {
                    return Some(format!("rule {name:?} is not as in {source}: {same:?}"));
                }
            }
        } else if file.get(key) != Some(value) {
            return Some(format!("[{key}] is not as in {source}"));
        }
    }
    None
}
