//! Reading the files: bounded reads, one domain per file, the tree built level by level
//! with the settings each descriptor inherits, errors naming the file and the place.

use super::compile::{descriptor_limit, Inherited};
use super::matching::{Level, Node};
use super::schema::{DescriptorDoc, FileDoc};
use super::{DescriptorError, Domain, Domains, FailMode, OverrideMode};
use std::collections::HashMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The largest descriptor file read (a larger one is refused before it is read whole).
pub(crate) const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// The most files a directory of descriptors may hold.
pub(crate) const MAX_FILES: usize = 1000;
/// The deepest a descriptor may be nested: a request descriptor has at most this many
/// entries, so a deeper node could never match.
pub(crate) const MAX_DEPTH: usize = 16;

/// Loads `path`: one YAML file, or every `*.yaml` and `*.yml` directly in a directory (in
/// name order; dotfiles skipped). A domain in two files is refused, as
/// envoyproxy/ratelimit refuses it unless told to merge. Errors name the file and the
/// place in it. Bounded: at most [`MAX_FILES`] files of [`MAX_FILE_BYTES`] each, nodes at
/// most [`MAX_DEPTH`] deep, and YAML aliases expanded at most a hundred times the events
/// of the file (serde_yaml_ng's repetition limit), so that a billion-laughs file is
/// refused, not expanded.
pub fn load(path: &Path) -> Result<Domains, DescriptorError> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|error| DescriptorError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                !name.starts_with('.')
                    && (name.ends_with(".yaml") || name.ends_with(".yml"))
                    && p.is_file()
            })
            .collect();
        if files.len() > MAX_FILES {
            return Err(DescriptorError::TooManyFiles {
                dir: path.to_path_buf(),
                count: files.len(),
            });
        }
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut domains = Domains::default();
    let mut origin: HashMap<String, PathBuf> = HashMap::new();
    for file in files {
        let text = read_bounded(&file)?;
        let domain = parse(&text).map_err(|error| DescriptorError::In {
            source: file.display().to_string(),
            error: Box::new(error),
        })?;
        if let Some(first) = origin.get(&domain.name) {
            return Err(DescriptorError::DomainTwice {
                at: file.display().to_string(),
                domain: domain.name,
                first: Some(first.clone()),
            });
        }
        origin.insert(domain.name.clone(), file.clone());
        domains.domains.insert(domain.name.clone(), domain);
    }
    Ok(domains)
}

/// The text of `file`, refused when over [`MAX_FILE_BYTES`] (read through a bound, so a
/// file that grows while it is read, or a device, is refused too).
fn read_bounded(file: &Path) -> Result<String, DescriptorError> {
    use std::io::Read;
    let cannot = |error| DescriptorError::Read {
        path: file.to_path_buf(),
        error,
    };
    let mut text = String::new();
    std::fs::File::open(file)
        .map_err(cannot)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(cannot)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(DescriptorError::TooLarge(file.to_path_buf()));
    }
    Ok(text)
}

/// Builds [`Domains`] from YAML texts given in memory (for tests and fuzzing); the same
/// checks as [`load`], each text named by its index.
pub fn from_texts(texts: &[&str]) -> Result<Domains, DescriptorError> {
    let mut domains = Domains::default();
    for (i, text) in texts.iter().enumerate() {
        let domain = parse(text).map_err(|error| DescriptorError::In {
            source: format!("text {i}"),
            error: Box::new(error),
        })?;
        if domains.domains.contains_key(&domain.name) {
            return Err(DescriptorError::DomainTwice {
                at: format!("text {i}"),
                domain: domain.name,
                first: None,
            });
        }
        domains.domains.insert(domain.name.clone(), domain);
    }
    Ok(domains)
}

/// One file's text, checked.
pub(crate) fn parse(text: &str) -> Result<Domain, DescriptorError> {
    let doc: FileDoc = serde_yaml_ng::from_str(text).map_err(DescriptorError::Yaml)?;
    let name = doc.domain.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(DescriptorError::Field("domain: missing or empty".into()));
    }
    domain(name, &doc).map_err(DescriptorError::Field)
}

/// The domain `name` of `doc`, its fields checked; the error names the place.
fn domain(name: String, doc: &FileDoc) -> Result<Domain, String> {
    let on_failure = match &doc.on_failure {
        Some(text) => fail_mode("on_failure", text)?,
        None => FailMode::Local,
    };
    let on_module_error = match &doc.on_module_error {
        Some(text) => fail_mode("on_module_error", text)?,
        None => FailMode::OverLimit,
    };
    let limit_override = match &doc.limit_override {
        Some(text) => OverrideMode::parse("limit_override", text)?,
        None => OverrideMode::Tighten,
    };
    let top = Inherited {
        on_failure,
        on_module_error,
        limit_override,
        subject: doc.subject.as_deref(),
        stat: name.clone(),
        at: String::new(),
        depth: 0,
    };
    let root = level(&doc.descriptors, &top)?;
    Ok(Domain { name, root })
}

fn fail_mode(at: &str, text: &str) -> Result<FailMode, String> {
    FailMode::parse(text)
        .ok_or_else(|| format!("{at}: '{text}' is not one of ok, local, over_limit, unavailable"))
}

fn level(docs: &[DescriptorDoc], above: &Inherited<'_>) -> Result<Level, String> {
    let mut this = Level::default();
    for (i, doc) in docs.iter().enumerate() {
        let at = if above.at.is_empty() {
            format!("descriptors[{i}]")
        } else {
            format!("{}.descriptors[{i}]", above.at)
        };
        let key = doc
            .key
            .as_deref()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| format!("{at}.key: missing or empty"))?;
        let mut stat = format!("{}.{key}", above.stat);
        if let Some(value) = &doc.value {
            let _ = write!(stat, "_{value}");
        }
        let on_failure = match &doc.on_failure {
            Some(text) => fail_mode(&format!("{at}.on_failure"), text)?,
            None => above.on_failure,
        };
        let on_module_error = match &doc.on_module_error {
            Some(text) => fail_mode(&format!("{at}.on_module_error"), text)?,
            None => above.on_module_error,
        };
        let limit_override = match &doc.limit_override {
            Some(text) => OverrideMode::parse(&format!("{at}.limit_override"), text)?,
            None => above.limit_override,
        };
        let here = Inherited {
            on_failure,
            on_module_error,
            limit_override,
            subject: doc.subject.as_deref().or(above.subject),
            stat,
            at,
            depth: above.depth + 1,
        };
        if here.depth > MAX_DEPTH {
            return Err(format!(
                "{}: nested more than {MAX_DEPTH} deep (a request descriptor has at most {MAX_DEPTH} entries)",
                here.at
            ));
        }
        let limit = match &doc.rate_limit {
            Some(rate_limit) => Some(Arc::new(descriptor_limit(doc, rate_limit, &here)?)),
            // shadow_mode without a limit means nothing, as in envoyproxy/ratelimit.
            None => None,
        };
        let node = Node {
            limit,
            children: level(&doc.descriptors, &here)?,
        };
        let nodes = this.keys.entry(key.to_owned()).or_default();
        let duplicate = match doc.value.as_deref() {
            None | Some("") => nodes.any.replace(node).is_some(),
            Some(value) => match value.strip_suffix('*') {
                Some(prefix) => {
                    let seen = nodes.prefixed.iter().any(|(p, _)| p == prefix);
                    nodes.prefixed.push((prefix.to_owned(), node));
                    seen
                }
                None => nodes.exact.insert(value.to_owned(), node).is_some(),
            },
        };
        if duplicate {
            return Err(format!(
                "{}: a descriptor with key '{key}' and this value is already defined at this level",
                here.at
            ));
        }
    }
    Ok(this)
}
