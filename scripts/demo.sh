#!/usr/bin/env bash
# The main job on a small example: generate five versions of a source-like tree, back each up
# into a fresh repository, print the statistics, restore one version and verify it bit-exact.
# Usage: scripts/demo.sh [WORKDIR]   (default: a temporary directory, removed at the end)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin="$here/target/release/dedelta"
[ -x "$bin" ] || cargo build --release --manifest-path "$here/Cargo.toml"
work=${1:-$(mktemp -d)}
[ -n "${1:-}" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
repo="$work/repo"; data="$work/data"; out="$work/restore"
# The client cache (chunk index, base cache) beside the repository, not in ~/.cache.
export DEDELTA_CACHE_DIR="$work/cache"
rm -rf "$repo" "$data" "$out" "$work/cache"

# Version 1: 40 text files of ~250 KiB; each later version edits ~0.3% of lines, deletes one
# file and adds one, as a software project does between releases.
gen_file() { # seed lines
  awk -v seed="$1" -v n="$2" 'BEGIN { srand(seed); for (i = 0; i < n; i++) {
    printf "line %d: value=%d name=item_%d status=%s\n", i, int(rand()*1e6), int(rand()*5000), (rand() < 0.5 ? "ok" : "pending") } }'
}
mkdir -p "$data/v1/src"
for i in $(seq 1 40); do gen_file "$i" 4000 > "$data/v1/src/module_$i.txt"; done
for v in 2 3 4 5; do
  cp -r "$data/v$((v-1))" "$data/v$v"
  for f in "$data/v$v"/src/*.txt; do
    awk -v seed="$v$RANDOM" 'BEGIN { srand(seed) } { if (rand() < 0.003) print "edited in this version: " $0 " " int(rand()*1e6); else print }' "$f" > "$f.new"
    mv "$f.new" "$f"
  done
  rm -f "$data/v$v/src/module_$v.txt"
  gen_file "$((100 + v))" 4000 > "$data/v$v/src/new_module_$v.txt"
done

export DEDELTA_PASSWORD=demo  # encrypted, as by default; a real password belongs in a file
"$bin" init -r "$repo"
for v in 1 2 3 4 5; do
  echo "== backup of version $v"
  "$bin" backup -r "$repo" --tag "v$v" "$data/v$v"
done
echo "== snapshots"; "$bin" snapshots -r "$repo"
echo "== stats"; "$bin" stats -r "$repo"
echo "== check --read-data"; "$bin" check -r "$repo" --read-data
id=$("$bin" snapshots -r "$repo" --json | python3 -c 'import json,sys; print([s["id"] for s in json.load(sys.stdin) if "v3" in s["tags"]][0])')
echo "== restore of version 3 ($id)"
"$bin" restore -r "$repo" "${id:0:8}" --target "$out"
diff -r "$data/v3" "$out$data/v3" && echo "restored version 3 is bit-exact"
