#!/usr/bin/env bash
# Startup cost (issue 20): the time a command spends before it reads its first input byte,
# on a repository of about 100k chunks and 1,000 snapshots. Builds that repository once in
# WORKDIR (one backup of ~800 MB of unique data, then 999 one-file backups), then times, R
# times each: `backup` of a 1-byte file (everything a backup does before and after reading
# one byte: open, lock, index, parent snapshot, seal, snapshot write), `snapshots`, and
# `ls latest`. Prints one JSON line with the median wall seconds of each.
# Usage: scripts/bench-startup.sh WORKDIR [R]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; runs=${2:-7}
repo="$work/repo"; export DEDELTA_CACHE_DIR="$work/cache"
mkdir -p "$work/src"
if [ ! -f "$work/built" ]; then
  rm -rf "$repo" "$work/cache"
  # shellcheck disable=SC2086
  "$bin" init -r "$repo" --insecure-no-password ${INIT_FLAGS:-} >/dev/null
  head -c 600000000 /dev/urandom | base64 -w 0 > "$work/big"
  "$bin" backup -r "$repo" --stdin --stdin-name big < "$work/big" >/dev/null
  rm -f "$work/big"
  for i in $(seq 1 999); do
    echo "$i" > "$work/src/f"
    "$bin" backup -r "$repo" "$work/src" >/dev/null
  done
  touch "$work/built"
fi
echo x > "$work/src/f"
median() { python3 -c 'import sys,statistics; print(round(statistics.median(map(float, sys.argv[1:])), 4))' "$@"; }
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); python3 -c "print($e - $s)"; }
b=(); s=(); l=()
for _ in $(seq 1 "$runs"); do
  b+=("$(t "$bin" backup -r "$repo" "$work/src")")
  s+=("$(t "$bin" snapshots -r "$repo")")
  l+=("$(t "$bin" ls -r "$repo" latest)")
done
chunks=$("$bin" stats -r "$repo" --json | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s.get("distinct_chunks", s.get("chunks", 0)))')
snaps=$("$bin" snapshots -r "$repo" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
echo "{\"chunks\": $chunks, \"snapshots\": $snaps, \"backup_1_byte_s\": $(median "${b[@]}"), \"snapshots_s\": $(median "${s[@]}"), \"ls_latest_s\": $(median "${l[@]}")}"
