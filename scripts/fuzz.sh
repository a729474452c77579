#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ on this stable toolchain.
#   scripts/fuzz.sh [run] [target ...]   each target for FUZZ_SECONDS (default 60) in turn
#   scripts/fuzz.sh cmin [target ...]    fold fuzz/work/<t> into fuzz/corpus/<t>, minimised
#                                        (edge coverage; named files, i.e. seeds and
#                                        regressions, always stay)
#   scripts/fuzz.sh list                 the targets
# No target: all of them. Installs cargo-fuzz if missing (CI starts from a fresh machine).
# cargo-fuzz passes nightly-only flags (-Z sanitizer, sancov passes); RUSTC_BOOTSTRAP=1 lets
# stable rustc accept them. FUZZ_SANITIZER=address (default) or none (about twice as fast;
# the code under test has no unsafe, its dependencies do). A run grows fuzz/work/<t>
# (ignored by git), seeded from the committed fuzz/corpus/<t>; crashes land in
# fuzz/artifacts/<t>/ and make the script fail.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
seconds=${FUZZ_SECONDS:-60}
sanitizer=${FUZZ_SANITIZER:-address}
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

all_targets() { cargo fuzz list --fuzz-dir fuzz; }

command=run
case "${1:-}" in
    run | cmin | list) command=$1; shift ;;
esac
if [ "$command" = list ]; then all_targets; exit 0; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(all_targets)

fuzz() { cargo fuzz "$1" --fuzz-dir fuzz --features libfuzzer --sanitizer "$sanitizer" "${@:2}"; }

for target in "${targets[@]}"; do
    case "$command" in
        run)
            mkdir -p "fuzz/work/$target"
            echo "== $target: ${seconds}s"
            fuzz run "$target" "fuzz/work/$target" "fuzz/corpus/$target" -- \
                -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1
            ;;
        cmin)
            fuzz build "$target"
            binary="${CARGO_TARGET_DIR:-target}/$(rustc -vV | sed -n 's/^host: //p')/release/$target"
            minimised=$(mktemp -d)
            # Files not named by their hash were put there by hand: they stay.
            find "fuzz/corpus/$target" -type f -regextype posix-extended ! -regex '.*/[0-9a-f]{40}' \
                -exec cp {} "$minimised"/ \;
            # Edges only (no hit counts): the fewest files that reach every line reached.
            "$binary" -merge=1 -use_counters=0 "$minimised" \
                "fuzz/corpus/$target" "fuzz/work/$target" 2>&1 | grep -E '^MERGE-OUTER: [0-9]+ new files'
            rm -rf "fuzz/corpus/$target"
            mv "$minimised" "fuzz/corpus/$target"
            chmod 755 "fuzz/corpus/$target"
            ;;
    esac
done
