"""Step times of the real traces under several allocators, compared run against run: writes
benchmarks/traces/gpu-steps.json (every run's step times and memory, the raw data) and
benchmarks/data/trace-steps.csv (the table the book shows).

usage: python3 benchmarks/scripts/trace_steps.py [--into DIR] RUN RESULTS.json...
   RUN names the row of benchmarks/data/runs.csv the results come from. RESULTS.json are what
   `REPS=N ALLOCATORS="caching pool-vmm-tight" benchmarks/traces/run.sh OUT` wrote, or a
   gpu-steps.json written before (its runs are kept as they are). --into DIR writes
   DIR/traces/gpu-steps.json and DIR/data/trace-steps.csv instead (default: benchmarks/).

A workload's steps are the same in every run (record.py seeds them), so the comparison is step
by step: for each step after the first two (which load kernels and fill pools), the median of
its time over the runs of each allocator; a row gives the sum of those medians and, against
the caching allocator, the median over steps of the ratio of the medians. Held memory is what
nvidia-smi saw the process take at its peak, in MiB.
"""

import csv
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASELINE = "caching"
WARM_STEPS = 2


def normalized(run):
    """One run as gpu-steps.json keeps it."""
    if "held_mib" in run:
        return run
    return {
        "workload": run["workload"],
        "allocator": run["allocator"],
        "move_share": run.get("move_share"),
        "rep": run.get("rep", 0),
        "step_seconds": run["step_seconds"],
        "held_mib": run["smi_used_mib_peak"] - run["smi_used_mib_first"],
        "peak_live_bytes": run["peak_live_bytes"],
        "device": run["device"],
    }


def main():
    args = sys.argv[1:]
    into = os.path.join(ROOT, "benchmarks")
    if args[:1] == ["--into"] and len(args) > 1:
        into, args = args[1], args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    name, files = args[0], args[1:]
    raw = os.path.join(into, "traces", "gpu-steps.json")
    table = os.path.join(into, "data", "trace-steps.csv")
    loaded = [json.load(open(f)) for f in files]
    runs = [
        normalized(r)
        for d in loaded
        for r in (d["runs"] if isinstance(d, dict) else d)
        if "step_seconds" in r
    ]
    runs = [r for r in runs if not str(r["allocator"]).endswith("(recording its trace)")]
    for path in (raw, table):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(raw, "w") as f:
        json.dump({"run": name, "runs": runs}, f, indent=None, separators=(",", ":"))
        f.write("\n")
    rows = []
    for trace in sorted({r["workload"] for r in runs}):
        of = {}
        for r in runs:
            if r["workload"] == trace:
                of.setdefault(r["allocator"], []).append(r)
        steps = min(len(r["step_seconds"]) for rs in of.values() for r in rs)
        medians = {
            a: [statistics.median(r["step_seconds"][i] for r in rs) for i in range(WARM_STEPS, steps)]
            for a, rs in of.items()
        }
        base = medians.get(BASELINE)
        for a, rs in sorted(of.items(), key=lambda kv: kv[0] != BASELINE):
            ratio = (
                statistics.median(m / b for m, b in zip(medians[a], base)) if base else None
            )
            rows.append({
                "run": name,
                "trace": trace,
                "allocator": a,
                "runs": len(rs),
                "timed_steps": steps - WARM_STEPS,
                "step_sum_s": f"{sum(medians[a]):.3f}",
                "step_ratio": f"{ratio:.3f}" if ratio is not None else "",
                "held_mib": int(statistics.median(r["held_mib"] for r in rs)),
                "peak_live_gib": f"{statistics.median(r['peak_live_bytes'] for r in rs) / 2**30:.2f}",
            })
    with open(table, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"{len(runs)} runs -> {raw}, {len(rows)} rows -> {table}")


if __name__ == "__main__":
    main()
