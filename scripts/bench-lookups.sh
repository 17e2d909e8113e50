#!/usr/bin/env bash
# Duplicate lookups of the exact and the locality fingerprint index (issue 16 item 1): backs up
# FILE... in order (each as one snapshot through --stdin) into a fresh repository per strategy
# and prints one JSON line per strategy: index lookups, random reads (bucket reads and
# container metadata prefetches), per GB and per container of data, the filter's
# false-positive rate, bytes per chunk of the filter and of the index's other in-memory parts
# (outside the bounded caches, and the super-feature filters held within their budget), the
# full sketch index's key lookups in the runs (filter false positives, bucket reads),
# the stored bytes, the backups' seconds, and the modelled disk time (every random read
# costs SEEK_MS, 5 by default: a disk seek; page-cache hits in this run cost nothing).
# Usage: scripts/bench-lookups.sh WORKDIR FILE...
# CACHE_CONTAINERS (environment, default 64) sizes the locality cache; INIT_FLAGS (environment)
# are passed to `init` (e.g. "--sketch none --dupadj off" for deduplication only). KINDS
# (environment, default "exact locality") chooses the strategies. SKETCH_FILTER_MIB
# (environment, default the backup's) bounds the runs' super-feature filters.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; shift
cat "$@" > /dev/null  # page cache
for kind in ${KINDS:-exact locality}; do
  repo="$work/repo-$kind"; rm -rf "$repo" "$work/cache-$kind"; mkdir -p "$work"
  export DEDELTA_CACHE_DIR="$work/cache-$kind"
  # shellcheck disable=SC2086
  "$bin" init -r "$repo" --insecure-no-password ${INIT_FLAGS:-} >/dev/null
  : > "$work/$kind.jsonl"
  for f in "$@"; do
    "$bin" backup -r "$repo" --stdin --stdin-name data.tar --json \
      --fingerprint-index "$kind" --fingerprint-cache-containers "${CACHE_CONTAINERS:-64}" \
      ${SKETCH_FILTER_MIB:+--sketch-filter-cache-mib "$SKETCH_FILTER_MIB"} \
      < "$f" >> "$work/$kind.jsonl"
  done
  container=$("$bin" stats -r "$repo" --json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("stored_bytes", 0))')
  python3 - "$work/$kind.jsonl" "$kind" "$container" "${SEEK_MS:-5}" <<'PY'
import json, sys
# Progress lines (message_type "status") come before each backup's summary.
rows = [r for r in map(json.loads, open(sys.argv[1])) if "lookups" in r]
kind, stored, seek = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]) / 1000
L = lambda k: sum(r["lookups"].get(k, 0) for r in rows)
gb = sum(r["bytes_read"] for r in rows) / 1e9
secs = sum(r["seconds"] for r in rows)
reads = L("bucket_reads") + L("prefetches")
# Data in containers of 4 MiB (the default container size).
containers_of_data = sum(r["bytes_read"] for r in rows) / (4 << 20)
absent = L("filter_negatives") + L("filter_false_positives")
last = rows[-1]["lookups"]
chunks = max(last["index_chunks"], 1)
disk = reads * seek
# The full sketch index's lookups in the runs (a key asked of a run; absent from --sketch none).
S = lambda k: sum(r["lookups"].get("sketch", {}).get(k, 0) for r in rows)
sketch_absent = S("probes") - S("unfiltered") - (S("filter_passes") - S("filter_false_positives"))
out = {
    "strategy": kind, "versions": len(rows), "gb": round(gb, 3), "stored_bytes": stored,
    "lookups": L("lookups"), "cache_hits": L("cache_hits"),
    "index_lookups": L("index_lookups"), "bucket_reads": L("bucket_reads"),
    "prefetches": L("prefetches"), "random_reads": reads,
    "index_lookups_per_gb": round(L("index_lookups") / gb, 1),
    "random_reads_per_gb": round(reads / gb, 1),
    "index_lookups_per_container_of_data": round(L("index_lookups") / containers_of_data, 2),
    "new_containers": sum(r["containers_written"] for r in rows),
    "index_lookups_per_container_written": round(L("index_lookups") / max(sum(r["containers_written"] for r in rows), 1), 2),
    "bucket_reads_per_container_written": round(L("bucket_reads") / max(sum(r["containers_written"] for r in rows), 1), 2),
    "index_lookups_found": L("index_lookups") - L("filter_false_positives"),
    "disk_lookups": L("disk_lookups"),
    "disk_lookups_per_container_written": round(L("disk_lookups") / max(sum(r["containers_written"] for r in rows), 1), 2),
    "hinted_prefetches": L("hinted_prefetches"), "hint_hits": L("hint_hits"),
    "prefetches_per_container_written": round(L("prefetches") / max(sum(r["containers_written"] for r in rows), 1), 2),
    "filter_false_positives": L("filter_false_positives"),
    "filter_fp_rate": round(L("filter_false_positives") / absent, 4) if absent else None,
    "filter_bytes_per_chunk": round(last["filter_bytes"] / chunks, 2),
    "index_memory_bytes_per_chunk": round(last["index_memory_bytes"] / chunks, 2),
    "ram_outside_caches_per_chunk": round((last["filter_bytes"] + last["index_memory_bytes"]) / chunks, 2),
    "sketch_probes": S("probes"), "sketch_unfiltered": S("unfiltered"),
    "sketch_filter_passes": S("filter_passes"),
    "sketch_filter_false_positives": S("filter_false_positives"),
    "sketch_filter_fp_rate": round(S("filter_false_positives") / sketch_absent, 4) if sketch_absent else None,
    "sketch_bucket_reads": S("bucket_reads"),
    "sketch_bucket_reads_per_container_written": round(S("bucket_reads") / max(sum(r["containers_written"] for r in rows), 1), 2),
    "sketch_filter_bytes_per_chunk": round(last.get("sketch", {}).get("filter_bytes", 0) / chunks, 2),
    "backup_seconds": round(secs, 2), "modelled_disk_seconds": round(disk, 2),
    "mb_per_s_with_modelled_disk": round(gb * 1000 / (secs + disk), 1),
}
print(json.dumps(out))
PY
done
