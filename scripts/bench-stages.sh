#!/usr/bin/env bash
# Where a series of backups spends its time, backup by backup: each version (files given in
# order) backed up through --stdin into a fresh encrypted repository (the default Argon2id,
# as scripts/bench-speed.sh), one process per version. Prints one line per backup: wall, user
# and system seconds and peak RSS of the process, the command's own `seconds`, where its
# delta bases came from (read back / local base cache / memory) and its `stage_seconds` above
# 10 ms; then the sums. Stage seconds are summed over the threads that ran the stage.
# Usage: scripts/bench-stages.sh WORKDIR FILE...   (DEDELTA_BIN picks the binary; INIT_ARGS
# are passed to `init`, e.g. INIT_ARGS="--delta ddelta")
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; shift
[ $# -ge 1 ] || { echo "usage: $0 WORKDIR FILE..." >&2; exit 2; }
rm -rf "$work/repo" "$work/cache"; mkdir -p "$work"
export DEDELTA_PASSWORD=bench DEDELTA_CACHE_DIR="$work/cache"
"$bin" init -r "$work/repo" ${INIT_ARGS:-} >/dev/null
cat "$@" >/dev/null  # page cache
for f in "$@"; do
  /usr/bin/time -f "%e %U %S %M" -o "$work/time" \
    "$bin" backup -r "$work/repo" --stdin --stdin-name data --json < "$f" > "$work/json"
  tail -n 1 "$work/json" > "$work/summary"
  python3 - "$work/summary" "$work/time" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
wall, user, system, rss = open(sys.argv[2]).read().split()
stages = " ".join(f"{k}={v:.3f}" for k, v in j["stage_seconds"].items() if v > 0.01)
print(f"wall {wall} user {user} sys {system} rss {int(rss) // 1024}M | in {j['seconds']:.3f} | "
      f"bases read back {j['base_cache_misses']} local {j['base_cache_local_hits']} "
      f"memory {j['base_cache_hits']} | {stages}")
EOF
done | tee "$work/lines"
python3 - "$work/lines" <<'EOF'
import re, sys
wall = cpu = inside = 0.0
stages = {}
for line in open(sys.argv[1]):
    p = line.split()
    wall += float(p[1]); cpu += float(p[3]) + float(p[5])
    inside += float(line.split("| in ")[1].split()[0])
    for k, v in re.findall(r"(\w+)=([\d.]+)", line):
        stages[k] = stages.get(k, 0.0) + float(v)
print(f"total: wall {wall:.2f} s, cpu {cpu:.2f} s, in the commands {inside:.2f} s; stages: "
      + " ".join(f"{k}={v:.2f}" for k, v in sorted(stages.items())))
EOF
