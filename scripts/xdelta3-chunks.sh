#!/usr/bin/env bash
# Real xdelta3 at the chunk level, on the same chunk pairs `dedelta bench delta` measures its
# codecs on (Ddelta Fig. 8 compares Ddelta with xdelta3 per chunk pair, not per file).
#
# Fetches the xdelta3 3.0.x C source (the sdist of the PyPI package `xdelta3`, which bundles
# it; the Debian package ships only the binary) into a cache directory, compiles
# scripts/xdelta3-chunks.c against it (gcc -O2, as Debian builds xdelta3), writes the pairs of
# OLD and NEW with `dedelta bench delta --dump-pairs` and prints, per xdelta3 level, one JSON
# line in `bench delta --json`'s fields, after bench delta's own table. With the zstd CLI
# installed, each level's line is followed by its deltas' stored size: concatenated, cut into
# 128 KiB regions, each compressed with `zstd -6` (the level the repository default gives
# compressible regions; bench delta's "+zstd" column picks 3 or 6 per region, so this is
# close but not the same).
#
# Usage: scripts/xdelta3-chunks.sh OLD NEW [LEVEL...]   (needs python3 with pip, gcc; the
#        dedelta binary from DEDELTA_BIN or target/release/dedelta)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${DEDELTA_BIN:-$here/../target/release/dedelta}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/dedelta-xdelta3
version=0.0.5
src=$cache/xdelta3-$version/xdelta3/lib
if [ ! -f "$src/xdelta3.c" ]; then
  mkdir -p "$cache"
  python3 -m pip download --quiet --no-binary :all: --no-deps "xdelta3==$version" -d "$cache"
  tar xzf "$cache/xdelta3-$version.tar.gz" -C "$cache"
fi
exe=$cache/xdelta3-chunks
if [ ! -x "$exe" ] || [ "$here/xdelta3-chunks.c" -nt "$exe" ]; then
  gcc -O2 -w -I"$src" -DSIZEOF_SIZE_T=8 -DSIZEOF_UNSIGNED_LONG_LONG=8 -DXD3_USE_LARGEFILE64=1 \
    -o "$exe" "$here/xdelta3-chunks.c" -lm
fi
[ $# -ge 2 ] || { echo "usage: $0 OLD NEW [LEVEL...]" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" bench delta "$1" "$2" --dump-pairs "$work/pairs"
XD3_DELTAS_DIR=$work "$exe" "$work/pairs" "${@:3}" | while read -r line; do
  echo "$line"
  level=$(sed -E 's/.*"codec":"xdelta3-([0-9]+)".*/\1/' <<<"$line")
  if command -v zstd >/dev/null && [ -f "$work/xdelta3-$level.bin" ]; then
    mkdir -p "$work/regions-$level"
    split -b 131072 "$work/xdelta3-$level.bin" "$work/regions-$level/r"
    total=0
    for r in "$work/regions-$level"/r*; do
      total=$((total + $(zstd -q -6 -c "$r" | wc -c)))
    done
    echo "xdelta3-$level deltas stored (128 KiB regions, zstd -6): $total bytes"
  fi
done
