//! A setting that takes one of a few words (`mode = "proxy"`, `on_redis_failure =
//! "closed"`, ...): the word's meaning, or an error that names the setting, the value
//! given and every word it may be.

/// The meaning `choices` gives to `value`, or `<setting> '<value>' must be "a", "b" or
/// "c"`.
pub(crate) fn one_of<T: Copy>(
    setting: &str,
    value: &str,
    choices: &[(&str, T)],
) -> Result<T, String> {
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
    Err(format!("{setting} '{value}' must be {words}"))
}

#[cfg(test)]
mod tests {
    use super::one_of;

    #[test]
    fn names_every_word_when_the_value_is_none_of_them() {
        let two = [("open", false), ("closed", true)];
        assert_eq!(one_of("on_x", "closed", &two), Ok(true));
        assert_eq!(
            one_of("on_x", "maybe", &two),
            Err("on_x 'maybe' must be \"open\" or \"closed\"".to_owned())
        );
        let three = [("a", 1), ("b", 2), ("c", 3)];
        assert_eq!(
            one_of("[s] k", "", &three),
            Err("[s] k '' must be \"a\", \"b\" or \"c\"".to_owned())
        );
    }
}
