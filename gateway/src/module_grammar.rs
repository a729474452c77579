//! The module's grammar, applied when the rules load. A rule is checked by parsing the very
//! words it will send after the key of RL.HIT and RL.REFUND with the parser the module
//! itself runs (`ratelimit_core::args`, with the module's default settings), so that the
//! gateway refuses at `--check-config` and at reload whatever the module would refuse at
//! every request, and keeps no copy of the rules to drift apart from the module's.

use ratelimit_core::args::{parse_limits, parse_policy_call, ArgError, Settings};
use ratelimit_core::lease::args::parse_acquire;
use ratelimit_core::lease::MAX_LEASES;

/// A call the module would refuse: which command, its words and the module's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// `RL.HIT` or `RL.ACQUIRE`.
    pub(crate) command: &'static str,
    /// The words after the key, joined by spaces.
    pub(crate) words: String,
    /// The module's error reply without its `ERR ` prefix.
    pub(crate) reason: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} would refuse '{}': {}",
            self.command, self.words, self.reason
        )
    }
}

impl std::error::Error for Refused {}

/// Whether the module, with its default settings, takes `args` (the words after the key).
/// The error names the words and gives the module's reason without its `ERR ` prefix.
pub(crate) fn check_call(args: &[String]) -> Result<(), Refused> {
    let words = || args.iter().map(|word| word.as_bytes());
    let refused: Option<ArgError> = match parse_policy_call(words()) {
        Some(call) => call.err(),
        None => parse_limits(words(), &Settings::default()).err(),
    };
    match refused {
        None => Ok(()),
        Some(error) => Err(Refused {
            command: "RL.HIT",
            words: args.join(" "),
            reason: reason(&error),
        }),
    }
}

/// Whether the module, with its default settings (`ratelimit.max-leases` 10,000), takes
/// `args` after the key of `RL.ACQUIRE`; the error as [`check_call`]'s.
pub(crate) fn check_acquire(args: &[String]) -> Result<(), Refused> {
    let words: Vec<&[u8]> = args.iter().map(|word| word.as_bytes()).collect();
    match parse_acquire(&words, &Settings::default(), MAX_LEASES) {
        Ok(_) => Ok(()),
        Err(error) => {
            let message = error.message();
            Err(Refused {
                command: "RL.ACQUIRE",
                words: args.join(" "),
                reason: message.strip_prefix("ERR ").unwrap_or(&message).to_owned(),
            })
        }
    }
}

/// The module's error reply for `error`, without the `ERR ` that only a reply needs.
pub(crate) fn reason(error: &ArgError) -> String {
    let message = error.message();
    message.strip_prefix("ERR ").unwrap_or(&message).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn what_the_module_takes_passes() {
        assert_eq!(check_call(&words(&["5", "60000ms"])), Ok(()));
        assert_eq!(
            check_call(&words(&[
                "3", "1000ms", "ALGO", "gcra", "BURST", "6", "COST", "2"
            ])),
            Ok(())
        );
        assert_eq!(
            check_call(&words(&["POLICY", "login", "COST", "2"])),
            Ok(())
        );
    }

    #[test]
    fn what_the_module_refuses_is_refused_with_its_reason() {
        let cases: [(&[&str], ArgError); 4] = [
            (
                &["5", "34560000000ms"],
                ArgError::WindowAboveMax(Settings::default().max_window_ms),
            ),
            (&["5", "60000ms", "ALGO", "leaky"], ArgError::Algo),
            (
                &["5", "60000ms", "BURST", "2"],
                ArgError::BurstNotApplicable,
            ),
            (&["POLICY"], ArgError::PolicyName),
        ];
        for (args, expected) in cases {
            let error = check_call(&words(args)).unwrap_err().to_string();
            assert!(error.ends_with(&reason(&expected)), "{args:?}: {error}");
            assert!(!error.contains("ERR "), "{error}");
        }
    }
}
