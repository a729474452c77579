//! `[local_quota]` checked, and where a rule's `local_quota = true` may stand.

use super::schema::LocalQuotaSection;
use crate::decider::quota::QuotaSettings;
use std::time::Duration;

/// `[local_quota]`, each value in its range.
pub(super) fn local_quota(section: LocalQuotaSection) -> Result<QuotaSettings, String> {
    let in_range = |name: &str, value: u64, low: u64, high: u64| {
        if (low..=high).contains(&value) {
            Ok(value)
        } else {
            Err(format!(
                "[local_quota] {name} = {value} must be from {low} to {high}"
            ))
        }
    };
    let interval = in_range("interval_ms", section.interval_ms, 1, 10_000)?;
    let hold = in_range("hold_ms", section.hold_ms, interval, 60_000)
        .map_err(|e| format!("{e} (at least interval_ms: a batch must last its interval)"))?;
    let percent = in_range("max_batch_percent", section.max_batch_percent, 1, 50)?;
    Ok(QuotaSettings {
        interval: Duration::from_millis(interval),
        hold: Duration::from_millis(hold),
        max_batch_percent: percent,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::parse_after_server;

    /// The error of a file whose rule has `local_quota = true` and `rest`.
    fn refused(rest: &str) -> String {
        let text = format!(
            "[redis]\nurl = \"redis://127.0.0.1:6379\"\n[[rule]]\nname = \"a\"\npath = \"/a\"\n\
             local_quota = true\n{rest}\n"
        );
        match parse_after_server(&text) {
            Ok(_) => panic!("accepted: {rest}"),
            Err(error) => error,
        }
    }

    #[test]
    fn a_rule_that_needs_redis_on_every_request_is_refused_local_quota() {
        for (rest, why) in [
            (
                "policy = \"p\"",
                "a policy's windows and mode live in Redis",
            ),
            ("limits = []", "there is no budget to hold"),
            (
                "limits = [\"5/1m\"]\nmode = \"shadow\"",
                "a shadow rule never denies",
            ),
            (
                "limits = [\"5/1m\"]\nconcurrency = 2",
                "takes a lease per request",
            ),
            (
                "limits = [\"5/1m\"]\ncount = [200]",
                "refunds it by its status",
            ),
        ] {
            let error = refused(rest);
            assert!(
                error.contains("rule 'a': local_quota = true: ") && error.contains(why),
                "{rest}: {error}"
            );
        }
    }

    #[test]
    fn the_settings_are_checked_and_default_to_the_documented_values() {
        let rule =
            "[[rule]]\nname = \"a\"\npath = \"/a\"\nlimits = [\"5/1m\"]\nlocal_quota = true\n";
        let config = parse_after_server(rule).expect("loads");
        let settings = config.local_quota;
        assert_eq!(settings, crate::decider::quota::QuotaSettings::default());
        assert_eq!(settings.interval.as_millis(), 20);
        assert_eq!(settings.hold.as_millis(), 100);
        assert_eq!(settings.max_batch_percent, 1);
        assert!(config.rules.rules[0].local_quota);
        for (section, message) in [
            ("interval_ms = 0", "interval_ms = 0 must be from 1 to 10000"),
            ("hold_ms = 10", "hold_ms = 10 must be from 20 to 60000"),
            (
                "max_batch_percent = 51",
                "max_batch_percent = 51 must be from 1 to 50",
            ),
            ("batch = 3", "unknown field"),
        ] {
            let text = format!("[local_quota]\n{section}\n{rule}");
            let error = parse_after_server(&text).err().unwrap_or_default();
            assert!(error.contains(message), "{section}: {error}");
        }
        let envoy = "[envoy]\nlisten = \"127.0.0.1:8081\"\ndescriptors = \"d.yaml\"\n\
                     local_quota = true\nshadow_mode = true\n";
        let error = parse_after_server(envoy).err().unwrap_or_default();
        assert!(
            error.contains("[envoy] local_quota = true with shadow_mode"),
            "{error}"
        );
    }
}
