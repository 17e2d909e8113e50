#!/usr/bin/env bash
# Unchanged tree (issue 18 part 3): backs up a tree of N small files (default 100,000, in
# directories of 1,000, 0-8 KiB each, about 400 MB) into one dedelta and one restic repository,
# then backs it up again R times (default 5) with nothing changed, dedelta and restic
# alternating; prints each run's seconds and the medians' ratio. Both find their parent
# themselves (the last snapshot of the same host and paths). Needs restic
# (scripts/install-peers.sh) and a release build (cargo build --release).
# Usage: scripts/bench-unchanged.sh WORKDIR [N] [R]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
D=${DEDELTA_BIN:-${CARGO_TARGET_DIR:-$here/target}/release/dedelta}
work=$1; n=${2:-100000}; r=${3:-5}
mkdir -p "$work"; cd "$work"
if [ ! -f "src.$n.done" ]; then
  rm -rf src
  python3 - "$n" <<'EOF'
import os, random, sys
n = int(sys.argv[1]); rnd = random.Random(18)
for i in range(n):
    d = f"src/d{i // 1000:04d}"
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    with open(f"{d}/f{i:06d}", "wb") as f:
        f.write(rnd.randbytes(rnd.randrange(0, 8192)))
EOF
  touch "src.$n.done"
fi
rm -rf dd dd.cache rs rs.cache
export DEDELTA_CACHE_DIR="$work/dd.cache" DEDELTA_PASSWORD=x RESTIC_PASSWORD=x RESTIC_CACHE_DIR="$work/rs.cache"
$D init -r dd >/dev/null
restic init -r rs -q
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
echo "first backup: dedelta $(secs $D backup -r dd src) s, restic $(secs restic -r rs backup -q src) s"
dd_times=(); rs_times=()
for i in $(seq 1 "$r"); do
  dt=$(secs $D backup -r dd src); rt=$(secs restic -r rs backup -q src)
  dd_times+=("$dt"); rs_times+=("$rt")
  echo "unchanged backup $i: dedelta $dt s, restic $rt s"
done
$D snapshots -r dd --json | python3 -c "
import json,sys; s=json.load(sys.stdin)[-1]['summary']
print('last dedelta summary: files', s['files'], 'unmodified', s['files_unmodified'],
      'read', s['bytes_read'] - s['bytes_unmodified'], 'B, new', s['bytes_new'], 'B, tree', s['tree_bytes'], 'B')"
python3 - "${dd_times[*]}" "${rs_times[*]}" <<'EOF'
import statistics, sys
d = statistics.median(map(float, sys.argv[1].split())); r = statistics.median(map(float, sys.argv[2].split()))
print(f"median: dedelta {d:.3f} s, restic {r:.3f} s; restic / dedelta = {r / d:.2f}x")
EOF
