#!/usr/bin/env bash
# The reliability campaign for a time budget, from random seeds, then its figures.
#
#   scripts/campaign.sh [SECONDS]     (default 600)
#
# Runs the fault tests once (module faults of the store's integration binary: every crash
# point of backup, prune and forget; disk-fulls; damaged reads), then the campaign (module
# campaign) for SECONDS with episodes from a random seed (even seeds on the in-memory
# backend, odd ones on a local directory). A failing episode prints
# its replay command and operation log; the run goes on from a new seed until the budget is
# spent, and the failures are listed at the end. SEED=N fixes the first seed.
#
# Profile: the test profile (opt-level 2, see Cargo.toml), which CI builds anyway; set
# CAMPAIGN_PROFILE=release for `--release` (a separate, slower build).
# Logs: target/campaign-logs/. See docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-600}"
profile=()
if [ "${CAMPAIGN_PROFILE:-}" = release ]; then profile=(--release); fi
mkdir -p target/campaign-logs
random_seed() { od -An -N4 -tu4 /dev/urandom | tr -d ' '; }

echo "campaign.sh: fault tests"
cargo test "${profile[@]}" -p dedelta-store --test integration -- faults:: --nocapture \
    >target/campaign-logs/faults.log 2>&1 || {
    grep -E 'panicked|^test .*FAILED' target/campaign-logs/faults.log || true
    echo "campaign.sh: fault tests FAILED (log: target/campaign-logs/faults.log)"
    exit 1
}
grep -E '^(backup|prune|Memory|Local|damage)|points verified|reported|failed naming|^test result' \
    target/campaign-logs/faults.log | grep -v '^test .* \.\.\. ' | sed 's/^/  /' || true

start=$(date +%s)
seed="${SEED:-$(random_seed)}"
failures=()
run=0
while :; do
    left=$(( budget - ($(date +%s) - start) ))
    [ "$left" -gt 0 ] || break
    run=$((run + 1))
    log="target/campaign-logs/campaign-$seed.log"
    echo "campaign.sh: run $run from seed $seed, ${left} s left"
    if DEDELTA_CAMPAIGN_SEED="$seed" DEDELTA_CAMPAIGN_SECONDS="$left" \
        cargo test "${profile[@]}" -p dedelta-store --test integration -- campaign::campaign --exact \
            --nocapture >"$log" 2>&1; then
        echo "  $(grep -c '^episode' "$log") episodes, none failed"
        sed -n '/^campaign:/,/^test /p' "$log" | grep -v '^test '
    else
        replay=$(grep -m1 '^replay:' "$log" || echo "see $log")
        echo "  FAILED: $(grep -m1 'campaign failed' "$log" | cut -c1-300)"
        echo "  $replay"
        failures+=("$replay (log: $log)")
    fi
    seed=$(random_seed)
done

echo
echo "campaign.sh: $run runs in $(( $(date +%s) - start )) s; ${#failures[@]} failed"
for f in "${failures[@]}"; do echo "  $f"; done
[ "${#failures[@]}" -eq 0 ]
