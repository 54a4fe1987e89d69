"""The ratio of RMM binning to emm's pool-vmm in a bundle's rounds.txt, four ways: median against
median (the README's), mean against mean, the median of the per-round ratios, fastest against
fastest. Usage: python3 ratio_stats.py run/rounds.txt"""
import json, re, statistics as st, sys

rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"ROUND (\d+) (.*)", line)
    if not m:
        continue
    r, rest = int(m.group(1)), m.group(2)
    if rest.startswith("{"):
        j = json.loads(rest)
        rows.setdefault(r, {})[("emm", j["workload"])] = j["ns_per_op"]
    else:
        m2 = re.match(r"RESULT (\S+) (W\d) .*ns_per_op=([\d.]+)", rest)
        if m2:
            rows.setdefault(r, {})[(m2.group(1), m2.group(2))] = float(m2.group(3))
for w in ("W1", "W2", "W3"):
    both = [rows[r] for r in sorted(rows) if ("emm", w) in rows[r] and ("C_rmm_binning", w) in rows[r]]
    e = [x[("emm", w)] for x in both]
    b = [x[("C_rmm_binning", w)] for x in both]
    paired = [bb / ee for bb, ee in zip(b, e)]
    print(f"{w}: {len(both)} rounds; median/median {st.median(b) / st.median(e):.2f}, "
          f"mean/mean {st.mean(b) / st.mean(e):.2f}, paired median {st.median(paired):.2f}, "
          f"fastest/fastest {min(b) / min(e):.2f}")
