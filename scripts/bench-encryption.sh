#!/usr/bin/env bash
# The cost of encryption: backs up a series of versions (files given in order, each as one
# snapshot through --stdin) into a plain repository (init --insecure-no-password) and an
# encrypted one, interleaved per version (the order alternating), then restores every
# snapshot of both, interleaved the same way. Prints per mode the backup and restore MB/s
# (over wall time and over user + system CPU time) and the repository size, then the
# encrypted/plain ratios. Usage: scripts/bench-encryption.sh WORKDIR FILE...
# DEDELTA_BIN picks the binary (default target/release/dedelta); ROUNDS (default 1) repeats
# the whole run.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; shift
rounds=${ROUNDS:-1}
TIMEFORMAT='%R %U %S'
: > "$work/times" 2>/dev/null || { mkdir -p "$work"; : > "$work/times"; }
for round in $(seq "$rounds"); do
  for m in plain enc; do
    rm -rf "${work:?}/$m" "$work/$m.cache"
    flags=(--insecure-no-password)
    [ "$m" = enc ] && flags=()
    DEDELTA_PASSWORD=bench DEDELTA_CACHE_DIR="$work/$m.cache" \
      "$bin" init -r "$work/$m" "${flags[@]}" >/dev/null
  done
  i=0
  for f in "$@"; do
    size=$(stat -c %s "$f")
    order="plain enc"; [ $((i % 2)) = 1 ] && order="enc plain"
    for m in $order; do
      { time DEDELTA_PASSWORD=bench DEDELTA_CACHE_DIR="$work/$m.cache" \
          "$bin" backup -r "$work/$m" --stdin --stdin-name data.tar < "$f" > /dev/null; } 2> "$work/t"
      echo "backup $m $size $(cat "$work/t")" >> "$work/times"
    done
    i=$((i + 1))
  done
  i=0
  ids_plain=$(DEDELTA_CACHE_DIR="$work/plain.cache" "$bin" snapshots -r "$work/plain" --json | python3 -c 'import json,sys; print(" ".join(s["id"] for s in json.load(sys.stdin)))')
  ids_enc=$(DEDELTA_PASSWORD=bench DEDELTA_CACHE_DIR="$work/enc.cache" "$bin" snapshots -r "$work/enc" --json | python3 -c 'import json,sys; print(" ".join(s["id"] for s in json.load(sys.stdin)))')
  read -r -a ip <<< "$ids_plain"; read -r -a ie <<< "$ids_enc"
  for k in "${!ip[@]}"; do
    order="plain enc"; [ $((k % 2)) = 1 ] && order="enc plain"
    for m in $order; do
      id=${ip[$k]}; [ "$m" = enc ] && id=${ie[$k]}
      rm -rf "$work/out"
      { time DEDELTA_PASSWORD=bench DEDELTA_CACHE_DIR="$work/$m.cache" \
          "$bin" restore -r "$work/$m" "$id" --target "$work/out" > /dev/null; } 2> "$work/t"
      size=$(du -sb "$work/out" | cut -f1)
      echo "restore $m $size $(cat "$work/t")" >> "$work/times"
    done
  done
  for m in plain enc; do echo "size $m $(du -sb "$work/$m" | cut -f1) 0 0 0" >> "$work/times"; done
done
python3 - "$work/times" <<'PY'
import sys, collections
t = collections.defaultdict(lambda: [0, 0.0, 0.0])
for line in open(sys.argv[1]):
    op, m, b, wall, u, s = line.split()
    x = t[(op, m)]
    x[0] += int(b); x[1] += float(wall); x[2] += float(u) + float(s)
for op in ("backup", "restore"):
    for m in ("plain", "enc"):
        b, w, c = t[(op, m)]
        print(f"{op:8} {m:6} {b/1e6:9.1f} MB  {b/1e6/w:7.1f} MB/s wall  {b/1e6/c:7.1f} MB/s CPU")
    (bp, wp, cp), (be, we, ce) = t[(op, "plain")], t[(op, "enc")]
    print(f"{op:8} encrypted/plain: wall time x{we/wp:.3f}, CPU time x{ce/cp:.3f}")
sp, se = t[("size", "plain")][0], t[("size", "enc")][0]
print(f"repository bytes: plain {sp}, encrypted {se} (x{se/sp:.4f})")
PY
