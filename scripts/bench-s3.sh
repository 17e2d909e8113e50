#!/usr/bin/env bash
# Backup and restore throughput on S3 against the local backend, same data, interleaved
# (issue 19's target: S3 at >= 70% of local). Starts moto_server (or uses ENDPOINT, e.g. a
# Garage node, with AWS_* credentials set and bucket BUCKET existing) on 127.0.0.1; backs up
# N versions (default 4) of the SQLAlchemy tars (~/.cache/dedelta-eval/sqla, see
# scripts/datasets.sh) into a fresh local and a fresh S3 repository in turn, then restores the
# last into a fresh directory from each, with an empty client cache each time. With STEP=K,
# backup i holds the first i*K tars (cumulative: more data per run, so that throughput, not
# per-request latency, decides). Each backup line also gives both sides' requests (`backup
# --json`'s io: all of them, base reads, container metadata) and CPU seconds (user + system).
# With OLD_BIN (another build), that binary backs up and restores into a third repository (on
# S3) in the same rounds, interleaved: old and new compared under the same load.
# With TRACE_DIR, the new binary's S3 commands write request traces there
# (DEDELTA_S3_TRACE: backup-I.trace, restore-K.trace).
# Restores write to a fresh directory on tmpfs (RESTORE_DIR, default /dev/shm), removed after
# each round: on a disk, a restore's time was mostly the page cache's and writeback's state
# left by the commands before it (identical local restores varied 0.96-2.84 s of system time),
# the same for both sides only by chance. CPU is given as user + system.
# Usage: scripts/bench-s3.sh WORKDIR [N]   (env: DEDELTA_BIN, OLD_BIN, ENDPOINT, BUCKET,
# CONNECTIONS, STEP, TRACE_DIR, RESTORE_DIR)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
D=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; n=${2:-4}
data=${DATA:-$HOME/.cache/dedelta-eval/sqla}
mkdir -p "$work"; cd "$work"
rm -rf local cache-* out-* src; mkdir -p src
# shellcheck source=scripts/s3-endpoint.sh
. "$here/scripts/s3-endpoint.sh"
prefix=run$(date +%s)
s3="s3:$ENDPOINT/$BUCKET/$prefix"
conn=()
[ -n "${CONNECTIONS:-}" ] && conn=(--connections "$CONNECTIONS")
$D init -r local --insecure-no-password >/dev/null
$D init -r "$s3" --insecure-no-password "${conn[@]}" >/dev/null
O=${OLD_BIN:-}
s3old="$s3-old"
[ -n "$O" ] && $O init -r "$s3old" --insecure-no-password "${conn[@]}" >/dev/null
mb() { du -sb src | awk '{printf "%.1f", $1/1e6}'; }
# Runs a backup or restore; prints "WALL_S CPU_S REQUESTS BASE_READS META_READS BASE_READ_S"
# (CPU_S as USER+SYS; from --json: BASE_READ_S is the dedup thread's time finding and reading
# bases, the stage table's base_read).
# Each command starts with no dirty pages (`sync`, untimed): otherwise a restore pays for
# writing back the 1.2 GB the one before it left in the page cache (measured: the second of
# two restores took 1.5-2.5x as long, whichever went second).
# Before each timed command, memory is written and freed (untimed, WARM_MB, default 2048, 0
# for none): this machine's kernel reports freed memory to the hypervisor after about 2 s
# (page_reporting), and the next first touch of each such page is a fault the hypervisor
# serves, which made one command's system time range over 0.6-3.7 s, by where its pages
# came from. Memory freed just before is reused instead (measured: 0.44-0.84 s).
warm() {
  local f="${RESTORE_DIR:-/dev/shm}/dedelta-bench-warm"
  [ "${WARM_MB:-2048}" -gt 0 ] || return 0
  head -c "${WARM_MB:-2048}M" /dev/zero > "$f"; rm -f "$f"
}
tb() {
  sync
  warm
  /usr/bin/time -o "$work/time" -f '%e %U %S' "$@" --json > "$work/out.json"
  python3 - "$work/time" "$work/out.json" <<'PY'
import json, sys
e, u, s = map(float, open(sys.argv[1]).read().split()[-3:])
io = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])['io']
p = io['purposes']
v = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
b = v.get('stage_seconds', {}).get('base_read', 0)
print(f"{e:.2f} {u:.2f}+{s:.2f} {io['requests']} {p['base_reads']['requests']} {p['container_metadata']['requests']} {b:.2f}")
PY
}
# The trace file of S3 command $1 under TRACE_DIR, or nothing.
trace() { [ -n "${TRACE_DIR:-}" ] && mkdir -p "$TRACE_DIR" && echo "$TRACE_DIR/$1.trace"; return 0; }
step=${STEP:-0}
tars=$(ls "$data"/*.tar | sort -V)
for i in $(seq "$n"); do
  if [ "$step" -gt 0 ]; then
    for f in $(echo "$tars" | head -n $((i * step))); do [ -e "src/${f##*/}" ] || cp "$f" src/; done
  else
    rm -f src/*; cp "$(echo "$tars" | sed -n "${i}p")" src/
  fi
  cat src/* >/dev/null
  read -r lt lc lr lb lm lbs < <(DEDELTA_CACHE_DIR=$work/cache-l tb $D backup -r local src)
  read -r st sc sr sb sm sbs < <(DEDELTA_S3_TRACE=$(trace "backup-$i") DEDELTA_CACHE_DIR=$work/cache-s tb $D backup -r "$s3" "${conn[@]}" src)
  echo "backup $i ($(mb) MB): local ${lt}s s3 ${st}s; cpu local ${lc}s s3 ${sc}s;" \
    "base_read stage local ${lbs}s s3 ${sbs}s;" \
    "requests local $lr (base reads $lb, metadata $lm) s3 $sr (base reads $sb, metadata $sm)"
  if [ -n "$O" ]; then
    read -r ot oc or ob om obs < <(DEDELTA_CACHE_DIR=$work/cache-o tb $O backup -r "$s3old" "${conn[@]}" src)
    echo "backup $i old binary: s3 ${ot}s; cpu ${oc}s; base_read stage ${obs}s; requests $or (base reads $ob, metadata $om)"
  fi
done
rdir=$(mktemp -d "${RESTORE_DIR:-/dev/shm}/dedelta-bench-restore.XXXXXX")
# (s3-endpoint.sh's trap stops moto: kept.)
trap 'rm -rf "$rdir"; ${moto:+kill $moto}' EXIT
# Each restore writes into memory the one before it freed: on a virtual machine the first
# touch of memory the guest never used costs several times a reuse (scripts/fresh-memory.sh),
# and when the local restore's tree stayed while the S3 restore wrote its own, the S3 restore
# alone paid that (restore 1: 4.75 s against 1.85-2.26 for restore 2, 3.7 s of it system
# time). So one untimed restore first, and every restore's tree is checked against the
# first's digests and removed before the next restore.
sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
DEDELTA_CACHE_DIR=$work/cache-rw $D restore -r local latest --target "$rdir/w" >/dev/null
sums "$rdir/w" > "$work/restore.sums"
rm -rf "${rdir:?}/w" cache-rw
same() { (cd "$1" && sha256sum --quiet -c "$work/restore.sums") >/dev/null && rm -rf "${1:?}"; }
# The old binary's restore (with OLD_BIN): after the new one's in round 1, before it (right
# after the local one) in round 2, so that neither build always follows the same command
# (measured: in the fixed order the new build's S3 restores read 0.65-0.74 of local where,
# alternated on one cluster, it was as fast as the old one or faster).
old_restore() {
  [ -n "$O" ] || return 0
  read -r ot oc or _ om _ < <(DEDELTA_CACHE_DIR=$work/cache-ro tb $O restore -r "$s3old" "${conn[@]}" latest --target "$rdir/o")
  same "$rdir/o" || { echo "old binary's restore differs"; exit 1; }
  old_line="restore $k old binary: s3 ${ot}s; cpu ${oc}s; requests $or (metadata $om)"
}
for k in 1 2; do
  rm -rf "${rdir:?}"/* cache-rl cache-rs cache-ro
  old_line=""
  read -r lt lc lr _ lm _ < <(DEDELTA_CACHE_DIR=$work/cache-rl tb $D restore -r local latest --target "$rdir/l")
  same "$rdir/l" || { echo "local restore differs"; exit 1; }
  [ "$k" = 2 ] && old_restore
  read -r st sc sr _ sm _ < <(DEDELTA_S3_TRACE=$(trace "restore-$k") DEDELTA_CACHE_DIR=$work/cache-rs tb $D restore -r "$s3" "${conn[@]}" latest --target "$rdir/s")
  same "$rdir/s" || { echo "restores differ"; exit 1; }
  [ "$k" = 1 ] && old_restore
  echo "restore $k ($(mb) MB, empty cache, to $rdir): local ${lt}s s3 ${st}s; cpu local ${lc}s s3 ${sc}s;" \
    "requests local $lr (metadata $lm) s3 $sr (metadata $sm)"
  [ -z "$old_line" ] || echo "$old_line"
done
