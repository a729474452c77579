//! Reading the files: bounded reads, one domain per file, the tree built level by level
//! with the settings each descriptor inherits, errors naming the file and the place.

use super::compile::{descriptor_limit, Inherited};
use super::matching::{Level, Node};
use super::metadata::metadata;
use super::pattern::Pattern;
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
/// envoyproxy/ratelimit refuses it unless told to merge; with `merge_domains` (its
/// `MERGE_DOMAIN_CONFIG`), the descriptors of the later file are added to the domain's,
/// a key and value already defined at the top level still refused. Errors name the file
/// and the place in it. Bounded: at most [`MAX_FILES`] files of [`MAX_FILE_BYTES`] each,
/// nodes at most [`MAX_DEPTH`] deep, and YAML aliases expanded at most a hundred times the
/// events of the file (serde_yaml_ng's repetition limit), so that a billion-laughs file is
/// refused, not expanded.
pub fn load(path: &Path, merge_domains: bool) -> Result<Domains, DescriptorError> {
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
    let mut loader = Loader::new(merge_domains);
    for file in files {
        let text = read_bounded(&file)?;
        loader.add(&file.display().to_string(), Some(&file), &text)?;
    }
    Ok(loader.domains)
}

/// The domains loaded so far, and the file each came from first.
struct Loader {
    domains: Domains,
    origin: HashMap<String, Option<PathBuf>>,
    merge_domains: bool,
}

impl Loader {
    fn new(merge_domains: bool) -> Self {
        Loader {
            domains: Domains::default(),
            origin: HashMap::new(),
            merge_domains,
        }
    }

    /// Adds the file `source` (at `path`, if it is one) of `text`.
    fn add(
        &mut self,
        source: &str,
        path: Option<&Path>,
        text: &str,
    ) -> Result<(), DescriptorError> {
        let within = |error| DescriptorError::In {
            source: source.to_owned(),
            error: Box::new(error),
        };
        let (name, doc) = read(text).map_err(within)?;
        match self.domains.domains.get_mut(&name) {
            Some(domain) if self.merge_domains => {
                build(&name, &doc, &mut domain.root).map_err(|e| within(DescriptorError::Field(e)))
            }
            Some(_) => Err(DescriptorError::DomainTwice {
                at: source.to_owned(),
                first: self.origin.get(&name).cloned().flatten(),
                domain: name,
            }),
            None => {
                let mut root = Level::default();
                build(&name, &doc, &mut root).map_err(|e| within(DescriptorError::Field(e)))?;
                self.origin
                    .insert(name.clone(), path.map(Path::to_path_buf));
                self.domains.domains.insert(name, Domain { root });
                Ok(())
            }
        }
    }
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
/// checks as [`load`] without merging, each text named by its index.
pub fn from_texts(texts: &[&str]) -> Result<Domains, DescriptorError> {
    from_texts_merging(texts, false)
}

/// [`from_texts`], a domain in several texts merged when `merge_domains` is set.
pub fn from_texts_merging(texts: &[&str], merge_domains: bool) -> Result<Domains, DescriptorError> {
    let mut loader = Loader::new(merge_domains);
    for (i, text) in texts.iter().enumerate() {
        loader.add(&format!("text {i}"), None, text)?;
    }
    Ok(loader.domains)
}

/// One file's text, checked, as a domain of its own.
#[cfg(test)]
pub(crate) fn parse(text: &str) -> Result<Domain, DescriptorError> {
    let (name, doc) = read(text)?;
    let mut root = Level::default();
    build(&name, &doc, &mut root).map_err(DescriptorError::Field)?;
    Ok(Domain { root })
}

/// The YAML of one file and its domain's name (present and not empty). YAML merge keys
/// (`<<: *base`) are applied, as envoyproxy/ratelimit's YAML reader applies them: a file
/// that has any is read as a YAML value, merged and written out again, then read as
/// descriptors (an error then names the place, and a line of the merged text).
fn read(text: &str) -> Result<(String, FileDoc), DescriptorError> {
    let doc: FileDoc = if text.contains("<<") {
        let mut value: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(DescriptorError::Yaml)?;
        value.apply_merge().map_err(DescriptorError::Yaml)?;
        let merged = serde_yaml_ng::to_string(&value).map_err(DescriptorError::Yaml)?;
        serde_yaml_ng::from_str(&merged).map_err(|error| {
            DescriptorError::Field(format!(
                "{error} (a line of the file with its `<<` merge keys applied)"
            ))
        })?
    } else {
        serde_yaml_ng::from_str(text).map_err(DescriptorError::Yaml)?
    };
    match doc.domain.clone().filter(|name| !name.is_empty()) {
        Some(name) => Ok((name, doc)),
        None => Err(DescriptorError::Field(
            "domain: missing or empty (config file cannot have empty domain): name the domain \
             Envoy's rate limit filter sends"
                .into(),
        )),
    }
}

/// Adds the descriptors of `doc`, of domain `name`, to `root`, checking their fields; the
/// error names the place.
fn build(name: &str, doc: &FileDoc, root: &mut Level) -> Result<(), String> {
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
        stat: name.to_owned(),
        at: String::new(),
        depth: 0,
    };
    level(root, &doc.descriptors, &top)
}

fn fail_mode(at: &str, text: &str) -> Result<FailMode, String> {
    FailMode::parse(text)
        .ok_or_else(|| format!("{at}: '{text}' is not one of ok, local, over_limit, unavailable"))
}

/// Adds `docs`, the descriptors of one level under `above`, to `this`.
fn level(this: &mut Level, docs: &[DescriptorDoc], above: &Inherited<'_>) -> Result<(), String> {
    for (i, doc) in docs.iter().enumerate() {
        let at = if above.at.is_empty() {
            format!("descriptors[{i}]")
        } else {
            format!("{}.descriptors[{i}]", above.at)
        };
        let key = doc.key.as_deref().filter(|k| !k.is_empty()).ok_or_else(|| {
            format!("{at}.key: missing or empty (descriptor has empty key): give every descriptor a key")
        })?;
        let here = inherited(doc, above, at, key)?;
        let value = doc.value.as_deref().filter(|v| !v.is_empty());
        let pattern = value.and_then(Pattern::new);
        if doc.share_threshold && pattern.is_none() {
            return Err(format!(
                "{}.share_threshold: the value has no '*' (share_threshold can only be used \
                 with wildcard values): remove share_threshold or give a value with a '*'",
                here.at
            ));
        }
        let metadata = match &doc.metadata {
            Some(yaml) => metadata(yaml, &format!("{}.metadata", here.at))?,
            None => None,
        };
        let limit = match &doc.rate_limit {
            Some(rate_limit) => {
                let mut limit = descriptor_limit(doc, rate_limit, &here)?;
                limit.metadata = metadata;
                Some(Arc::new(limit))
            }
            // shadow_mode or metadata without a limit mean nothing, as in
            // envoyproxy/ratelimit.
            None => None,
        };
        let mut node = Node {
            limit,
            share_threshold: doc.share_threshold,
            value_to_metric: doc.value_to_metric,
            children: Level::default(),
        };
        level(&mut node.children, &doc.descriptors, &here)?;
        let nodes = this.keys.entry(key.to_owned()).or_default();
        let duplicate = match (value, pattern) {
            (None, _) => nodes.any.replace(node).is_some(),
            (Some(_), Some(pattern)) => {
                let seen = nodes
                    .patterns
                    .iter()
                    .any(|(p, _)| p.text() == pattern.text());
                nodes.patterns.push((pattern, node));
                seen
            }
            (Some(value), None) => nodes.exact.insert(value.to_owned(), node).is_some(),
        };
        if duplicate {
            return Err(format!(
                "{}: a descriptor with key '{key}' and this value is already defined at this \
                 level (duplicate descriptor composite key '{}'): remove or change one",
                here.at, here.stat
            ));
        }
    }
    Ok(())
}

/// The settings of the descriptor `doc` at `at`, of key `key`, under `above`.
fn inherited<'a>(
    doc: &'a DescriptorDoc,
    above: &Inherited<'a>,
    at: String,
    key: &str,
) -> Result<Inherited<'a>, String> {
    let mut stat = format!("{}.{key}", above.stat);
    if let Some(value) = doc.value.as_deref().filter(|v| !v.is_empty()) {
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
    Ok(here)
}
