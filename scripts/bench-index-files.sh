#!/usr/bin/env bash
# A client with an empty cache against an S3 repository of a few hundred containers: the
# requests and seconds of its first command (a restore of a one-file snapshot, so that the
# index rebuild is most of it), with index files and without (issue 19, "index files").
# Starts moto_server on 127.0.0.1 (or uses ENDPOINT with AWS_* set and bucket BUCKET). Order:
# with, without (index files deleted), with again (rewritten by a prune); each from an empty
# cache.
# Usage: scripts/bench-index-files.sh WORKDIR [MB]   (env: DEDELTA_BIN, ENDPOINT, BUCKET)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
D=${DEDELTA_BIN:-$here/target/release/dedelta}
work=$1; mb=${2:-80}
mkdir -p "$work"; cd "$work"
rm -rf cache-* out-* src tiny; mkdir -p src tiny
# shellcheck source=scripts/s3-endpoint.sh
. "$here/scripts/s3-endpoint.sh"
prefix=idx$(date +%s)
s3="s3:$ENDPOINT/$BUCKET/$prefix"
# 256 KiB containers: a few hundred from $mb MB of incompressible data.
$D init -r "$s3" --insecure-no-password --container-size 262144 --region-size 65536 >/dev/null
head -c "${mb}000000" /dev/urandom > src/data.bin
DEDELTA_CACHE_DIR=$work/cache-w $D backup -r "$s3" src >/dev/null
echo tiny > tiny/t.txt
DEDELTA_CACHE_DIR=$work/cache-w $D backup -r "$s3" tiny >/dev/null
tiny_id=$(DEDELTA_CACHE_DIR=$work/cache-w $D snapshots -r "$s3" --json | python3 -c '
import json,sys; s=json.load(sys.stdin); print([x for x in s if any(p.endswith("tiny") for p in x["paths"])][0]["id"])')
objects() { # prefix-relative folder -> count
  python3 - "$ENDPOINT" "$BUCKET" "$prefix/$1/" <<'PY'
import boto3,sys
c=boto3.client("s3",endpoint_url=sys.argv[1])
n=0
for page in c.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[2],Prefix=sys.argv[3]):
    n+=len(page.get("Contents",[]))
print(n)
PY
}
drop_index_files() {
  python3 - "$ENDPOINT" "$BUCKET" "$prefix/indexes/" <<'PY'
import boto3,sys
c=boto3.client("s3",endpoint_url=sys.argv[1])
for page in c.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[2],Prefix=sys.argv[3]):
    for o in page.get("Contents",[]):
        c.delete_object(Bucket=sys.argv[2],Key=o["Key"])
PY
}
echo "repository: $(objects containers) containers, $(objects indexes) index files"
run() { # label
  rm -rf cache-f out-f
  local start end
  start=$(date +%s.%N)
  DEDELTA_CACHE_DIR=$work/cache-f $D restore -r "$s3" "$tiny_id" --target out-f --json > run.json
  end=$(date +%s.%N)
  python3 - "$1" "$start" "$end" <<'PY'
import json,sys
j=[json.loads(l) for l in open("run.json") if l.strip()][-1]
io=j["io"]
idx=io["purposes"]["index"]
print(f"{sys.argv[1]:<28} {float(sys.argv[3])-float(sys.argv[2]):6.2f} s  requests {io['requests']:5d}"
      f" (index: {idx['requests']} requests, {idx['bytes']/1e6:.2f} MB)")
PY
}
run "with index files"
drop_index_files
run "without index files"
DEDELTA_CACHE_DIR=$work/cache-w $D prune -r "$s3" >/dev/null
echo "after prune: $(objects indexes) index files"
run "with index files (pruned)"
