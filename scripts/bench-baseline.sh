#!/usr/bin/env bash
# Issue 14's speed targets are ratios to a baseline build (b444773): this runs the baseline's
# binary with the baseline's own scripts/bench-versions.sh and NEWBIN with this tree's,
# interleaved (SQLAlchemy ROUNDS_SQLA rounds, default 2; prettier ROUNDS_PRETTIER, default
# 3), appends one line per run to OUT/results.txt ("base|new SERIES ROUND JSON") and the load
# average to OUT/uptime.log, then prints the ratios (new ÷ base of the summed MB/s, and each
# round's) and the CPU seconds. The baseline tree is a worktree with its release build:
#   git worktree add --detach ../wt-base b444773 && (cd ../wt-base && cargo build --release -p dedelta-cli)
# Several runs' results.txt can be concatenated and given to `--ratios FILE` to pool them.
# Usage: scripts/bench-baseline.sh NEWBIN OUT   (env: BASE_TREE, default ../wt-base; DATA_DIR)
#        scripts/bench-baseline.sh --ratios RESULTS.TXT
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ratios() {
  python3 - "$1" <<'PY'
import json, sys, collections, statistics as st
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    who, tag, _, js = line.split(' ', 3)
    rows[(tag, who)].append(json.loads(js))
for tag in ['sqla', 'prettier']:
    b, n = rows[(tag, 'base')], rows[(tag, 'new')]
    if not b or not n:
        continue
    for k in ['backup_mb_s', 'restore_mb_s']:
        per = [round(y[k] / x[k], 3) for x, y in zip(b, n)]
        print(tag, k, 'ratio', round(sum(y[k] for y in n) / sum(x[k] for x in b), 3), per)
    for k in ['backup_cpu_s', 'restore_cpu_s']:
        mb, mn = st.median(x[k] for x in b), st.median(y[k] for y in n)
        print(tag, k, 'median base', round(mb, 3), 'new', round(mn, 3), 'ratio', round(mn / mb, 3))
    print(tag, 'repo_du_mb', b[0]['repo_du_mb'], '->', n[0]['repo_du_mb'])
PY
}
if [ "${1:-}" = --ratios ]; then ratios "$2"; exit 0; fi
new=$1; out=$2; mkdir -p "$out"
base=${BASE_TREE:-$here/../wt-base}
data=${DATA_DIR:-$HOME/.cache/dedelta-eval}
mapfile -t sq < <(ls -v "$data"/sqla/*.tar)
mapfile -t pr < <(ls -v "$data"/prettier/*.tar)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
run() { # SERIES ROUND FILE...
  local tag=$1 r=$2; shift 2
  uptime >> "$out/uptime.log"
  DEDELTA_BIN=$base/target/release/dedelta "$base/scripts/bench-versions.sh" "$work/base" "" "$@" \
    | sed "s/^/base $tag $r /" >> "$out/results.txt"
  DEDELTA_BIN=$new "$here/scripts/bench-versions.sh" "$work/new" "" "$@" \
    | sed "s/^/new $tag $r /" >> "$out/results.txt"
}
for r in $(seq "${ROUNDS_SQLA:-2}"); do run sqla "$r" "${sq[@]}"; done
for r in $(seq "${ROUNDS_PRETTIER:-3}"); do run prettier "$r" "${pr[@]}"; done
uptime >> "$out/uptime.log"
ratios "$out/results.txt"
