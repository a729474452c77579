//! The Functions library as the gateway's backend: the bundle it embeds (and loads where
//! `functions_load` allows), and the one translation of a module command into the
//! library's `FCALL`, made at the transport so that nothing above it knows which of the two
//! answers.
//!
//! The library's contract is the module's: `RL.X key args...` is `FCALL rl_x 1 key
//! args...`, and a command that takes `numkeys` first (`RL.MHIT numkeys key ... rest`) is
//! `FCALL rl_mhit numkeys key ... rest`; the replies and the error messages are the same.

use redis::{Arg, Cmd};

/// The library as `FUNCTION LOAD` takes it: this build's copy, of this build's version.
pub(crate) const LIBRARY: &str = include_str!("../../../../functions/ratelimit.lua");

/// The name the library registers under (its `#!lua name=` line).
pub(crate) const LIBRARY_NAME: &str = "ratelimit";

/// The version `FCALL_RO rl_version 0` answers for the library the gateway can use: the
/// workspace's, which the gateway and the bundle share.
pub(crate) const LIBRARY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The module's commands the gateway sends, each with its function and whether it takes
/// `numkeys` first.
const COMMANDS: [(&str, &str, bool); 11] = [
    ("RL.HIT", "rl_hit", false),
    ("RL.TAKE", "rl_take", false),
    ("RL.PEEK", "rl_peek", false),
    ("RL.REFUND", "rl_refund", false),
    ("RL.RESET", "rl_reset", false),
    ("RL.ACQUIRE", "rl_acquire", false),
    ("RL.RELEASE", "rl_release", false),
    ("RL.RENEW", "rl_renew", false),
    ("RL.MHIT", "rl_mhit", true),
    ("RL.MPEEK", "rl_mpeek", true),
    ("RL.MREFUND", "rl_mrefund", true),
];

/// `cmd` as the library's `FCALL`, or `None` for a command that is not one of the
/// module's (sent as it is) or has no key to call it with.
pub(crate) fn as_fcall(cmd: &Cmd) -> Option<Cmd> {
    let mut args = cmd.args_iter().map(|arg| match arg {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()??;
    let (_, function, numkeys_first) = COMMANDS
        .iter()
        .find(|(command, _, _)| command.as_bytes().eq_ignore_ascii_case(name))?;
    let rest: Vec<&[u8]> = args.collect::<Option<_>>()?;
    if rest.is_empty() {
        // No key: left to the server to refuse as the module would (arity).
        return None;
    }
    let mut fcall = redis::cmd("FCALL");
    fcall.arg(*function);
    if !numkeys_first {
        fcall.arg(1);
    }
    for word in rest {
        fcall.arg(word);
    }
    Some(fcall)
}

/// `FCALL_RO rl_version 0`: the version of the library a server holds.
pub(crate) fn version_cmd() -> Cmd {
    let mut cmd = redis::cmd("FCALL_RO");
    cmd.arg("rl_version").arg(0);
    cmd
}

/// `FUNCTION LOAD` of the embedded library, never `REPLACE`: a library of that name
/// already there (of another version, say) is an error, not overwritten.
pub(crate) fn load_cmd() -> Cmd {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD").arg(LIBRARY);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "CURSOR".into(),
            })
            .collect()
    }

    fn translated(parts: &[&str]) -> Option<Vec<String>> {
        let mut cmd = redis::cmd(parts[0]);
        for part in &parts[1..] {
            cmd.arg(*part);
        }
        as_fcall(&cmd).map(|fcall| words(&fcall))
    }

    #[test]
    fn a_one_key_command_becomes_fcall_with_one_key() {
        let cases: [(&[&str], &[&str]); 7] = [
            (
                &["RL.HIT", "rl:a", "10", "60s", "COST", "2"],
                &["FCALL", "rl_hit", "1", "rl:a", "10", "60s", "COST", "2"],
            ),
            (
                &["RL.PEEK", "rl:a", "10", "60s"],
                &["FCALL", "rl_peek", "1", "rl:a", "10", "60s"],
            ),
            (
                &["RL.REFUND", "rl:a", "10", "60s"],
                &["FCALL", "rl_refund", "1", "rl:a", "10", "60s"],
            ),
            (&["RL.RESET", "rl:a"], &["FCALL", "rl_reset", "1", "rl:a"]),
            (
                &["RL.ACQUIRE", "rl:c", "2", "30s", "ID", "x1"],
                &["FCALL", "rl_acquire", "1", "rl:c", "2", "30s", "ID", "x1"],
            ),
            (
                &["RL.RELEASE", "rl:c", "x1"],
                &["FCALL", "rl_release", "1", "rl:c", "x1"],
            ),
            (
                &["RL.RENEW", "rl:c", "x1", "30000ms"],
                &["FCALL", "rl_renew", "1", "rl:c", "x1", "30000ms"],
            ),
        ];
        for (module, library) in cases {
            let library: Vec<String> = library.iter().map(|w| w.to_string()).collect();
            assert_eq!(translated(module), Some(library));
        }
    }

    #[test]
    fn a_numkeys_command_keeps_its_numkeys() {
        let cases: [(&[&str], &[&str]); 3] = [
            (
                &[
                    "RL.MHIT", "2", "a", "b", "SPEC", "5", "1s", "SPEC", "9", "1m",
                ],
                &[
                    "FCALL", "rl_mhit", "2", "a", "b", "SPEC", "5", "1s", "SPEC", "9", "1m",
                ],
            ),
            (
                &["RL.MPEEK", "1", "a", "SPEC", "5", "1s"],
                &["FCALL", "rl_mpeek", "1", "a", "SPEC", "5", "1s"],
            ),
            (
                &["RL.MREFUND", "1", "a", "SPEC", "5", "1s"],
                &["FCALL", "rl_mrefund", "1", "a", "SPEC", "5", "1s"],
            ),
        ];
        for (module, library) in cases {
            let library: Vec<String> = library.iter().map(|w| w.to_string()).collect();
            assert_eq!(translated(module), Some(library));
        }
    }

    #[test]
    fn other_commands_are_sent_as_they_are() {
        assert_eq!(translated(&["GET", "rl:rules"]), None);
        assert_eq!(translated(&["RL.POLICY", "GET", "api"]), None);
        assert_eq!(translated(&["RL.HIT"]), None, "no key to call with");
    }

    #[test]
    fn the_name_is_matched_as_the_server_matches_it() {
        assert_eq!(
            translated(&["rl.hit", "k", "1", "1s"]),
            Some(
                ["FCALL", "rl_hit", "1", "k", "1", "1s"]
                    .map(String::from)
                    .to_vec()
            )
        );
    }

    #[test]
    fn the_bundle_is_the_library_of_this_version() {
        let first = LIBRARY.lines().next().unwrap_or_default();
        assert_eq!(first, format!("#!lua name={LIBRARY_NAME}"));
        assert!(
            LIBRARY.contains(&format!("'{LIBRARY_VERSION}'")),
            "the bundle names another version than {LIBRARY_VERSION}"
        );
    }
}
