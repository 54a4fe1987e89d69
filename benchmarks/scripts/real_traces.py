"""Writes benchmarks/data/real-traces.csv: for each real PyTorch trace in benchmarks/traces/,
peak memory held over peak live bytes under each allocator on the GPU (from the JSON that
benchmarks/traces/run.sh wrote there) and under emm's resources on the simulated GPU (replayed
now with `emm replay --json`).

usage: python3 benchmarks/scripts/real_traces.py GPU_RESULTS.json [EMM_BINARY]
   (EMM_BINARY defaults to target/release/emm: cargo build --release -p emm-cli)
"""

import csv
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRACES = ("transformer-train", "llm-decode", "cnn-varsize", "finetune-checkpoint")
GPU_ALLOCATORS = ("caching", "expandable", "pool", "pool-vmm", "pool-vmm-tight")
SIM_RESOURCES = ("pool", "pool-vmm", "pool-vmm-tight")
# The row of benchmarks/data/runs.csv that says how GPU_RESULTS.json was made.
RUN = "h200-traces"


def main():
    gpu_json = sys.argv[1]
    emm = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "target", "release", "emm")
    runs = json.load(open(gpu_json))
    rows = []
    for trace in TRACES:
        by = {r["allocator"]: r for r in runs if r["workload"] == trace}
        live = by["caching"]["peak_live_bytes"]
        row = {"run": RUN, "trace": trace, "events": by.get("caching (recording its trace)", {}).get("trace_events", ""),
               "peak_live_gib": "%.2f" % (live / 2**30), "gpu": by["caching"]["device"],
               "torch": by["caching"]["torch"]}
        c = by["caching"]
        # What the process took beside the allocator (CUDA's modules, cuBLAS's and cuDNN's
        # handles): the device memory nvidia-smi saw under the caching allocator, less what it
        # reserved. Every column below includes it.
        row["non_allocator_mib"] = c["smi_used_mib_peak"] - c["smi_used_mib_first"] - c["max_memory_reserved"] // 2**20
        for a in GPU_ALLOCATORS:
            r = by.get(a)
            if r is None:
                row["gpu_" + a] = ""
                row["alloc_" + a] = ""
                row["step_ms_" + a] = ""
                continue
            # Device memory the process took at its peak, as nvidia-smi saw it every 20 ms,
            # over the live bytes PyTorch counted for the same trace.
            held = (r["smi_used_mib_peak"] - r["smi_used_mib_first"]) * 2**20
            row["gpu_" + a] = "%.3f" % (held / live)
            # The allocator alone: less what the process took beside it.
            row["alloc_" + a] = "%.3f" % ((held - row["non_allocator_mib"] * 2**20) / live)
            row["step_ms_" + a] = "%.1f" % (r["step_seconds_median"] * 1e3)
        for res in SIM_RESOURCES:
            out = subprocess.run([emm, "replay", os.path.join(ROOT, "benchmarks", "traces", trace + ".pickle.gz"),
                                  "--resource", res, "--json"], capture_output=True, text=True, check=True)
            rep = json.loads(out.stdout)
            row["sim_" + res] = "%.3f" % (rep["peak_held_bytes"] / rep["peak_live_bytes"])
        rows.append(row)
    path = os.path.join(ROOT, "benchmarks", "data", "real-traces.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print("wrote", path)


if __name__ == "__main__":
    main()
