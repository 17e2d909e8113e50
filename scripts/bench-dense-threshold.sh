#!/usr/bin/env bash
# LoopDelta's dense threshold (issue 17; LoopDelta Fig. 6-7): backs up a series of versions
# (files in order, each through --stdin under one name, so one lineage) into a fresh
# `--preset loopdelta` repository per threshold, and prints per threshold the bytes added,
# the bytes read whole by base prefetching, the deltas kept and the base reads (always 0).
# Usage: scripts/bench-dense-threshold.sh WORKDIR "THRESHOLDS" FILE...
#   e.g. scripts/bench-dense-threshold.sh /tmp/sweep "0 0.1 0.2 0.3 0.5" \
#          ~/.cache/dedelta-eval/redis-s1-v10-k200000-u0.03-i0.01-d0.005-lzf/*.rdb
# BACKUP_FLAGS (environment) goes to every backup (default: a fingerprint cache of 16
# containers).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; thresholds=$2; shift 2
flags=${BACKUP_FLAGS:---fingerprint-index locality --fingerprint-cache-containers 16}
mkdir -p "$work"
export DEDELTA_CACHE_DIR="$work/cache"
for t in $thresholds; do
  repo="$work/repo-$t"; rm -rf "$repo" "$work/cache"
  "$bin" init -r "$repo" --insecure-no-password --preset loopdelta --dense-threshold "$t" >/dev/null
  added=0; prefetched=0; deltas=0; base=0
  for f in "$@"; do
    # shellcheck disable=SC2086
    "$bin" backup -r "$repo" $flags --stdin --stdin-name series --json <"$f" >"$work/last.json"
    read -r a p d b < <(python3 -c "
import json, sys
v = json.load(open(sys.argv[1])); io = v['io']['purposes']
print(v['bytes_added'], io['prefetch']['read']['bytes'], v['delta_chunks'], io['base_reads']['requests'])
" "$work/last.json")
    added=$((added + a)); prefetched=$((prefetched + p)); deltas=$((deltas + d)); base=$((base + b))
  done
  echo "{\"dense_threshold\": $t, \"bytes_added\": $added, \"prefetched_bytes\": $prefetched, \"delta_chunks\": $deltas, \"base_read_requests\": $base}"
  rm -rf "$repo"
done
