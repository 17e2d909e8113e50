#!/usr/bin/env bash
# Startup cost (issue 20): the time a command spends before it reads its first input byte,
# on a repository of about 100k chunks and 1,000 snapshots. Builds that repository once in
# WORKDIR (one backup of ~800 MB of unique data, then 999 one-file backups), then times, R
# times each: `backup` of a 1-byte file (everything a backup does before and after reading
# one byte: open, lock, index, parent snapshot, seal, snapshot write), `snapshots`, and
# `ls latest`. Prints one JSON line with the median wall seconds of each, and the median CPU
# seconds (user + system: what a loaded machine does not inflate).
# With COMPARE_BIN=OTHER_BINARY, times that binary too, alternating with DEDELTA_BIN in the
# same loop, and prints a line for each (a before/after comparison in one run).
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
bins=("$bin"); [ -n "${COMPARE_BIN:-}" ] && bins+=("$COMPARE_BIN")
# Runs R rounds of (backup, snapshots, ls latest) for each binary in turn; prints per binary
# one JSON line of medians (wall and CPU seconds).
python3 - "$repo" "$work/src" "$runs" "${bins[@]}" <<'PY'
import json, os, resource, statistics, subprocess, sys, time
repo, src, runs, bins = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
def timed(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu
results = {b: {"backup_1_byte": [], "snapshots": [], "ls_latest": []} for b in bins}
for i in range(runs):
    for b in bins:
        with open(os.path.join(src, "f"), "w") as f:
            f.write(f"{i}\n")
        r = results[b]
        r["backup_1_byte"].append(timed([b, "backup", "-r", repo, src]))
        r["snapshots"].append(timed([b, "snapshots", "-r", repo]))
        r["ls_latest"].append(timed([b, "ls", "-r", repo, "latest"]))
for b in bins:
    out = {"bin": b}
    for k, v in results[b].items():
        out[f"{k}_s"] = round(statistics.median(w for w, _ in v), 4)
        out[f"{k}_cpu_s"] = round(statistics.median(c for _, c in v), 4)
    print(json.dumps(out))
PY
chunks=$("$bin" stats -r "$repo" --json | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s.get("distinct_chunks", s.get("chunks", 0)))')
snaps=$("$bin" snapshots -r "$repo" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
echo "{\"chunks\": $chunks, \"snapshots\": $snaps}"
