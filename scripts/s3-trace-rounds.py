# Reads a DEDELTA_S3_TRACE file (START_MS END_MS OP KIND BYTES THREAD NAME) and prints the
# request count per op/kind and the number of sequential rounds (maximal groups of
# overlapping requests, in start order): the round trips on the critical path.
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
print(f"requests {len(rows)}, sequential rounds {len(rounds)}")
print("  " + ", ".join(f"{op} {k}: {n}" for (op, k), n in sorted(c.items())))
if len(sys.argv) > 2:
    for g in rounds:
        print(f"  {g[0][0]:9.1f} " + " | ".join(f"{r[2]} {r[3]} {r[5][:8]}" for r in g[:6]) + (f" (+{len(g)-6})" if len(g) > 6 else ""))
