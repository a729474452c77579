//! Why a configuration is refused. Each message names the file, the section, the rule
//! and the field, as the operator wrote them.

use crate::front::envoy::descriptors::DescriptorError;
use std::path::PathBuf;

/// A configuration (the TOML file, the rules stored in Redis, or the Envoy descriptors
/// it names) that does not load.
#[derive(Debug)]
pub enum ConfigError {
    /// The file cannot be read.
    Read {
        /// The path as given.
        path: PathBuf,
        /// What the system said.
        error: std::io::Error,
    },
    /// Not TOML, or a section or field the gateway does not know.
    Toml(toml::de::Error),
    /// A value refused: the message names the section, the rule and the field.
    Invalid(String),
    /// The Envoy descriptors `[envoy] descriptors` names.
    Descriptors(DescriptorError),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Read { path, error } => {
                write!(f, "cannot read {}: {error}", path.display())
            }
            ConfigError::Toml(error) => error.fmt(f),
            ConfigError::Invalid(message) => f.write_str(message),
            ConfigError::Descriptors(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Read { error, .. } => Some(error),
            ConfigError::Toml(error) => Some(error),
            ConfigError::Descriptors(error) => Some(error),
            ConfigError::Invalid(_) => None,
        }
    }
}

impl From<DescriptorError> for ConfigError {
    fn from(error: DescriptorError) -> Self {
        ConfigError::Descriptors(error)
    }
}

/// For callers that report errors as text (the binary's start-up, the reloader).
impl From<ConfigError> for String {
    fn from(error: ConfigError) -> String {
        error.to_string()
    }
}
