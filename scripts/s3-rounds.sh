#!/usr/bin/env bash
# Requests and sequential rounds (scripts/s3-trace-rounds.py) of the commands whose fixed
# costs issue 19 is about, against moto_server on 127.0.0.1 (or ENDPOINT, see
# scripts/s3-endpoint.sh): `init`, backup 1 (the first SQLAlchemy tar), backup 2 (the first
# two, client cache kept), the same backup again with an empty client cache, and a restore of
# the latest snapshot with an empty cache. Counts, not times: they do not depend on the
# machine's load. With OLD_BIN, that binary runs the same commands into a repository of its
# own, interleaved, and the table has both. Plain repositories (--insecure-no-password),
# unless PASSWORD is set (then encrypted, the password given by DEDELTA_PASSWORD).
# Requests pass through scripts/latency-proxy.py, which delays each by LATENCY_MS (default
# 40, a Garage cluster's small-object latency; 0: no proxy): moto answers in a few ms, so
# without it requests issued one after another may be counted as one round or two by how
# fast moto was, and the count would depend on the machine's load.
# Usage: scripts/s3-rounds.sh WORKDIR   (env: DEDELTA_BIN, OLD_BIN, ENDPOINT, BUCKET, DATA,
# PASSWORD, LATENCY_MS; the traces stay in WORKDIR/traces-new, traces-old)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
D=${DEDELTA_BIN:-$here/target/release/dedelta}
O=${OLD_BIN:-}
work=$1
data=${DATA:-$HOME/.cache/dedelta-eval/sqla}
mkdir -p "$work"; cd "$work"
rm -rf src traces-* cache-* out-*; mkdir -p src
# shellcheck source=scripts/s3-endpoint.sh
. "$here/scripts/s3-endpoint.sh"
if [ "${LATENCY_MS:-40}" != 0 ]; then
  lport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  python3 "$here/scripts/latency-proxy.py" "$lport" "${ENDPOINT##*:}" "${LATENCY_MS:-40}" & proxy=$!
  trap 'kill $proxy; ${moto:+kill $moto}' EXIT
  for _ in $(seq 50); do curl -s "http://127.0.0.1:$lport" >/dev/null && break; sleep 0.1; done
  ENDPOINT=http://127.0.0.1:$lport
fi
prefix=rounds$(date +%s)
tars=$(ls "$data"/*.tar | sort -V)
if [ -n "${PASSWORD:-}" ]; then export DEDELTA_PASSWORD=$PASSWORD; pw=(); else pw=(--insecure-no-password); fi
rounds() { python3 "$here/scripts/s3-trace-rounds.py" "$1" | awk 'NR==1 {gsub(",", ""); print $2 " / " $5 " / " $8}'; }
# run SIDE BIN NAME ARGS...: runs a command with its trace in traces-SIDE/NAME.trace.
run() {
  local side=$1 bin=$2 name=$3; shift 3
  mkdir -p "traces-$side"
  DEDELTA_S3_TRACE="$work/traces-$side/$name.trace" "$bin" "$@" </dev/null >/dev/null
}
sides=(new); [ -n "$O" ] && sides=(old new)
bin() { if [ "$1" = old ]; then echo "$O"; else echo "$D"; fi; }
for s in "${sides[@]}"; do
  run "$s" "$(bin "$s")" init init -r "s3:$ENDPOINT/$BUCKET/$prefix-$s" "${pw[@]}"
done
cp "$(echo "$tars" | sed -n 1p)" src/
for s in "${sides[@]}"; do
  DEDELTA_CACHE_DIR=$work/cache-$s run "$s" "$(bin "$s")" backup-1 backup -r "s3:$ENDPOINT/$BUCKET/$prefix-$s" src
done
cp "$(echo "$tars" | sed -n 2p)" src/
for s in "${sides[@]}"; do
  DEDELTA_CACHE_DIR=$work/cache-$s run "$s" "$(bin "$s")" backup-2 backup -r "s3:$ENDPOINT/$BUCKET/$prefix-$s" src
done
for s in "${sides[@]}"; do
  rm -rf "$work/cache-empty-$s"
  DEDELTA_CACHE_DIR=$work/cache-empty-$s run "$s" "$(bin "$s")" backup-empty-cache backup -r "s3:$ENDPOINT/$BUCKET/$prefix-$s" src
done
for s in "${sides[@]}"; do
  rm -rf "$work/cache-restore-$s" "$work/out-$s"
  DEDELTA_CACHE_DIR=$work/cache-restore-$s run "$s" "$(bin "$s")" restore-empty-cache restore -r "s3:$ENDPOINT/$BUCKET/$prefix-$s" latest --target "$work/out-$s"
done
[ -n "$O" ] && { diff -r out-old out-new >/dev/null || { echo "the restores differ"; exit 1; }; }
printf '| command |%s\n' "$(for s in "${sides[@]}"; do printf ' %s: requests / rounds / chain |' "$s"; done)"
printf '|---|%s\n' "$(for _ in "${sides[@]}"; do printf -- '---:|'; done)"
for c in init backup-1 backup-2 backup-empty-cache restore-empty-cache; do
  printf '| %s |%s\n' "$c" "$(for s in "${sides[@]}"; do printf ' %s |' "$(rounds "traces-$s/$c.trace")"; done)"
done
