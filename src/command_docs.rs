//! What `COMMAND DOCS` and `COMMAND INFO` say about each command beyond its flags: a
//! summary, its complexity (the reason most commands are not `fast`), since, the tip
//! `nondeterministic_output` for every command whose reply depends on the server's clock,
//! and its arguments (so redis-cli shows a syntax hint and client generators see them).
//!
//! All of it is written once, in `commands/*.json` (the format of Redis's and Valkey's
//! own command JSON), which `build.rs` turns into [`DESCRIBED`] and
//! `scripts/command_pages.py` into the pages of `docs/src/commands`.
//!
//! Set with `RedisModule_SetCommandInfo` (Redis 7.0, Valkey) without an arity, so the
//! module keeps checking its arguments itself, and without key specs for the commands
//! registered with key positions (`1, 1, 1`), which stay as they are. The several-keys
//! commands (`numkeys key [key ...]`) are registered without positions and get their key
//! spec here: it is how Cluster finds their keys. Docs are optional: a server that refuses
//! them gets a log line, and the module loads anyway; a key spec is not.

use crate::server::command::{CountedKeys, RegisterError};
use crate::server::command_info::{set_docs, ArgDoc, ArgKind, CommandDoc};
use redis_module::Context;

include!(concat!(env!("OUT_DIR"), "/command_docs.rs"));

/// The syntax line of the described command `name` (`RL.POLICY|GET`), as its page shows it.
pub fn syntax_of(name: &str) -> Option<&'static [u8]> {
    let doc = DESCRIBED.iter().find(|doc| doc.name.to_str() == Ok(name))?;
    Some(doc.syntax.to_bytes())
}

/// Sets the docs of every described command, and the key specs of the several-keys
/// commands; called at load, after registration. A key spec the server refuses fails the
/// load: without it Cluster could not route those commands.
pub fn describe_all(ctx: &Context) -> Result<(), RegisterError> {
    for doc in DESCRIBED {
        match set_docs(ctx, doc) {
            Ok(()) => {}
            Err(err) if doc.counted_keys.is_some() => return Err(err),
            Err(err) => ctx.log_notice(&format!("ratelimit: {err}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(name: &str) -> &'static CommandDoc {
        DESCRIBED
            .iter()
            .find(|doc| doc.name.to_str() == Ok(name))
            .unwrap_or_else(|| panic!("{name} is described"))
    }

    #[test]
    fn every_command_is_described_once() {
        let names: Vec<&str> = DESCRIBED
            .iter()
            .map(|doc| doc.name.to_str().expect("ASCII names"))
            .collect();
        for name in [
            "RL.HIT",
            "RL.PEEK",
            "RL.REFUND",
            "RL.RESET",
            "RL.TAKE",
            "RL.MHIT",
            "RL.MPEEK",
            "RL.MREFUND",
            "CL.THROTTLE",
            "RL.ACQUIRE",
            "RL.RELEASE",
            "RL.RENEW",
            "RL.LEASES",
            "RL.STATS",
            "RL.POLICY",
            "RL.POLICY|SET",
            "RL.POLICY|GET",
            "RL.POLICY|DEL",
            "RL.POLICY|LIST",
            "RL.POLICY|HELP",
        ] {
            assert_eq!(names.iter().filter(|&&n| n == name).count(), 1, "{name}");
        }
        assert_eq!(names.len(), 20, "{names:?}");
    }

    #[test]
    fn only_the_several_keys_commands_set_a_key_spec() {
        for doc in DESCRIBED {
            let name = doc.name.to_str().expect("ASCII names");
            let several = ["RL.MHIT", "RL.MPEEK", "RL.MREFUND"].contains(&name);
            assert_eq!(doc.counted_keys.is_some(), several, "{name}");
        }
        let mpeek = find("RL.MPEEK").counted_keys.expect("a key spec");
        assert_eq!((mpeek.count_at, mpeek.writes), (1, false));
        let mhit = find("RL.MHIT").counted_keys.expect("a key spec");
        assert_eq!((mhit.count_at, mhit.writes), (1, true));
    }

    #[test]
    fn syntax_lines_are_the_pages_ones() {
        let set = syntax_of("RL.POLICY|SET").expect("described");
        assert_eq!(
            std::str::from_utf8(set),
            Ok("RL.POLICY SET name limit window [limit window ...] \
                [ALGO <fixed | sliding | log | token | gcra>] [BURST burst] \
                [MODE <enforce | shadow>] [TZ zone] [ANCHOR day]")
        );
        let mhit = find("RL.MHIT").syntax.to_str().expect("ASCII");
        assert!(
            mhit.starts_with("RL.MHIT numkeys key [key ...] SPEC <limit window"),
            "{mhit}"
        );
        assert!(
            mhit.ends_with("| POLICY policy-name [COST cost]> ...]"),
            "{mhit}"
        );
        let pages = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/commands");
        for doc in DESCRIBED {
            let name = doc.name.to_str().expect("ASCII").to_ascii_lowercase();
            let page = pages.join(format!("{}.md", name.replace('|', "-")));
            let text = std::fs::read_to_string(&page).expect("every command has a page");
            let line = doc.syntax.to_str().expect("ASCII");
            assert!(
                text.contains(&format!("```text\n{line}")),
                "{}",
                page.display()
            );
        }
    }

    #[test]
    fn arguments_keep_their_tree() {
        let hit = find("RL.HIT");
        assert_eq!(hit.args[0].kind, ArgKind::Key);
        let rule = &hit.args[1];
        assert_eq!(rule.kind, ArgKind::OneOf);
        let limits = &rule.args[0];
        assert_eq!(limits.args[0].name, c"tier");
        assert!(limits.args[0].multiple);
        let algo = &limits.args[1];
        assert_eq!((algo.token, algo.optional), (Some(c"ALGO"), true));
        assert!(algo.args.iter().all(|a| a.kind == ArgKind::PureToken));
        let _: &[ArgDoc] = find("RL.POLICY|LIST").args;
        assert!(find("RL.POLICY|LIST").args.is_empty());
    }
}
