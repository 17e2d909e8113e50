#!/usr/bin/env bash
# Two builds of dedelta on one series of versions, alternated per version so that they share
# the machine's noise: each version (files given in order, each one `backup --stdin` under one
# name) is backed up by build A and by build B into a repository of its own, A first at even
# versions and B first at odd ones. Prints one line per version: per build the process's wall
# milliseconds, the command's own (`seconds` of its JSON summary), the bases read back from the
# repository, and the base-reading stage's milliseconds; then per build the sums over the
# incremental backups (the second version on) and `du -sb` of its repository.
# Usage: scripts/bench-alternate.sh WORKDIR BIN_A BIN_B FILE...
# INIT_FLAGS (environment) is passed to both inits, e.g. INIT_FLAGS=--insecure-no-password
# (plain repositories: chunk ids are not keyed, so the two stores are comparable byte for byte
# up to the snapshots' times). Encrypted repositories use DEDELTA_PASSWORD=bench.
set -euo pipefail
work=$1; a=$2; b=$3; shift 3
[ $# -ge 1 ] || { echo "usage: $0 WORKDIR BIN_A BIN_B FILE..." >&2; exit 2; }
rm -rf "$work"; mkdir -p "$work"
export DEDELTA_PASSWORD=bench
declare -A bin=([A]=$a [B]=$b)
for t in A B; do
  # shellcheck disable=SC2086
  DEDELTA_CACHE_DIR=$work/$t.cache "${bin[$t]}" init -r "$work/$t" ${INIT_FLAGS:-} >/dev/null
done
: > "$work/rows"
i=0
for f in "$@"; do
  cat "$f" > /dev/null  # page cache
  if [ $((i % 2)) = 0 ]; then order="A B"; else order="B A"; fi
  for t in $order; do
    s=$(date +%s%N)
    DEDELTA_CACHE_DIR=$work/$t.cache "${bin[$t]}" backup -r "$work/$t" --stdin --stdin-name data \
      --json < "$f" 2>/dev/null | tail -n1 > "$work/summary.json"
    e=$(date +%s%N)
    python3 - "$i" "$t" $(((e - s) / 1000000)) "$work/summary.json" >> "$work/rows" <<'PY'
import json, sys
v, t, wall, path = sys.argv[1:]
o = json.load(open(path))
print(v, t, wall, round(o["seconds"] * 1000), o["base_cache_misses"],
      round(o["stage_seconds"]["base_read"] * 1000))
PY
  done
  grep "^$i " "$work/rows" | sort -k2 | awk '{printf "%s %s wall=%s in=%s read_back=%s base_read=%s ", ($2=="A"?"v"$1:""), $2, $3, $4, $5, $6} END {print ""}'
  i=$((i + 1))
done
for t in A B; do
  awk -v t="$t" '$2 == t && $1 > 0 {w += $3; c += $4; m += $5; r += $6}
    END {printf "%s incremental: wall %.2f s, in command %.2f s, read back %d, base_read %.2f s; ", t, w/1000, c/1000, m, r/1000}' "$work/rows"
  du -sb "$work/$t" | cut -f1
done
