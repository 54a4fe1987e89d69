# Session 18, call 8: the PyTorch and CuPy workloads of the Python acceptance, each mode in its
# own process, alternated five times, to tell the allocator's share of their time ratio from
# the host's changes of speed (call 7 ran one process of each).
set -u
H=$(pwd)/target/hardware/python
export PYTHONPATH="$H:$H/env" EMM_LIBRARY="$H/emm/libemm.so" EMM_BACKEND=cuda
unset EMM_MEMORY_MANAGER
uptime > $OUT/host.txt
for i in 1 2 3 4 5; do
  for m in torch emm; do
    timeout 60 python3 $H/torch_workload.py --mode $m --json $OUT/torch-$m-$i.json > /dev/null 2>> $OUT/err.log
  done
  for m in cupy emm; do
    timeout 60 python3 $H/cupy_workload.py --mode $m --json $OUT/cupy-$m-$i.json > /dev/null 2>> $OUT/err.log
  done
done
python3 - "$OUT" <<'PY'
import json, sys, glob, statistics as st
out = sys.argv[1]
for w, base in (("torch", "torch"), ("cupy", "cupy")):
    rows = []
    for i in range(1, 6):
        try:
            e = json.load(open(f"{out}/{w}-emm-{i}.json"))["seconds"]
            b = json.load(open(f"{out}/{w}-{base}-{i}.json"))["seconds"]
        except Exception as x:
            print(w, i, "missing", x); continue
        rows.append((b, e, e / b))
        print(f"{w} round {i}: {base} {b:.3f} s, emm {e:.3f} s, emm/{base} {e / b:.3f}")
    if rows:
        print(f"{w}: median emm/{base} {st.median(r[2] for r in rows):.3f}; fastest {base} {min(r[0] for r in rows):.3f} s, fastest emm {min(r[1] for r in rows):.3f} s")
PY
