//! A scrape of the gateway's Prometheus text format and the counters the tests read.

/// A scrape of the Prometheus text format.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub text: String,
}

/// One sample: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Metrics {
    pub fn samples(&self) -> Vec<Sample> {
        self.text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| {
                parse_sample(line)
                    .unwrap_or_else(|| panic!("not a Prometheus sample line: {line:?}"))
            })
            .collect()
    }

    /// The sum of the samples named `name` whose labels include every pair of `labels`;
    /// `None` when there is none.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matching: Vec<f64> = self
            .samples()
            .into_iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
            })
            .map(|s| s.value)
            .collect();
        (!matching.is_empty()).then(|| matching.iter().sum())
    }

    /// A counter: as [`Metrics::value`], a missing series counting as 0.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels).unwrap_or(0.0)
    }

    /// `rl_gateway_decisions_total{rule, outcome}`.
    pub fn decisions(&self, rule: &str, outcome: &str) -> f64 {
        self.counter(
            "rl_gateway_decisions_total",
            &[("rule", rule), ("outcome", outcome)],
        )
    }

    /// Asserts `rl_gateway_decisions_total` for each `(rule, outcome, count)`; a failure
    /// names `what` and shows the whole scrape.
    pub fn assert_decisions(&self, what: &str, expected: &[(&str, &str, f64)]) {
        for &(rule, outcome, count) in expected {
            assert_eq!(
                self.decisions(rule, outcome),
                count,
                "{what}: {rule} {outcome}:\n{}",
                self.text
            );
        }
    }

    /// `rl_gateway_envoy_hits_total{rule, stat}`: envoyproxy/ratelimit's per-limit stats
    /// (`total_hits`, `over_limit`, `near_limit`, `within_limit`, `shadow_mode`).
    pub fn envoy_hits(&self, rule: &str, stat: &str) -> f64 {
        self.counter(
            "rl_gateway_envoy_hits_total",
            &[("rule", rule), ("stat", stat)],
        )
    }

    /// `rl_gateway_fail_open_total{reason}`.
    pub fn fail_open(&self, reason: &str) -> f64 {
        self.counter("rl_gateway_fail_open_total", &[("reason", reason)])
    }

    /// `rl_gateway_rule_reloads_total{result}`.
    pub fn reloads(&self, result: &str) -> f64 {
        self.counter("rl_gateway_rule_reloads_total", &[("result", result)])
    }
}

fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        let mut end = None;
        loop {
            while chars.peek().is_some_and(|(_, c)| *c == ',' || *c == ' ') {
                chars.next();
            }
            match chars.peek() {
                Some((i, '}')) => {
                    end = Some(*i);
                    break;
                }
                None => break,
                _ => {}
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return None;
            }
            let mut value = String::new();
            loop {
                match chars.next()?.1 {
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.push((key.trim().to_string(), value));
        }
        rest = &after[end? + 1..];
    }
    let value_text = rest.split_whitespace().next()?;
    let value = match value_text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        text => text.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}
