#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a time budget each and summarises runs and findings.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 60)
#
# Needs a nightly toolchain and cargo-fuzz; installs either if missing (saying so). Corpora
# grow in fuzz/corpus/<target>, crashes land in fuzz/artifacts/<target>/ (both git-ignored);
# logs are in target/fuzz-logs/. Exits 1 if any target found a crash. See docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
per_target="${1:-60}"

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: no nightly toolchain: running 'rustup toolchain install nightly --profile minimal'"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-fuzz missing: running 'cargo install cargo-fuzz --locked'"
    cargo install cargo-fuzz --locked
fi

targets=$(cargo +nightly fuzz list)
echo "fuzz.sh: $(echo "$targets" | wc -w) targets, ${per_target} s each: $(echo $targets)"
mkdir -p target/fuzz-logs
# Build once, so that each target's budget is spent fuzzing, not compiling.
cargo +nightly fuzz build >target/fuzz-logs/build.log 2>&1 || {
    tail -30 target/fuzz-logs/build.log
    echo "fuzz.sh: build failed (log: target/fuzz-logs/build.log)"
    exit 2
}

summary=()
found=0
for t in $targets; do
    log="target/fuzz-logs/$t.log"
    mkdir -p "fuzz/artifacts/$t"
    before=$(ls "fuzz/artifacts/$t" | wc -l)
    status=ok
    if ! cargo +nightly fuzz run "$t" -- -max_total_time="$per_target" -print_final_stats=1 >"$log" 2>&1; then
        status=FAILED
    fi
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    corpus=$(ls "fuzz/corpus/$t" 2>/dev/null | wc -l)
    new=$(( $(ls "fuzz/artifacts/$t" | wc -l) - before ))
    if [ "$status" = FAILED ] || [ "$new" -gt 0 ]; then
        found=1
        status="FOUND: $(grep -m1 -E 'panicked at|ERROR: libFuzzer|SUMMARY' "$log" || echo "see $log")"
    fi
    line=$(printf '%-16s runs %10s  corpus %6s  new artifacts %2s  %s' "$t" "${runs:-?}" "$corpus" "$new" "$status")
    echo "$line"
    summary+=("$line")
done

echo
echo "fuzz.sh summary (${per_target} s per target; logs in target/fuzz-logs/):"
printf '%s\n' "${summary[@]}"
exit "$found"
