//! Writes the hand-made seeds of the `state` target: real stored values of every
//! algorithm and form, each after the header the target reads (flags, expiry, clock,
//! amount). A tool, not a test: run it once before fuzzing with
//! `cargo run -p ratelimit-fuzz --example write_state_seeds`, then minimise with
//! `scripts/fuzz.sh cmin state`. The committed corpus is what `corpus_replay` checks.

use ratelimit_core::algorithm::Quota;
use ratelimit_core::args::{parse_limits, Settings};
use ratelimit_core::limiter::{run, Action, AlgorithmKind, Limits, Write};
use std::path::Path;

const T0: i64 = 1_796_083_200_000;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/state");
    std::fs::create_dir_all(&dir).expect("corpus directory");
    let shapes: [&[(i64, i64)]; 4] = [
        &[(10, 60_000)],
        &[(3, 1)],
        &[(100, 3_600_000)],
        &[(5, 1_000), (50, 3_600_000)],
    ];
    let mut all: Vec<(&str, Limits)> = Vec::new();
    for (algorithm, name) in AlgorithmKind::ALL {
        for tiers in shapes {
            let limits = Limits {
                algorithm,
                tiers: tiers.iter().map(|&(l, w)| Quota::new(l, w)).collect(),
            };
            all.push((name, limits));
        }
    }
    // Calendar windows: the tiers form, version 2.
    for spec in [
        "10 month TZ Europe/Paris",
        "5 1s 50 day TZ Pacific/Chatham",
        "9 month ANCHOR 31 TZ Asia/Kathmandu",
        "3 week 30 year",
    ] {
        let words: Vec<&[u8]> = spec.split(' ').map(str::as_bytes).collect();
        let parsed = parse_limits(words.into_iter(), &Settings::default()).expect("valid");
        all.push(("calendar", parsed.limits));
    }
    let mut n = 0;
    for (name, limits) in all {
        {
            let mut stored: Option<(Vec<u8>, i64)> = None;
            for step in 0..3 {
                let now = T0 + step * 7;
                let value = stored.as_ref().map(|(v, _)| v.as_slice());
                let expiry = stored.as_ref().map(|(_, e)| *e);
                let outcome =
                    run(&limits, Action::Hit { cost: 2 }, value, || expiry, now).expect("ok");
                if let Write::Set {
                    value,
                    expires_at_ms,
                } = outcome.write
                {
                    stored = Some((value.to_vec(), expires_at_ms));
                }
            }
            let Some((value, expiry)) = stored else {
                continue;
            };
            // flags 0: an expiry follows; hit (flags >> 1 == 0).
            let mut seed = vec![0u8];
            seed.extend_from_slice(&expiry.to_le_bytes());
            seed.extend_from_slice(&(T0 + 30).to_le_bytes());
            seed.extend_from_slice(&1i64.to_le_bytes());
            seed.extend_from_slice(&value);
            std::fs::write(dir.join(format!("seed-{name}-{n}")), seed).expect("written");
            n += 1;
        }
    }
}
