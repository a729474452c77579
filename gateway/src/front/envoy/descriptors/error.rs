//! Why a descriptor file is refused: each error names the file (or the in-memory text)
//! and the place in it.

use super::load::{MAX_FILES, MAX_FILE_BYTES};
use std::path::PathBuf;

/// A descriptor file (or directory) that does not load.
#[derive(Debug)]
pub enum DescriptorError {
    /// A file or directory that cannot be read.
    Read {
        /// The path as given.
        path: PathBuf,
        /// What the system said.
        error: std::io::Error,
    },
    /// A directory of more than [`MAX_FILES`] files.
    TooManyFiles {
        /// The directory.
        dir: PathBuf,
        /// How many files it holds.
        count: usize,
    },
    /// A file of more than [`MAX_FILE_BYTES`].
    TooLarge(PathBuf),
    /// The YAML itself: its syntax, an unknown field, aliases expanded past the limit.
    Yaml(serde_yaml_ng::Error),
    /// A field's value, the message naming its place (`descriptors[0].rate_limit.unit`).
    Field(String),
    /// A domain loaded twice: where, and the file it was first loaded from (none for
    /// in-memory texts).
    DomainTwice {
        /// The file (or text) loading it the second time.
        at: String,
        /// The domain's name.
        domain: String,
        /// The file that loaded it first.
        first: Option<PathBuf>,
    },
    /// An error in one file (or in-memory text, `text <i>`).
    In {
        /// The file's path, or `text <i>`.
        source: String,
        /// What is wrong in it.
        error: Box<DescriptorError>,
    },
}

impl std::fmt::Display for DescriptorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DescriptorError::Read { path, error } => {
                write!(f, "cannot read {}: {error}", path.display())
            }
            DescriptorError::TooManyFiles { dir, count } => write!(
                f,
                "{}: {count} descriptor files, at most {MAX_FILES}",
                dir.display()
            ),
            DescriptorError::TooLarge(file) => {
                write!(f, "{}: larger than {MAX_FILE_BYTES} bytes", file.display())
            }
            DescriptorError::Yaml(error) => error.fmt(f),
            DescriptorError::Field(message) => f.write_str(message),
            DescriptorError::DomainTwice { at, domain, first } => match first {
                Some(first) => write!(
                    f,
                    "{at}: domain '{domain}' is already loaded from {}",
                    first.display()
                ),
                None => write!(f, "{at}: domain '{domain}' is loaded twice"),
            },
            DescriptorError::In { source, error } => write!(f, "{source}: {error}"),
        }
    }
}

impl std::error::Error for DescriptorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DescriptorError::Read { error, .. } => Some(error),
            DescriptorError::Yaml(error) => Some(error),
            DescriptorError::In { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

/// For callers that report errors as text (the binary's start-up and `--check-config`).
impl From<DescriptorError> for String {
    fn from(error: DescriptorError) -> String {
        error.to_string()
    }
}
