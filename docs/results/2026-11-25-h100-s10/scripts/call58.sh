# Session 10, call 58 (H100): the bundle of the session's pool (masked slab views, 7-instruction
# list index, heap inlined) beside the peers; then 8 rounds of one process each of emm's
# pool-vmm (W1-W3), RMM binning and PyTorch's caching allocator (each W1, W2, W3), interleaved,
# so that every cell has 8 processes on both sides in the same call.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
PARTS=bench,peers BENCH_RESOURCES=pool-vmm,pool,binning ANCHOR_BUDGET_S=150 \
  RESULTS="$R/run" timeout 420 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
B=/tmp/anchors_build; OPS=/tmp/anchors_ops
for i in 1 2 3 4 5 6 7 8; do
  $H/bin/emm bench --backend cuda --json --resource pool-vmm 2>/dev/null | sed "s/^/ROUND $i /"
  for w in W1 W2 W3; do $B/bench_rmm binning $OPS $w 2>/dev/null | sed "s/^/ROUND $i /"; done
  for w in W1 W2 W3; do $B/bench_torch torch $OPS $w 2>/dev/null | sed "s/^/ROUND $i /"; done
done > $R/rounds.txt
python3 - "$R/rounds.txt" <<'PY' | tee $R/rounds-summary.txt
import sys, re, json, statistics as st
cells = {}
for line in open(sys.argv[1]):
    m = re.match(r"ROUND (\d+) (.*)", line.strip())
    if not m: continue
    body = m.group(2)
    if body.startswith("{"):
        d = json.loads(body); key = ("emm pool-vmm", d["workload"]); v = d["ns_per_op"]
    elif body.startswith("RESULT"):
        f = body.split(); kv = dict(x.split("=", 1) for x in f[3:] if "=" in x)
        if kv.get("status") != "ok": continue
        key = (f[1], f[2]); v = float(kv["ns_per_op"])
    else: continue
    cells.setdefault(key, []).append(v)
for k in sorted(cells):
    vs = sorted(cells[k])
    print(f"{k[0]:16} {k[1]} n={len(vs)} median={st.median(vs):.1f} min={vs[0]:.1f} max={vs[-1]:.1f} all={' '.join(f'{x:.1f}' for x in vs)}")
PY
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -3 $R/run.log
tar xzf "$R/run.tgz" -O run/report.md 2>/dev/null | sed -n '/Standard workloads/,/cost model/p' | head -12
tar xzf "$R/run.tgz" -O run/peers/results.md 2>/dev/null | sed -n '/Speed/,/^## Device/p' | head -14
tar xzf "$R/run.tgz" -O run/host-floor.txt 2>/dev/null | tr '\n' ' '
