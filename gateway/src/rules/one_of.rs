//! A setting that takes one of a few words (`mode = "proxy"`, `on_redis_failure =
//! "closed"`, ...): the word's meaning, or an error that names the setting, the value
//! given and every word it may be.

/// A setting's value out of its words or its range: `<setting> must <must>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SettingError {
    /// The section and key, and the value when the message shows it:
    /// `[envoy] max_connections 0`.
    pub(crate) setting: String,
    /// What it must be: `be 1 to 32`.
    pub(crate) must: String,
}

impl SettingError {
    pub(crate) fn new(setting: impl Into<String>, must: impl Into<String>) -> Self {
        SettingError {
            setting: setting.into(),
            must: must.into(),
        }
    }
}

impl std::fmt::Display for SettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} must {}", self.setting, self.must)
    }
}

impl std::error::Error for SettingError {}

/// For the checks that still report errors as text.
impl From<SettingError> for String {
    fn from(error: SettingError) -> String {
        error.to_string()
    }
}

/// The meaning `choices` gives to `value`, or `<setting> '<value>' must be "a", "b" or
/// "c"`.
pub(crate) fn one_of<T: Copy>(
    setting: &str,
    value: &str,
    choices: &[(&str, T)],
) -> Result<T, SettingError> {
    if let Some((_, meaning)) = choices.iter().find(|(word, _)| *word == value) {
        return Ok(*meaning);
    }
    let quoted: Vec<String> = choices
        .iter()
        .map(|(word, _)| format!("\"{word}\""))
        .collect();
    let words = match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    Err(SettingError::new(
        format!("{setting} '{value}'"),
        format!("be {words}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::{one_of, SettingError};

    #[test]
    fn names_every_word_when_the_value_is_none_of_them() {
        let two = [("open", false), ("closed", true)];
        assert_eq!(one_of("on_x", "closed", &two), Ok(true));
        assert_eq!(
            one_of("on_x", "maybe", &two),
            Err(SettingError::new(
                "on_x 'maybe'",
                "be \"open\" or \"closed\""
            ))
        );
        let three = [("a", 1), ("b", 2), ("c", 3)];
        assert_eq!(
            one_of("[s] k", "", &three),
            Err(SettingError::new("[s] k ''", "be \"a\", \"b\" or \"c\""))
        );
    }
}
