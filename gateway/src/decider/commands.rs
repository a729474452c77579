//! The module's commands as the decider sends them: one key (`RL.HIT key args...`) or
//! several (`RL.MHIT numkeys key ... SPEC args ...`), each key with its rule's words and
//! the request's cost. Where the Functions library answers instead, the transport sends
//! each as the library's `FCALL` (`redis::functions`); nothing here knows.

use super::Applied;

impl Applied {
    /// The rule's words without its own `COST` (always its last two words, see
    /// `call_args`).
    fn words_without_cost(&self) -> &[String] {
        let words = &self.rule.call_args;
        let own = words.len() >= 2 && words[words.len() - 2] == "COST";
        &words[..words.len() - if own { 2 } else { 0 }]
    }

    /// The words after the key of `RL.HIT`, `RL.PEEK` or `RL.REFUND` for this request.
    pub(super) fn push_args(&self, cmd: &mut redis::Cmd) {
        match self.cost {
            None => {
                cmd.arg(&self.rule.call_args);
            }
            Some(cost) => {
                // The module takes COST once: the rule's own gives way to this request's.
                cmd.arg(self.words_without_cost());
                if cost != 1 {
                    cmd.arg("COST").arg(cost);
                }
            }
        }
    }
}

/// `RL.TAKE key words UPTO units` for the key of `applied` (the partial grant takes no
/// `COST`: `UPTO` is the units asked for).
pub(super) fn take_cmd(applied: &Applied, units: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("RL.TAKE");
    cmd.arg(&applied.key)
        .arg(applied.words_without_cost())
        .arg("UPTO")
        .arg(units);
    cmd
}

/// `command key args...` for one applying rule.
pub(super) fn hit_cmd(command: &str, applied: &Applied) -> redis::Cmd {
    let mut cmd = redis::cmd(command);
    cmd.arg(&applied.key);
    applied.push_args(&mut cmd);
    cmd
}

/// `command numkeys key ... SPEC args ...` for the rules `group` of `applying`.
pub(super) fn multi_cmd(command: &str, applying: &[Applied], group: &[usize]) -> redis::Cmd {
    let mut cmd = redis::cmd(command);
    cmd.arg(group.len());
    for &i in group {
        cmd.arg(&applying[i].key);
    }
    for &i in group {
        cmd.arg("SPEC");
        applying[i].push_args(&mut cmd);
    }
    cmd
}

/// The command for `group`: `one` for a group of one key, else `many`.
pub(super) fn group_cmd(
    one: &str,
    many: &str,
    applying: &[Applied],
    group: &[usize],
) -> redis::Cmd {
    match group {
        [i] => hit_cmd(one, &applying[*i]),
        _ => multi_cmd(many, applying, group),
    }
}
