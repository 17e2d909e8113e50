# Reads a DEDELTA_S3_TRACE file (START_MS END_MS OP KIND BYTES THREAD NAME) and prints the
# request count per op/kind, the number of sequential rounds (maximal groups of
# overlapping requests, in start order) and the longest chain (the most requests that ran
# one after another, each starting after the one before it ended). The rounds undercount a
# chain that ran beside a long request (config; keys listing || lock PUT, then lock listing
# is two rounds but three requests in a row); the chain counts it, and with every request
# taking about the same time (scripts/latency-proxy.py, or a Garage cluster) it is the
# number of round trips on the critical path.
import sys, collections
rows = []
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 5: continue
    rows.append((float(p[0]), float(p[1]), p[2], p[3], int(p[4]), p[6] if len(p) > 6 else ''))
rows.sort()
c = collections.Counter((r[2], r[3]) for r in rows)
rounds = []
end = -1
for r in rows:
    if r[0] >= end:
        rounds.append([r])
        end = r[1]
    else:
        rounds[-1].append(r)
        end = max(end, r[1])
chain = []
for i, r in enumerate(rows):
    chain.append(1 + max((chain[j] for j in range(i) if rows[j][1] <= r[0]), default=0))
print(f"requests {len(rows)}, sequential rounds {len(rounds)}, longest chain {max(chain, default=0)}")
print("  " + ", ".join(f"{op} {k}: {n}" for (op, k), n in sorted(c.items())))
if len(sys.argv) > 2:
    for g in rounds:
        print(f"  {g[0][0]:9.1f} " + " | ".join(f"{r[2]} {r[3]} {r[5][:8]}" for r in g[:6]) + (f" (+{len(g)-6})" if len(g) > 6 else ""))
