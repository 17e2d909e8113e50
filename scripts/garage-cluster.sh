#!/usr/bin/env bash
# Distributed tests on a real object store: a 3-node Garage cluster on 127.0.0.1 (replication
# factor 3, quorum writes), then, against it:
#   1. N concurrent backups of different data from N clients (own caches) into one repository,
#      then check --read-data and a bit-exact restore of every snapshot;
#   2. a backup during which one node is stopped (SIGKILL) and restarted: it completes, and
#      the repository checks and restores;
#   3. prune concurrent with a backup and with a restore (--retry-lock): no error, nothing lost.
# Garage takes ~10 min of both cores to build; the binary is cached outside the repository
# (GARAGE_BIN, default ~/.cache/dedelta/garage/garage). Without it this script says so and
# exits 0, unless REQUIRE_GARAGE=1; `--build` builds it first:
#   cargo install garage --no-default-features --features bundled-libs,sqlite,lmdb
# Usage: scripts/garage-cluster.sh [--build] [WORKDIR]   (env: DEDELTA_BIN, GARAGE_BIN; BENCH=N
# runs scripts/bench-s3.sh with N backups against the cluster instead of the tests, OLD_BIN passed on,
# and prints the CPU seconds the Garage nodes used; GARAGE_COMPRESSION sets the nodes'
# compression_level, default "none": see below; QUICKACK=1: see quickack_routes)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
D=${DEDELTA_BIN:-$here/target/release/dedelta}
G=${GARAGE_BIN:-$HOME/.cache/dedelta/garage/garage}
if [ "${1:-}" = --build ]; then
  shift
  mkdir -p "$(dirname "$G")"
  CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/garage-build} nice -n 19 cargo install garage \
    --no-default-features --features bundled-libs,sqlite,lmdb --root "$(dirname "$G")/root"
  cp "$(dirname "$G")/root/bin/garage" "$G"
fi
if ! [ -x "$G" ]; then
  msg="skipping the Garage tests: no garage binary at $G (run scripts/garage-cluster.sh --build, ~10 min)"
  [ "${REQUIRE_GARAGE:-0}" = 1 ] && { echo "error: $msg" >&2; exit 1; }
  echo "$msg"; exit 0
fi
work=${1:-$(mktemp -d /tmp/dedelta-garage.XXXXXX)}
mkdir -p "$work"; cd "$work"
rm -rf n1 n2 n3 src-* out-* cache-* ./*.log
secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
base=${PORT_BASE:-$((20000 + RANDOM % 20000))}
pids=()
conf() { echo "$work/n$1/garage.toml"; }
start_node() {
  "$G" -c "$(conf "$1")" server >"$work/n$1.log" 2>&1 &
  pids[$1]=$!
}
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
# QUICKACK=1 (root): loopback TCP acknowledges at once for the cluster's lifetime (`quickack`
# on the loopback routes, put back on exit). Garage sets no TCP_NODELAY on its sockets, so
# between its nodes a message's last short segment waits for the acknowledgement of the
# one before, which Linux delays by up to 40 ms: a third of the cluster's requests took
# 44-46 ms instead of 1-6 ms, inside the cluster, whatever the client does (the client's
# own side acknowledges at once already: dedelta-backend's s3/connect.rs). Measured both
# ways in docs/benchmarks.md.
quickack_routes() { # on|off
  local q=(); [ "$1" = on ] && q=(quickack 1)
  ip route change table local local 127.0.0.0/8 dev lo proto kernel scope host src 127.0.0.1 "${q[@]}" &&
    ip route change table local local 127.0.0.1 dev lo proto kernel scope host src 127.0.0.1 "${q[@]}"
}
if [ "${QUICKACK:-0}" = 1 ]; then
  quickack_routes on || { echo "error: QUICKACK=1 needs root and iproute2" >&2; exit 1; }
  trap 'stop_all; quickack_routes off' EXIT
else
  trap stop_all EXIT
fi
for i in 1 2 3; do
  mkdir -p "n$i/meta" "n$i/data"
  cat > "$(conf $i)" <<TOML
metadata_dir = "$work/n$i/meta"
data_dir = "$work/n$i/data"
db_engine = "sqlite"
replication_factor = 3
consistency_mode = "consistent"
rpc_bind_addr = "127.0.0.1:$((base + 10 * i + 1))"
rpc_public_addr = "127.0.0.1:$((base + 10 * i + 1))"
rpc_secret = "$secret"
# dedelta's containers are compressed already: Garage's own zstd pass over every block
# (compression_level 1 by default) costs its CPU for nothing.
compression_level = $(c=${GARAGE_COMPRESSION:-none}; [ "$c" = none ] && echo "\"none\"" || echo "$c")

[s3_api]
s3_region = "us-east-1"
api_bind_addr = "127.0.0.1:$((base + 10 * i))"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:$((base + 10 * i + 3))"
TOML
  start_node $i
done
g() { "$G" -c "$(conf 1)" "$@"; }
for _ in $(seq 100); do g status >/dev/null 2>&1 && break; sleep 0.2; done
ids=()
for i in 1 2 3; do
  for _ in $(seq 100); do id=$("$G" -c "$(conf $i)" node id -q 2>/dev/null) && break; sleep 0.2; done
  ids[$i]=$id
  [ "$i" -gt 1 ] && g node connect "$id" >/dev/null
  g layout assign -z dc1 -c 1G "${id%@*}" >/dev/null
done
g layout apply --version 1 >/dev/null
key=$(g key create dedelta-test)
export AWS_ACCESS_KEY_ID=$(echo "$key" | awk '/Key ID/ {print $NF}')
export AWS_SECRET_ACCESS_KEY=$(echo "$key" | awk '/Secret key/ {print $NF}')
export AWS_REGION=us-east-1
g bucket create backups >/dev/null
g bucket allow --read --write --owner backups --key dedelta-test >/dev/null
repo="s3:http://127.0.0.1:$((base + 10))/backups/repo"
echo "garage cluster up: 3 nodes, repository $repo"
if [ -n "${BENCH:-}" ]; then
  # BENCH=N: instead of the tests, issue 19's throughput benchmark (scripts/bench-s3.sh, N
  # backups) against this cluster's first node.
  # The nodes' CPU seconds (user + system) so far, summed.
  garage_cpu() {
    local t=0 p
    for p in "${pids[@]}"; do
      t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    awk -v t="$t" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", t / hz}'
  }
  c0=$(garage_cpu)
  ENDPOINT="http://127.0.0.1:$((base + 10))" BUCKET=backups DEDELTA_BIN="$D" \
    "$here/scripts/bench-s3.sh" "$work/bench" "$BENCH"
  echo "garage nodes' CPU during the benchmark: $(awk -v a="$c0" -v b="$(garage_cpu)" 'BEGIN {printf "%.2f", b - a}') s (compression_level ${GARAGE_COMPRESSION:-none})"
  exit 0
fi

dd() { local who=$1; shift; DEDELTA_CACHE_DIR="$work/cache-$who" "$D" "$@"; }
mktree() { # dir seed: a few MB of files that differ by seed
  mkdir -p "$1"
  head -c 3000000 /dev/urandom > "$1/rand.bin"
  seq "$2" 400000 | sed "s/^/line $2 /" > "$1/text.txt"
  cp -r "$here/crates/dedelta-core/src" "$1/code"
}
restore_same() { # who id src
  rm -rf "out-$1-$2"
  dd "$1" restore -r "$repo" "$2" --target "out-$1-$2" >/dev/null
  diff -r "$3" "out-$1-$2$3" >/dev/null || { echo "FAIL: snapshot $2 does not restore to $3"; exit 1; }
}
# The snapshot id from `backup --json` (whose status lines come before the summary).
snap_id() { python3 -c 'import json,sys; print([j for j in map(json.loads, sys.stdin) if "snapshot_id" in j][-1]["snapshot_id"])'; }

dd a init -r "$repo" --insecure-no-password >/dev/null
echo "1. concurrent backups"
n=${CLIENTS:-3}
for c in $(seq "$n"); do mktree "$work/src-$c" "$c"; done
# Wait for these pids only: a bare `wait` would wait for the Garage nodes too, for ever.
t0=$SECONDS; bp=()
for c in $(seq "$n"); do (dd "c$c" backup -r "$repo" --json "$work/src-$c" | snap_id > "id-$c") & bp+=($!); done
for p in "${bp[@]}"; do wait "$p"; done
echo "   $n backups in $((SECONDS - t0)) s"
t0=$SECONDS
dd z check -r "$repo" --read-data >/dev/null
for c in $(seq "$n"); do restore_same z "$(cat id-$c)" "$work/src-$c"; done
echo "   $n snapshots restore bit-exact, check --read-data clean ($((SECONDS - t0)) s)"

echo "2. a node stopped mid-backup"
t0=$SECONDS
before_puts=$(grep -c "PUT /backups/repo/containers" "$work"/n*.log | awk -F: '{s+=$2} END {print s}')
mktree "$work/src-big" 77; cp -r "$work/src-1" "$work/src-big/more"
head -c "${BIG_MB:-40}000000" /dev/urandom > "$work/src-big/big.bin" # a backup of some seconds
(dd a backup -r "$repo" --json "$work/src-big" | snap_id > id-big) & b=$!
# Once the backup has stored a container (it is writing), node 3 goes.
for _ in $(seq 200); do
  grep -q "PUT /backups/repo/containers" "$work/n1.log" "$work/n2.log" "$work/n3.log" 2>/dev/null \
    && [ "$(grep -c "PUT /backups/repo/containers" "$work"/n*.log | awk -F: '{s+=$2} END {print s}')" -gt "${before_puts:-0}" ] && break
  sleep 0.05
done
if kill -0 "$b" 2>/dev/null; then
  kill -9 "${pids[3]}"; wait "${pids[3]}" 2>/dev/null || true; echo "   node 3 killed during the backup"
else
  echo "FAIL: the backup ended before node 3 could be stopped (raise BIG_MB)"; exit 1
fi
wait $b
start_node 3; sleep 2
dd z check -r "$repo" --read-data >/dev/null
restore_same z "$(cat id-big)" "$work/src-big"
echo "   the backup completed; check --read-data clean; restores bit-exact ($((SECONDS - t0)) s)"

echo "3. prune concurrent with a backup and a restore"
t0=$SECONDS
dd a forget -r "$repo" "$(cat id-1)" >/dev/null
mktree "$work/src-late" 99
# Each waits for the others' locks (prune's is exclusive): whichever comes first, none fails.
(dd b backup -r "$repo" --retry-lock 10m --json "$work/src-late" | snap_id > id-late) & b=$!
(rm -rf out-r; dd r restore -r "$repo" --retry-lock 10m "$(cat id-2)" --target out-r >/dev/null) & r=$!
dd p prune -r "$repo" --retry-lock 10m >/dev/null
wait $b; wait $r
diff -r "$work/src-2" "out-r$work/src-2" >/dev/null || { echo "FAIL: restore during prune"; exit 1; }
dd z check -r "$repo" --read-data >/dev/null
restore_same z "$(cat id-late)" "$work/src-late"
for c in $(seq 2 "$n"); do restore_same z "$(cat id-$c)" "$work/src-$c"; done
echo "   no error; check --read-data clean; every remaining snapshot restores bit-exact ($((SECONDS - t0)) s)"
echo "garage tests passed"
