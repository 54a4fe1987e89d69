# Paired A/B: each round ran every build back to back; the ratio build/base per round and
# workload (ab2.sh's fourth-fastest pass, then its fastest), median over rounds; and over rounds where both
# processes ran fast (under 40 ns).
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
builds = sys.argv[2].split()
base = builds[0]
d = {(int(r[0]), r[1], r[2]): (float(r[3]), float(r[4])) for r in rows if len(r) == 5}
rounds = sorted({k[0] for k in d})
for v in builds[1:]:
    out = []
    for w in ('w1', 'w2', 'w3'):
        for k, name in ((0, 'med'), (1, 'min')):
            pairs = [(d[(i, v, w)][k], d[(i, base, w)][k]) for i in rounds if (i, v, w) in d and (i, base, w) in d]
            rs = [a / b for a, b in pairs]
            fr = [a / b for a, b in pairs if a < 40 and b < 40]
            out.append('%s %s %.3f (%d fast: %.3f)' % (w, name, st.median(rs), len(fr), st.median(fr) if fr else 0))
    print(v, ' | '.join(out))
