#!/usr/bin/env bash
# What fresh memory costs on this machine: maps, fills and unmaps 64 MiB (Argon2id's memory
# in every encrypted dedelta command) five times in each of three processes, on 4 KiB pages
# and on transparent huge pages (madvise). On a virtual machine each first touch of a page can
# be a fault the hypervisor sees, which made every dedelta command's fixed cost vary between
# machines (docs/benchmarks.md, 2026-11-28). Needs a C compiler.
# Usage: scripts/fresh-memory.sh
set -euo pipefail
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/touch.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  size_t len = 64 << 20, huge = 2 << 20; int use_huge = argc > 1 && atoi(argv[1]);
  for (int i = 0; i < 5; i++) {
    double t0 = now();
    char *p = mmap(0, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    char *a = (char *)(((size_t)p + huge - 1) & ~(huge - 1));
    if (use_huge) madvise(a, len, MADV_HUGEPAGE);
    memset(a, 1, len);
    double t1 = now();
    munmap(p, len + huge);
    printf("%s pages: 64 MiB touched in %.1f ms (%.0f MB/s)\n", use_huge ? "2 MiB" : "4 KiB", (t1 - t0) * 1e3, len / 1e6 / (t1 - t0));
  }
  return 0;
}
C
cc -O2 -o "$tmp/touch" "$tmp/touch.c"
for pages in 0 1; do for _ in 1 2 3; do "$tmp/touch" "$pages"; done; done
