# Sourced by the S3 benchmarks (bench-s3.sh, bench-index-files.sh). Without ENDPOINT, starts
# moto_server on a free port of 127.0.0.1 (stopped when the sourcing script exits), sets the
# AWS_* variables for it and creates bucket BUCKET; with ENDPOINT (a Garage node, say), uses
# it as it is, with the caller's AWS_* variables and an existing BUCKET. BUCKET defaults to
# `bench`.
BUCKET=${BUCKET:-bench}
if [ -z "${ENDPOINT:-}" ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  moto_server -H 127.0.0.1 -p "$port" >/dev/null 2>&1 & moto=$!
  trap 'kill $moto' EXIT
  ENDPOINT=http://127.0.0.1:$port
  export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
  for _ in $(seq 100); do curl -s "$ENDPOINT" >/dev/null && break; sleep 0.2; done
  curl -s -X PUT "$ENDPOINT/$BUCKET" >/dev/null
fi
