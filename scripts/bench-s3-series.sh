#!/usr/bin/env bash
# Alternates builds on one running object store: for each round and each build, a fresh S3
# repository, four cumulative backups of the SQLAlchemy tars (5, 10, 15 and 20 versions, as
# `bench-s3.sh` with STEP=5), each timed; prints a line per series and the means (backup 1,
# backups 2-4, all four). Issue 19's held-cluster comparisons in docs/benchmarks.md: one
# cluster's stalls vary over minutes, so builds are compared in the same minutes, not in
# separate `garage-cluster.sh BENCH=4` runs. With ENDPOINT (a Garage node, AWS_* set, BUCKET
# existing) it uses that store; without, moto (see s3-endpoint.sh).
# Usage: scripts/bench-s3-series.sh WORKDIR ROUNDS BIN...   (env: ENDPOINT, BUCKET, DATA)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=$1; rounds=$2; shift 2
data=${DATA:-$HOME/.cache/dedelta-eval/sqla}
mkdir -p "$work"
# shellcheck source=scripts/s3-endpoint.sh
. "$here/scripts/s3-endpoint.sh"
tars=$(ls "$data"/*.tar | sort -V)
run=series$(date +%s)
for r in $(seq "$rounds"); do
  for b in "$@"; do
    name=$(basename "$b")-$r
    w=$work/$name; rm -rf "$w"; mkdir -p "$w/src"
    repo=s3:$ENDPOINT/$BUCKET/$run/$name
    DEDELTA_CACHE_DIR=$w/cache "$b" init -r "$repo" --insecure-no-password >/dev/null
    line="$(basename "$b")"
    for i in 1 2 3 4; do
      # Hard links: the same files (and times) for every series, no copies on the disk.
      for f in $(echo "$tars" | head -n $((i * 5))); do
        [ -e "$w/src/${f##*/}" ] || ln "$f" "$w/src/" 2>/dev/null || cp "$f" "$w/src/"
      done
      t=$( { /usr/bin/time -f "%e" env DEDELTA_CACHE_DIR="$w/cache" \
        "$b" backup -r "$repo" "$w/src" -q; } 2>&1 | tail -1)
      line="$line $t"
    done
    echo "$line"
    rm -rf "$w"
  done
done | awk '{print; b1[$1]+=$2; rest[$1]+=$3+$4+$5; n[$1]++}
  END {for (k in n) printf "%s: mean backup 1 %.3f s, backups 2-4 %.3f s, all %.3f s (%d series)\n",
       k, b1[k]/n[k], rest[k]/n[k], (b1[k]+rest[k])/n[k], n[k]}'
