/* Real xdelta3 (3.0.x, its own C source) at the chunk level, in process: every (base, target)
 * pair of a `dedelta bench delta --dump-pairs FILE` file is encoded with xd3_encode_memory and
 * decoded with xd3_decode_memory, as `bench delta` times its codecs (single thread, all pairs,
 * the fastest of RUNS runs), and every decode is compared with its target.
 *
 * Built and run by scripts/xdelta3-chunks.sh, which fetches the xdelta3 source and includes it
 * here; not part of the cargo build. One JSON object per compression level on stdout, with the
 * field names of `bench delta --json` (MB = 10^6 target bytes). A pair xdelta3 cannot shrink
 * (XD3 returns ENOSPC: the delta would not be smaller than the target) counts its target length
 * as its delta, as a store would keep the chunk in full. No secondary compression (the memory
 * API's default; the CLI's `-S none`).
 *
 * With XD3_DELTAS_DIR set, each level's deltas are also written, concatenated, to
 * $XD3_DELTAS_DIR/xdelta3-LEVEL.bin (the script compresses them as a store would).
 *
 * Usage: xdelta3-chunks PAIRS [LEVEL...]   (levels 1..9; default 1 3 9; 3 is the CLI default) */
#define _GNU_SOURCE 1
#define NOT_MAIN 1
#include "xdelta3.h"
#include "xdelta3.c"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 5

struct pair {
  const uint8_t *base, *target;
  uint32_t base_len, target_len;
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PAIRS [LEVEL...]\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = malloc(len > 0 ? len : 1);
  if (fread(data, 1, len, f) != (size_t)len) {
    perror("read");
    return 1;
  }
  fclose(f);
  size_t n = 0, cap = 1024;
  struct pair *pairs = malloc(cap * sizeof *pairs);
  uint64_t input_bytes = 0;
  uint32_t max_target = 0;
  for (long at = 0; at < len;) {
    if (n == cap) pairs = realloc(pairs, (cap *= 2) * sizeof *pairs);
    struct pair *p = &pairs[n++];
    if (at + 4 > len) goto bad;
    p->base_len = le32(data + at);
    p->base = data + at + 4;
    at += 4 + (long)p->base_len;
    if (at + 4 > len) goto bad;
    p->target_len = le32(data + at);
    p->target = data + at + 4;
    at += 4 + (long)p->target_len;
    if (at > len) goto bad;
    input_bytes += p->target_len;
    if (p->target_len > max_target) max_target = p->target_len;
  }
  int default_levels[] = {1, 3, 9};
  int nlevels = argc > 2 ? argc - 2 : 3;
  uint8_t **deltas = malloc(n * sizeof *deltas);
  usize_t *delta_lens = malloc(n * sizeof *delta_lens);
  int *stored_raw = malloc(n * sizeof *stored_raw);
  for (size_t i = 0; i < n; i++) deltas[i] = malloc(pairs[i].target_len + 64);
  uint8_t *out = malloc(max_target + 64);
  for (int l = 0; l < nlevels; l++) {
    int level = argc > 2 ? atoi(argv[2 + l]) : default_levels[l];
    int flags = level << XD3_COMPLEVEL_SHIFT;
    double enc = 1e30, dec = 1e30;
    for (int run = 0; run < RUNS; run++) {
      double t = now();
      for (size_t i = 0; i < n; i++) {
        int r = xd3_encode_memory(pairs[i].target, pairs[i].target_len, pairs[i].base,
                                  pairs[i].base_len, deltas[i], &delta_lens[i],
                                  pairs[i].target_len, flags);
        stored_raw[i] = r == ENOSPC;
        if (r != 0 && r != ENOSPC) {
          fprintf(stderr, "pair %zu: encode failed: %d\n", i, r);
          return 1;
        }
      }
      t = now() - t;
      if (t < enc) enc = t;
    }
    int roundtrip_ok = 1;
    for (int run = 0; run < RUNS; run++) {
      double t = now();
      for (size_t i = 0; i < n; i++) {
        if (stored_raw[i]) continue;
        usize_t got;
        int r = xd3_decode_memory(deltas[i], delta_lens[i], pairs[i].base, pairs[i].base_len,
                                  out, &got, max_target + 64, flags);
        if (r != 0 || got != pairs[i].target_len ||
            (run == 0 && memcmp(out, pairs[i].target, got) != 0))
          roundtrip_ok = 0;
      }
      t = now() - t;
      if (t < dec) dec = t;
    }
    uint64_t delta_bytes = 0, raw = 0;
    for (size_t i = 0; i < n; i++) {
      delta_bytes += stored_raw[i] ? pairs[i].target_len : delta_lens[i];
      raw += stored_raw[i];
    }
    const char *dir = getenv("XD3_DELTAS_DIR");
    if (dir) {
      char path[4096];
      snprintf(path, sizeof path, "%s/xdelta3-%d.bin", dir, level);
      FILE *o = fopen(path, "wb");
      if (!o) {
        perror(path);
        return 1;
      }
      for (size_t i = 0; i < n; i++) {
        if (stored_raw[i])
          fwrite(pairs[i].target, 1, pairs[i].target_len, o);
        else
          fwrite(deltas[i], 1, delta_lens[i], o);
      }
      fclose(o);
    }
    printf("{\"codec\":\"xdelta3-%d\",\"encode_mb_per_s\":%.1f,\"decode_mb_per_s\":%.1f,"
           "\"input_bytes\":%llu,\"delta_bytes\":%llu,\"pairs\":%zu,\"pairs_not_shrunk\":%llu,"
           "\"roundtrip_ok\":%s}\n",
           level, input_bytes / 1e6 / enc, input_bytes / 1e6 / dec,
           (unsigned long long)input_bytes, (unsigned long long)delta_bytes, n,
           (unsigned long long)raw, roundtrip_ok ? "true" : "false");
  }
  return 0;
bad:
  fprintf(stderr, "%s: truncated pair %zu\n", argv[1], n);
  return 1;
}
