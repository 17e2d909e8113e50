#!/usr/bin/env bash
# Issue 20's speed benchmark: dedelta against restic, rustic and borg in one run, each tool
# with its defaults and an encrypted repository (dedelta: the default Argon2id; restic and
# rustic: their own KDFs; borg: repokey-blake2), page cache warm.
#   1. backup: every version (files given in order) as one `--stdin` snapshot under one name,
#      one process per version, the tools rotating per version so that they share the noise;
#   2. all-duplicate: the last version backed up once more;
#   3. restore of a large file: the last version to tmpfs (dump/extract to /dev/shm);
#   4. restore of a tree: TREE (default: the last version, unpacked) backed up as a directory,
#      then backed up again with every file read (all duplicates, at the throughput of the
#      pipeline rather than of a process's fixed costs: step `tree_dup`), then restored into
#      /dev/shm.
# Prints one JSON line per tool: wall and CPU (user + system) seconds of each step, MB/s, the
# restores' peak RSS (KB); then one line of dedelta's speed ratios to each peer (> 1: faster).
# A tool that is not installed is skipped (scripts/install-peers.sh [--rustic]).
# Usage: scripts/bench-speed.sh WORKDIR FILE...
# DEDELTA_BIN picks dedelta's binary; RUSTIC picks rustic's (default: on PATH, else
# ~/.cache/dedelta-peers/rustic/bin/rustic); TOOLS limits the tools (e.g. "dedelta restic").
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; shift
[ $# -ge 1 ] || { echo "usage: $0 WORKDIR FILE..." >&2; exit 2; }
rustic=${RUSTIC:-$(command -v rustic || echo "$HOME/.cache/dedelta-peers/rustic/bin/rustic")}
shm=/dev/shm/dedelta-bench-speed.$$
mkdir -p "$work" "$shm"
trap 'rm -rf "$shm"' EXIT
tools=()
for t in ${TOOLS:-dedelta restic rustic borg}; do
  case $t in
    dedelta) [ -x "$bin" ] && tools+=(dedelta) ;;
    restic) command -v restic >/dev/null && tools+=(restic) ;;
    rustic) [ -x "$rustic" ] && tools+=(rustic) ;;
    borg) command -v borg >/dev/null && tools+=(borg) ;;
  esac
done
export DEDELTA_PASSWORD=bench RESTIC_PASSWORD=bench RUSTIC_PASSWORD=bench BORG_PASSPHRASE=bench
export GOMAXPROCS=2
# Runs TOOL's STEP (init | backup FILE | tree DIR | dump FILE | restore DIR) on REPO.
run() {
  local tool=$1 step=$2 arg=${3:-} repo=$work/$1-${REPO_SUFFIX:-files}
  case $tool in
    dedelta)
      export DEDELTA_CACHE_DIR=$repo.cache
      case $step in
        init) "$bin" init -r "$repo" ;;
        backup) "$bin" backup -r "$repo" --stdin --stdin-name data < "$arg" ;;
        tree) (cd "$arg" && "$bin" backup -r "$repo" .) ;;
        tree_dup) (cd "$arg" && "$bin" backup -r "$repo" --force .) ;;
        dump) "$bin" dump -r "$repo" latest data > "$arg" ;;
        restore) "$bin" restore -r "$repo" latest --target "$arg" ;;
      esac ;;
    restic)
      export RESTIC_CACHE_DIR=$repo.cache
      case $step in
        init) restic -r "$repo" -q init ;;
        backup) restic -r "$repo" -q backup --stdin --stdin-filename data < "$arg" ;;
        tree) (cd "$arg" && restic -r "$repo" -q backup .) ;;
        tree_dup) (cd "$arg" && restic -r "$repo" -q backup --force .) ;;
        dump) restic -r "$repo" -q dump latest data > "$arg" ;;
        restore) restic -r "$repo" -q restore latest --target "$arg" ;;
      esac ;;
    rustic)
      local r=("$rustic" --no-progress --log-level warn -r "$repo")
      export RUSTIC_CACHE_DIR=$repo.cache
      case $step in
        init) "${r[@]}" init ;;
        # Without --force rustic 0.11 stores a later stdin backup as its parent's content.
        backup) "${r[@]}" backup --force - --stdin-filename data < "$arg" ;;
        tree) (cd "$arg" && "${r[@]}" backup .) ;;
        tree_dup) (cd "$arg" && "${r[@]}" backup --force .) ;;
        dump) "${r[@]}" dump latest:data > "$arg" ;;
        restore) "${r[@]}" restore latest "$arg" ;;
      esac ;;
    borg)
      export BORG_BASE_DIR=$repo.base
      case $step in
        init) borg init -e repokey-blake2 "$repo" ;;
        backup) borg create "$repo::v$(date +%s%N)" - --stdin-name data < "$arg" ;;
        tree) (cd "$arg" && borg create "$repo::tree" .) ;;
        tree_dup) (cd "$arg" && borg create --files-cache=disabled "$repo::tree-again" .) ;;
        dump) borg extract --stdout "$repo::$(borg list --last 1 --short "$repo")" > "$arg" ;;
        restore) mkdir -p "$arg" && (cd "$arg" && borg extract "$repo::tree") ;;
      esac ;;
  esac
}
# Times one step: appends "TOOL KEY wall user sys maxrss_kb" to $work/times.
# Before each timed command, memory is written and freed (untimed; WARM_MB, default 2048, 0
# for none): this VM reports freed memory to the hypervisor after about 2 s, and a command's
# first touch of such pages is a fault the hypervisor serves. Without it the first restore of
# the 1.2 GB tree after the backups took 3.46 s against 1.06-1.23 s in runs where memory had
# just been freed, whichever tool came first.
warm() {
  [ "${WARM_MB:-2048}" -gt 0 ] || return 0
  head -c "${WARM_MB:-2048}M" /dev/zero > "$shm/warm"; rm -f "$shm/warm"
}
timed() {
  local tool=$1 key=$2; shift 2
  warm
  /usr/bin/time -o "$work/t" -f '%e %U %S %M' bash -c "$(declare -f run); $(declare -p work bin rustic); REPO_SUFFIX=${REPO_SUFFIX:-files} run $*" >/dev/null 2>"$work/err" \
    || { echo "$tool $key failed:" >&2; cat "$work/err" >&2; exit 1; }
  echo "$tool $key $(tail -n1 "$work/t")" >> "$work/times"
}
: > "$work/times"
for t in "${tools[@]}"; do
  rm -rf "${work:?}/$t-files"* "$work/$t-tree"*
  run "$t" init >/dev/null 2>&1
  REPO_SUFFIX=tree run "$t" init >/dev/null 2>&1
done
bytes=0; i=0; n=${#tools[@]}
for f in "$@"; do
  cat "$f" > /dev/null  # warm
  bytes=$((bytes + $(stat -c %s "$f")))
  for k in $(seq 0 $((n - 1))); do
    t=${tools[$(((i + k) % n))]}
    timed "$t" backup "$t" backup "$f"
  done
  i=$((i + 1))
done
last=${*: -1}
last_bytes=$(stat -c %s "$last")
for t in "${tools[@]}"; do timed "$t" dup "$t" backup "$last"; done
for t in "${tools[@]}"; do
  rm -f "$shm/file"
  timed "$t" dump "$t" dump "$shm/file"
  cmp -s "$shm/file" "$last" || { echo "$t: the restored file differs" >&2; exit 1; }
done
rm -f "$shm/file"
tree=${TREE:-}
if [ -z "$tree" ]; then
  tree=$work/tree; rm -rf "$tree"; mkdir -p "$tree"; tar -xf "$last" -C "$tree"
fi
tree_bytes=$(du -sb --apparent-size "$tree" | cut -f1)
for t in "${tools[@]}"; do REPO_SUFFIX=tree timed "$t" tree "$t" tree "$tree"; done
for t in "${tools[@]}"; do REPO_SUFFIX=tree timed "$t" tree_dup "$t" tree_dup "$tree"; done
for t in "${tools[@]}"; do
  rm -rf "$shm/tree"
  REPO_SUFFIX=tree timed "$t" restore "$t" restore "$shm/tree"
  got=$(du -sb --apparent-size "$shm/tree" | cut -f1)
  echo "$t tree restored: $got bytes of $tree_bytes (directories' sizes differ by tool)" >&2
done
rm -rf "$shm/tree"
python3 - "$work/times" "$bytes" "$last_bytes" "$tree_bytes" "${tools[@]}" <<'EOF'
import json, sys
times, total, last, tree = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tools = sys.argv[5:]
rows = {}
for line in open(times):
    t, k, wall, user, sys_, rss = line.split()
    r = rows.setdefault(t, {}).setdefault(k, {"wall_s": 0.0, "cpu_s": 0.0, "max_rss_kb": 0})
    r["wall_s"] += float(wall); r["cpu_s"] += float(user) + float(sys_)
    r["max_rss_kb"] = max(r["max_rss_kb"], int(rss))
size = {"backup": total, "dup": last, "dump": last, "tree": tree, "tree_dup": tree,
        "restore": tree}
out = {}
for t in tools:
    o = {"tool": t}
    for k, r in rows[t].items():
        mbs = size[k] / 1e6 / r["wall_s"] if r["wall_s"] else None
        o[k] = {"wall_s": round(r["wall_s"], 3), "cpu_s": round(r["cpu_s"], 3),
                "mb_per_s": round(mbs, 1) if mbs else None, "max_rss_kb": r["max_rss_kb"]}
    out[t] = o
    print(json.dumps(o))
if "dedelta" in out:
    ratios = {}
    for t in tools:
        if t == "dedelta":
            continue
        ratios[t] = {k: round(out[t][k]["wall_s"] / out["dedelta"][k]["wall_s"], 2)
                     for k in out["dedelta"] if k != "tool" and k in out[t]}
    print(json.dumps({"dedelta_speedup_over": ratios}))
EOF
