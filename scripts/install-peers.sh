#!/usr/bin/env bash
# Installs the tools `dedelta eval` compares against (from Debian): restic, borgbackup,
# xdelta3, zstd, and sqlite3 and redis-server (for the database-snapshot datasets; the
# redis-server package also provides redis-cli). Needs root (or sudo). With --rustic, also
# builds rustic (the Rust reimplementation of restic; `cargo install rustic-rs --locked`, about
# 16 minutes on 2 cores) into ~/.cache/dedelta-peers/rustic, where `dedelta eval` finds it,
# unless it is there already.
# Usage: scripts/install-peers.sh [--rustic]
set -euo pipefail
if [ "${1:-}" = --rustic ]; then
  root="$HOME/.cache/dedelta-peers/rustic"
  if [ ! -x "$root/bin/rustic" ]; then
    cargo install rustic-rs --locked --root "$root"
  fi
  printf '%-8s %s\n' rustic "$("$root/bin/rustic" --version)"
fi
pkgs=(restic borgbackup xdelta3 zstd sqlite3 redis-server)
sudo=""
if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
for t in restic borg xdelta3 zstd sqlite3 redis-server; do
  printf '%-8s %s\n' "$t" "$("$t" --version 2>&1 | head -n1)"
done
