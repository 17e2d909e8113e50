#!/usr/bin/env bash
# Unique data at scale (issue 14): N backups (default 8) of 500 MB of new base64 text each
# into one dedelta and one restic repository; prints each backup's seconds and peak RSS (KiB),
# the repositories' du -sb and the size of dedelta's client index. Needs restic
# (scripts/install-peers.sh) and about N x 1.3 GB free in WORKDIR.
# Usage: scripts/bench-unique.sh WORKDIR [N]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
D=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; n=${2:-8}
mkdir -p "$work"; cd "$work"
rm -rf dd dd.cache rs src; mkdir -p src
export DEDELTA_CACHE_DIR="$work/dd.cache" DEDELTA_PASSWORD=x RESTIC_PASSWORD=x
$D init -r dd >/dev/null
restic init -r rs -q
for i in $(seq 1 "$n"); do
  rm -f src/*; head -c 375000000 /dev/urandom | base64 -w 76 > src/u$i.txt
  cat src/u$i.txt > /dev/null
  dt=$( { /usr/bin/time -f "%e %M" $D backup -r dd src >/dev/null; } 2>&1 | tail -1)
  rt=$( { /usr/bin/time -f "%e %M" restic -r rs backup -q src >/dev/null; } 2>&1 | tail -1)
  idx=$(cat dd.cache/*/chunks.idx dd.cache/*/chunks.idx.*.run | wc -c)
  echo "backup $i: dedelta s,maxrss_kb $dt repo $(du -sb dd | cut -f1) index $idx | restic $rt repo $(du -sb rs | cut -f1)"
done
$D stats -r dd --json | python3 -c "import json,sys; s=json.load(sys.stdin); print('chunks', s['chunks'], 'index B/chunk', s['index_bytes']/s['chunks'])"
