//! Error replies of the module (a policy deleted in Redis, a window above the server's
//! `ratelimit.max-window-ms`, the module not loaded) mean a misconfiguration, not an outage:
//! each is counted (`rl_gateway_module_errors_total{rule}`) and logged, at most one line per
//! rule per second so that a busy route cannot flood the log, with the number of errors the
//! line stands for.

use crate::logging::{step, Slot};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Rules remembered at most: names come from the rules, but reloads may bring new ones for
/// ever, so the memory is bounded; forgetting only allows one early line per rule.
const MAX_RULES: usize = 1024;

#[derive(Default)]
pub(crate) struct ModuleErrorLog {
    /// Per rule: when its last line was written, and the errors since that were not.
    rules: Mutex<HashMap<String, Slot>>,
}

impl ModuleErrorLog {
    /// Records an error of `rule` at `now`; `Some(n)` when a line is due, `n` being the
    /// errors that went unlogged since the rule's previous line.
    pub(crate) fn record(&self, rule: &str, now: Instant) -> Option<u64> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = rules.get_mut(rule) {
            return step(slot, now);
        }
        if rules.len() >= MAX_RULES {
            rules.clear();
        }
        let mut slot = None;
        let due = step(&mut slot, now);
        rules.insert(rule.to_owned(), slot);
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::LOG_EVERY;
    use std::time::Duration;

    #[test]
    fn one_line_per_rule_per_second_counting_the_rest() {
        let log = ModuleErrorLog::default();
        let start = Instant::now();
        assert_eq!(log.record("a", start), Some(0));
        assert_eq!(log.record("b", start), Some(0), "rules are apart");
        for i in 1..=5 {
            assert_eq!(
                log.record("a", start + Duration::from_millis(i * 100)),
                None
            );
        }
        assert_eq!(log.record("a", start + LOG_EVERY), Some(5));
        assert_eq!(log.record("a", start + LOG_EVERY), None);
    }

    #[test]
    fn memory_is_bounded() {
        let log = ModuleErrorLog::default();
        let now = Instant::now();
        for i in 0..3 * MAX_RULES {
            log.record(&format!("rule{i}"), now);
        }
        assert!(log.rules.lock().unwrap().len() <= MAX_RULES);
    }
}
