#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ on this stable toolchain.
#   scripts/fuzz.sh [run] [target ...]   each target for FUZZ_SECONDS (default 60) in turn
#   scripts/fuzz.sh cmin [target ...]    fold fuzz/work/<t> into fuzz/corpus/<t>, minimised
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
            # cmin keeps the smallest set of files covering what the union covers.
            cp -n "fuzz/work/$target"/* "fuzz/corpus/$target"/ 2>/dev/null || true
            fuzz cmin "$target" "fuzz/corpus/$target"
            ;;
    esac
done
