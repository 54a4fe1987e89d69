"""An A/B's processes split by the host's two speeds: for each build and workload, the processes
under 40 ns an op (count, median), those at or over (count, median), and the fastest, from each
process's median pass and then its fastest. Usage: python3 summ.py ab.txt "base bl" """
import statistics
import sys

rows = [line.split() for line in open(sys.argv[1])]
for col, name in ((3, "median pass"), (4, "min pass")):
    print("==", name, ": processes under 40 ns (count, median) and at or over (count, median); fastest")
    for build in sys.argv[2].split():
        out = []
        for w in ("w1", "w2", "w3"):
            xs = sorted(float(r[col]) for r in rows if r[1] == build and r[2] == w)
            fast = [x for x in xs if x < 40]
            slow = [x for x in xs if x >= 40]
            med = lambda v: statistics.median(v) if v else 0
            out.append(f"{w} {len(fast):2d} {med(fast):.2f} | {len(slow):2d} {med(slow):.2f} | {xs[0]:.2f}")
        print(build, " || ".join(out))
