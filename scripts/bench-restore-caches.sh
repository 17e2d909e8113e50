#!/usr/bin/env bash
# Restore caches compared on one repository: backs up a series of versions (files given in
# order, each as one snapshot through --stdin), then restores every snapshot through each cache
# given in CACHES (environment; `;`-separated restore flags, "" the default cache) and prints,
# per cache, one JSON line: the speed factor over the series (MB restored / containers read,
# summed over the snapshots) and the mean of the versions' factors, containers and regions
# read, restore MB/s over wall time and the user + system CPU seconds of all the restores.
# Caches run interleaved per snapshot, so that other work on the machine hits them alike.
# Usage: scripts/bench-restore-caches.sh WORKDIR "INIT-FLAGS" FILE...
# DEDELTA_BIN picks the binary (default target/release/dedelta). With BASE_BIN (another build,
# e.g. main's), every snapshot is also dumped ROUNDS (default 2) times by each binary with its
# default cache, interleaved, and one more line compares their dump MB/s and CPU seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; flags=$2; shift 2
repo="$work/repo"; rm -rf "$repo" "$work/cache" "$work/out"; mkdir -p "$work"
export DEDELTA_CACHE_DIR="$work/cache"
# shellcheck disable=SC2086
"$bin" init -r "$repo" --insecure-no-password $flags >/dev/null
for f in "$@"; do
  "$bin" backup -r "$repo" --stdin --stdin-name data.tar --json < "$f" > /dev/null
done
IFS=';' read -r -a caches <<< "${CACHES:---cache lru;--cache forward}"
ids=$("$bin" snapshots -r "$repo" --json | python3 -c 'import json,sys; print(" ".join(s["id"] for s in json.load(sys.stdin)))')
TIMEFORMAT='%U %S'
: > "$work/results.jsonl"
for id in $ids; do
  for k in "${!caches[@]}"; do
    rm -rf "$work/out"
    # shellcheck disable=SC2086
    { time "$bin" restore -r "$repo" "$id" --target "$work/out" --json ${caches[$k]} > "$work/r.json"; } 2> "$work/cpu"
    python3 - "$k" "${caches[$k]}" "$work/r.json" "$work/cpu" >> "$work/results.jsonl" <<'PY'
import json, sys
r = json.load(open(sys.argv[3])); cpu = sum(map(float, open(sys.argv[4]).read().split()))
c = r["restore_cache"]
print(json.dumps({"k": int(sys.argv[1]), "cache": sys.argv[2], "bytes": r["bytes_written"], "secs": r["seconds"],
  "cpu": cpu, "containers_read": c["containers_read"], "regions_read": c["regions_read"],
  "max_held": c["max_containers_held"], "areas": c["areas"], "sf": r["speed_factor"]}))
PY
  done
done
rm -rf "$work/out" "$work/r.json" "$work/cpu"
if [ -n "${BASE_BIN:-}" ]; then
  declare -A cpu=([base]=0 [new]=0) wall=([base]=0 [new]=0)
  bytes=0
  for _ in $(seq "${ROUNDS:-2}"); do
    for id in $ids; do
      for which in base new; do
        b=$bin; [ "$which" = base ] && b=$BASE_BIN
        t0=$(date +%s.%N)
        { time "$b" dump -r "$repo" "$id" data.tar > "$work/dumped.tar"; } 2> "$work/cpu"
        t1=$(date +%s.%N)
        cpu[$which]=$(python3 -c "import sys; print(float(sys.argv[1]) + sum(map(float, open(sys.argv[2]).read().split())))" "${cpu[$which]}" "$work/cpu")
        wall[$which]=$(python3 -c "print(${wall[$which]} + $t1 - $t0)")
      done
      bytes=$((bytes + $(stat -c %s "$work/dumped.tar")))
    done
  done
  rm -f "$work/dumped.tar" "$work/cpu"
  python3 -c "import json,sys; b=int(sys.argv[1]); print(json.dumps({'dump_mb': round(b/1e6,1), 'base_mb_s': round(b/1e6/float(sys.argv[2]),1), 'new_mb_s': round(b/1e6/float(sys.argv[3]),1), 'base_cpu_s': round(float(sys.argv[4]),2), 'new_cpu_s': round(float(sys.argv[5]),2)}))" "$bytes" "${wall[base]}" "${wall[new]}" "${cpu[base]}" "${cpu[new]}"
fi
python3 - "$work/results.jsonl" <<'PY'
import json, sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line); rows[(r["k"], r["cache"])].append(r)
for (k, cache), rs in sorted(rows.items()):
    b = sum(r["bytes"] for r in rs); c = sum(r["containers_read"] for r in rs)
    sfs = [r["sf"] for r in rs if r["sf"] is not None]
    print(json.dumps({"cache": cache or "(default)", "snapshots": len(rs), "restored_mb": round(b / 1e6, 1),
      "containers_read": c, "regions_read": sum(r["regions_read"] for r in rs),
      "max_containers_held": max(r["max_held"] for r in rs), "areas": sum(r["areas"] for r in rs),
      "speed_factor": round(b / 1e6 / c, 2) if c else None,
      "mean_speed_factor": round(sum(sfs) / len(sfs), 2) if sfs else None,
      "restore_mb_s": round(b / 1e6 / sum(r["secs"] for r in rs), 1),
      "restore_cpu_s": round(sum(r["cpu"] for r in rs), 2)}))
PY
