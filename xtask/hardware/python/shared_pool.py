"""Numba, CuPy and PyTorch in one process, sharing one emm pool ("emm") or each with its own
pool ("own": Numba's manager, CuPy's pool, PyTorch's caching allocator): the peak device
memory held, sampled from the driver (cuMemGetInfo) at every phase's peak and after it.

Each of ROUNDS rounds runs three phases, one per library, each using PHASE_BYTES at its peak
and then dropping everything: with one pool, memory one library freed serves the next; with
three pools, each keeps what it freed.

usage: python3 shared_pool.py OUT_DIR              (both modes in fresh processes, compare)
       python3 shared_pool.py --mode emm|own --json FILE
"""

import os
import sys
import time

ROUNDS = 3
PHASE_BYTES = 2 << 30
PIECES = 16


def one(mode, path):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common

    if mode == "emm":
        os.environ["NUMBA_CUDA_MEMORY_MANAGER"] = "emm.numba"
        import emm.cupy
        import emm.torch

        emm.torch.use_emm()
        emm.cupy.use_emm()
    else:
        os.environ.pop("NUMBA_CUDA_MEMORY_MANAGER", None)
    import cupy as cp
    import numpy as np
    import torch
    from numba import cuda

    @cuda.jit
    def axpy(out, a, x, y):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i] + y[i]

    # Contexts, handles and kernels first, so the baseline holds each library's fixed cost.
    cuda.to_device(np.ones(16, np.float32))
    cp.ones(16).sum()
    (torch.ones(16, device="cuda") * 2).sum().item()
    axpy[1, 32](cuda.device_array(16, np.float32), 1.0, cuda.to_device(np.ones(16, np.float32)), cuda.to_device(np.ones(16, np.float32)))
    cuda.synchronize()
    base = common.mem_used_bytes()
    samples = []
    n = PHASE_BYTES // PIECES // 4  # float32 elements per piece
    checks = []

    def sample(label):
        torch.cuda.synchronize()
        samples.append({"at": label, "held": common.mem_used_bytes() - base})

    t0 = time.perf_counter()
    for r in range(ROUNDS):
        xs = [cuda.device_array(n, np.float32) for _ in range(PIECES)]
        for x in xs:
            axpy[(n + 255) // 256, 256](x, 2.0, xs[0], xs[0])
        cuda.synchronize()
        sample("numba %d peak" % r)
        del xs, x
        sample("numba %d after" % r)

        cs = [cp.full(n, float(i), dtype=cp.float32) for i in range(PIECES)]
        checks.append(float(sum(c[:8].sum() for c in cs)))
        sample("cupy %d peak" % r)
        del cs
        sample("cupy %d after" % r)

        ts = [torch.full((n,), float(i), device="cuda") for i in range(PIECES)]
        checks.append(float(sum(t[:8].sum() for t in ts)))
        sample("torch %d peak" % r)
        del ts
        sample("torch %d after" % r)
    seconds = time.perf_counter() - t0
    result = {
        "mode": mode,
        "rounds": ROUNDS,
        "phase_bytes": PHASE_BYTES,
        "baseline_used": base,
        "peak_held": max(s["held"] for s in samples),
        "held_at_end": samples[-1]["held"],
        "samples": samples,
        "checks": checks,
        "seconds": seconds,
    }
    if mode == "emm":
        import emm

        result["emm_stats"] = emm.stats()
        result["numba_manager"] = type(cuda.current_context().memory_manager).__module__
    common.write_json(path, result)


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common

    out = common.command_line(one)
    if out is None:
        return None
    r = common.run_modes(os.path.abspath(__file__), ["own", "emm"], out)
    e, o = r.get("emm", {}), r.get("own", {})
    summary = {"workload": "numba+cupy+torch in one process", "results": r}
    if "peak_held" in e and "peak_held" in o:
        gib = float(1 << 30)
        summary["peak_held_gib"] = {"emm": e["peak_held"] / gib, "own_pools": o["peak_held"] / gib}
        summary["held_at_end_gib"] = {"emm": e["held_at_end"] / gib, "own_pools": o["held_at_end"] / gib}
        summary["peak_ratio_emm_over_own"] = e["peak_held"] / max(o["peak_held"], 1)
        summary["same_results"] = e["checks"] == o["checks"]
        summary["numba_used_emm"] = e.get("numba_manager") == "emm.numba"
    common.write_json(os.path.join(out, "shared_pool.json"), summary)
    print({k: v for k, v in summary.items() if k != "results"})
    return 0 if summary.get("same_results") and summary.get("numba_used_emm") else 1


if __name__ == "__main__":
    sys.exit(main())
