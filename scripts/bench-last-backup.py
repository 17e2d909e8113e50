#!/usr/bin/env python3
"""Alternates builds on one backup: the last of a series of versions, each time on a fresh copy
of the repository and cache that the earlier versions made (one process per version, as
scripts/bench-stages.sh), so that only that backup is timed. Prints the median, first and
third quartiles and minimum wall time per build. Before each run, memory is written and freed
(as scripts/bench-speed.sh's `warm`, WARM_MB, default 2048).

Usage: scripts/bench-last-backup.py STATE_DIR RUNS BIN... -- FILE...
  STATE_DIR  where the repository and cache after FILE[:-1] are kept (made by the first BIN
             if missing; put it on tmpfs, e.g. /dev/shm/..., to keep disk writeback out)
  RUNS       runs per build
Example: scripts/bench-last-backup.py /dev/shm/lb 12 old/dedelta new/dedelta -- $(ls -v R/*.rdb)
"""
import os
import shutil
import statistics
import subprocess
import sys
import time

args = sys.argv[1:]
if "--" not in args or len(args) < 5:
    sys.exit(__doc__)
sep = args.index("--")
state, runs, bins, files = args[0], int(args[1]), args[2:sep], args[sep + 1:]
env = dict(os.environ, DEDELTA_PASSWORD=os.environ.get("DEDELTA_PASSWORD", "bench"))


def backup(binary, repo, cache, path):
    with open(path, "rb") as f:
        subprocess.run([binary, "backup", "-q", "-r", repo, "--stdin", "--stdin-name", "data"],
                       stdin=f, env=dict(env, DEDELTA_CACHE_DIR=cache), check=True,
                       stdout=subprocess.DEVNULL)


if not os.path.isdir(state):
    os.makedirs(state)
    subprocess.run([bins[0], "init", "-r", f"{state}/repo"], check=True, stdout=subprocess.DEVNULL,
                   env=dict(env, DEDELTA_CACHE_DIR=f"{state}/cache"))
    for path in files[:-1]:
        backup(bins[0], f"{state}/repo", f"{state}/cache", path)
work = state.rstrip("/") + ".run"
warm_mb = int(os.environ.get("WARM_MB", "2048"))
times = {b: [] for b in bins}
for _ in range(runs):
    for b in bins:
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run(["cp", "-a", state, work], check=True)
        subprocess.run(["sync"], check=True)
        if warm_mb:
            subprocess.run(f"head -c {warm_mb}M /dev/zero > /dev/shm/bench-last-warm; "
                           "rm -f /dev/shm/bench-last-warm", shell=True, check=True)
        t = time.perf_counter()
        backup(b, f"{work}/repo", f"{work}/cache", files[-1])
        times[b].append(time.perf_counter() - t)
shutil.rmtree(work, ignore_errors=True)
for b, v in times.items():
    v.sort()
    q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
    print(f"{b}: median {statistics.median(v) * 1000:.1f} ms, quartiles {q[0] * 1000:.1f} / "
          f"{q[2] * 1000:.1f} ms, min {v[0] * 1000:.1f} ms ({len(v)} runs)")
