"""What an allocation costs a CuPy program: ROUNDS rounds of ``cp.empty(n)`` and its release
(n cycling over 256 B, 4 KiB, 64 KiB, 1 MiB), with CuPy's own pool, emm's C-level allocator
and emm's Python allocator, each mode in fresh processes, interleaved, PROCESSES times; the
figure of a process is its fastest of three passes. Writes OUT/cupy-alloc.json with the
median ns per pair of each mode.

usage: python3 cupy_alloc.py OUT_DIR
       python3 cupy_alloc.py --mode cupy|emm|emm-python     (prints one process's figure)
"""

import json
import os
import statistics
import subprocess
import sys
import time

ROUNDS = 200_000
PROCESSES = 3
MODES = ["cupy", "emm", "emm-python"]
SIZES = [256, 4096, 65536, 1 << 20]


def one(mode):
    import cupy as cp

    if mode != "cupy":
        import emm.cupy

        emm.cupy.use_emm(c_level=mode == "emm")
    for s in SIZES:
        cp.empty(s, dtype=cp.uint8)
    cp.cuda.Device().synchronize()
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        for i in range(ROUNDS):
            a = cp.empty(SIZES[i & 3], dtype=cp.uint8)
            del a
        ns = (time.perf_counter() - t0) / ROUNDS * 1e9
        best = ns if best is None else min(best, ns)
    print(json.dumps({"mode": mode, "ns_per_pair": best}))


def main():
    if sys.argv[1:2] == ["--mode"]:
        return one(sys.argv[2])
    out = sys.argv[1]
    runs = {m: [] for m in MODES}
    for _ in range(PROCESSES):
        for m in MODES:
            p = subprocess.run([sys.executable, __file__, "--mode", m], capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                print(p.stdout + p.stderr)
                return 1
            runs[m].append(json.loads(p.stdout.strip().splitlines()[-1])["ns_per_pair"])
    median = {m: statistics.median(v) for m, v in runs.items()}
    summary = {
        "rounds": ROUNDS,
        "ns_per_pair": runs,
        "median_ns_per_pair": median,
        "emm_over_cupy": median["emm"] / median["cupy"],
        "emm_python_over_cupy": median["emm-python"] / median["cupy"],
    }
    with open(os.path.join(out, "cupy-alloc.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print({k: v for k, v in summary.items() if k != "ns_per_pair"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
