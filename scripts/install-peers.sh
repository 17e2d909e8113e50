#!/usr/bin/env bash
# Installs the tools `dedelta eval` compares against (from Debian): restic, borgbackup,
# xdelta3, zstd, and sqlite3 and redis-server (for the database-snapshot datasets; the
# redis-server package also provides redis-cli). Needs root (or sudo).
# Usage: scripts/install-peers.sh
set -euo pipefail
pkgs=(restic borgbackup xdelta3 zstd sqlite3 redis-server)
sudo=""
if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
for t in restic borg xdelta3 zstd sqlite3 redis-server; do
  printf '%-8s %s\n' "$t" "$("$t" --version 2>&1 | head -n1)"
done
