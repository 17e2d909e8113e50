#!/usr/bin/env bash
# Backs up a series of versions (files given in order, each as one snapshot through --stdin
# under one name) into a fresh repository per configuration, then restores every snapshot and
# compares it bit-exact. Prints one JSON line per configuration.
# Usage: scripts/bench-versions.sh WORKDIR "INIT-FLAGS" FILE...
# The client cache goes to WORKDIR/cache. Prints the repository's du -sb (repo_du_mb) and the cache's.
# BACKUP_FLAGS (environment) is passed to every backup, e.g. BACKUP_FLAGS=--no-cache.
# backup_cpu_s / restore_cpu_s are the user + system CPU seconds of all backups / all dumps: on
# a machine shared with other work they compare configurations better than wall time.
# backup_io / restore_io sum the commands' I/O accounting (requests, bytes, modelled seconds on
# a disk and on an object store; docs/benchmarks.md, "I/O accounting").
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; flags=$2; shift 2
repo="$work/repo"; rm -rf "$repo" "$work/cache"; mkdir -p "$work"
# The client cache (chunk index, base cache) of this fresh repository, beside it.
export DEDELTA_CACHE_DIR="$work/cache"
# shellcheck disable=SC2086
"$bin" init -r "$repo" --insecure-no-password $flags >/dev/null
cat "$@" > /dev/null  # page cache
logical=0; backup_s=0; backup_cpu=0; restore_cpu=0
backup_io='{}'; restore_io='{}'
# Adds the io object of a command's JSON ($2) to the running sums ($1).
add_io() { python3 -c "
import json, sys
s = json.loads(sys.argv[1]); io = json.loads(sys.argv[2])['io']
for k, v in [('requests', io['requests']), ('bytes', io['bytes']),
             ('disk_s', io['modelled_seconds']['disk']),
             ('object_store_s', io['modelled_seconds']['object_store'])]:
    s[k] = s.get(k, 0) + v
print(json.dumps(s))" "$1" "$2"; }
TIMEFORMAT='%U %S'
cpu() { python3 -c "import sys; print(float(sys.argv[1]) + sum(map(float, open(sys.argv[2]).read().split())))" "$1" "$2"; }
for f in "$@"; do
  # shellcheck disable=SC2086
  out=$( { time "$bin" backup -r "$repo" --stdin --stdin-name data.tar --json ${BACKUP_FLAGS:-} < "$f"; } 2> "$work/cpu")
  out=$(printf '%s\n' "$out" | tail -n 1)  # the summary, after the status lines
  backup_cpu=$(cpu "$backup_cpu" "$work/cpu")
  backup_s=$(python3 -c "import json,sys; print($backup_s + json.loads(sys.argv[1])['seconds'])" "$out")
  backup_io=$(add_io "$backup_io" "$out")
  logical=$((logical + $(stat -c %s "$f")))
done
restore_s=0; i=0
ids=$("$bin" snapshots -r "$repo" --json | python3 -c 'import json,sys; print(" ".join(s["id"] for s in json.load(sys.stdin)))')
files=("$@")
for id in $ids; do
  rm -f "$work/restored.tar"  # a restore writes a new file; truncating the last one is not timed
  t0=$(date +%s.%N)
  { time "$bin" dump -r "$repo" "$id" data.tar --io-json > "$work/restored.tar" 2> "$work/io"; } 2> "$work/cpu"
  t1=$(date +%s.%N)
  # Not timed: this python call took 40-80 ms, more than a prettier dump itself.
  restore_io=$(add_io "$restore_io" "$(cat "$work/io")")
  restore_cpu=$(cpu "$restore_cpu" "$work/cpu")
  restore_s=$(python3 -c "print($restore_s + $t1 - $t0)")
  cmp -s "$work/restored.tar" "${files[$i]}" || { echo "MISMATCH in snapshot $id" >&2; exit 1; }
  i=$((i + 1))
done
rm -f "$work/restored.tar" "$work/cpu" "$work/io"
stats=$("$bin" stats -r "$repo" --json)
repo_du=$(du -sb "$repo" | cut -f1); cache_du=$(du -sb "$work/cache" 2>/dev/null | cut -f1 || echo 0)
python3 - "$stats" "$flags" "$logical" "$backup_s" "$restore_s" "${BACKUP_FLAGS:-}" "$repo_du" "$cache_du" "$backup_cpu" "$restore_cpu" "$backup_io" "$restore_io" <<'PY'
import json, sys
s = json.loads(sys.argv[1]); logical = int(sys.argv[3]); b = float(sys.argv[4]); r = float(sys.argv[5])
repo_du = int(sys.argv[7]); cache_du = int(sys.argv[8] or 0)
print(json.dumps({"config": sys.argv[2], "backup_flags": sys.argv[6], "logical_mb": round(logical/1e6, 1), "stored_mb": round(s["stored_bytes"]/1e6, 2),
  "total_factor": round(logical / s["stored_bytes"], 2), "dedup": round(s["dedup_factor"], 2), "dcr": round(s["dcr"], 2),
  "dce": round(s["dce"], 2) if s["dce"] else None, "compression": round(s["compression_factor"], 2), "delta_chunks": s["delta_chunks"],
  "backup_mb_s": round(logical/1e6/b, 1), "restore_mb_s": round(logical/1e6/r, 1),
  "repo_du_mb": round(repo_du/1e6, 2), "cache_du_mb": round(cache_du/1e6, 2),
  "backup_cpu_s": round(float(sys.argv[9]), 2), "restore_cpu_s": round(float(sys.argv[10]), 2),
  "backup_io": json.loads(sys.argv[11]), "restore_io": json.loads(sys.argv[12])}))
PY
