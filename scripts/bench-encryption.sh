#!/usr/bin/env bash
# The cost of encryption: backs up a series of versions (files given in order, each as one
# snapshot through --stdin) into three repositories: plain (init --insecure-no-password),
# enc (encrypted, the default Argon2id parameters) and enc-kdf0 (encrypted, the smallest
# Argon2id parameters: the cost of sealing alone, without the password's fixed cost per
# command), interleaved per version (the order rotating), then restores every snapshot of
# each, interleaved the same way. Prints per mode the backup and restore MB/s (over wall time
# and over user + system CPU time) and the repository size, then the ratios to plain.
# Usage: scripts/bench-encryption.sh WORKDIR FILE...
# DEDELTA_BIN picks the binary (default target/release/dedelta); ROUNDS (default 1) repeats
# the whole run.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; shift
rounds=${ROUNDS:-1}
TIMEFORMAT='%R %U %S'
# The three modes, in an order rotating with $1.
rotate() {
  case $(($1 % 3)) in
    0) echo plain enc enc-kdf0 ;;
    1) echo enc enc-kdf0 plain ;;
    *) echo enc-kdf0 plain enc ;;
  esac
}
: > "$work/times" 2>/dev/null || { mkdir -p "$work"; : > "$work/times"; }
for round in $(seq "$rounds"); do
  for m in plain enc enc-kdf0; do
    rm -rf "${work:?}/$m" "$work/$m.cache"
    flags=(--insecure-no-password)
    [ "$m" = enc ] && flags=()
    [ "$m" = enc-kdf0 ] && flags=(--insecure-kdf)
    DEDELTA_PASSWORD=bench DEDELTA_CACHE_DIR="$work/$m.cache" \
      "$bin" init -r "$work/$m" "${flags[@]}" >/dev/null
  done
  i=0
  for f in "$@"; do
    size=$(stat -c %s "$f")
    order=$(rotate $i)
    for m in $order; do
      { time DEDELTA_PASSWORD=bench DEDELTA_CACHE_DIR="$work/$m.cache" \
          "$bin" backup -r "$work/$m" --stdin --stdin-name data.tar < "$f" > /dev/null; } 2> "$work/t"
      echo "backup $m $size $(cat "$work/t")" >> "$work/times"
    done
    i=$((i + 1))
  done
  declare -A ids
  for m in plain enc enc-kdf0; do
    ids[$m]=$(DEDELTA_PASSWORD=bench DEDELTA_CACHE_DIR="$work/$m.cache" "$bin" snapshots -r "$work/$m" --json | python3 -c 'import json,sys; print(" ".join(s["id"] for s in json.load(sys.stdin)))')
  done
  read -r -a ip <<< "${ids[plain]}"
  for k in "${!ip[@]}"; do
    for m in $(rotate "$k"); do
      read -r -a these <<< "${ids[$m]}"
      id=${these[$k]}
      rm -rf "$work/out"
      { time DEDELTA_PASSWORD=bench DEDELTA_CACHE_DIR="$work/$m.cache" \
          "$bin" restore -r "$work/$m" "$id" --target "$work/out" > /dev/null; } 2> "$work/t"
      size=$(du -sb "$work/out" | cut -f1)
      echo "restore $m $size $(cat "$work/t")" >> "$work/times"
    done
  done
  for m in plain enc enc-kdf0; do echo "size $m $(du -sb "$work/$m" | cut -f1) 0 0 0" >> "$work/times"; done
done
python3 - "$work/times" <<'PY'
import sys, collections
t = collections.defaultdict(lambda: [0, 0.0, 0.0])
for line in open(sys.argv[1]):
    op, m, b, wall, u, s = line.split()
    x = t[(op, m)]
    x[0] += int(b); x[1] += float(wall); x[2] += float(u) + float(s)
modes = ("plain", "enc", "enc-kdf0")
for op in ("backup", "restore"):
    bp, wp, cp = t[(op, "plain")]
    for m in modes:
        b, w, c = t[(op, m)]
        print(f"{op:8} {m:8} {b/1e6:9.1f} MB  {b/1e6/w:7.1f} MB/s wall  {b/1e6/c:7.1f} MB/s CPU"
              f"  time/plain: wall x{w/wp:.3f}, CPU x{c/cp:.3f}")
sp = t[("size", "plain")][0]
for m in modes:
    print(f"repository bytes {m:8} {t[('size', m)][0]:>12} (x{t[('size', m)][0]/sp:.4f})")
PY
