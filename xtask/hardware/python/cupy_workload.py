"""A CuPy workload with emm as CuPy's allocator and with CuPy's own pool: the same numerical
results (bitwise) and the time ratio.

The workload allocates as real CuPy code does: for each of STEPS steps, arrays of varied sizes
(1 KiB to 64 MiB) from a seeded generator, element-wise work, a matmul, an FFT and reductions;
a checksum of every step's result is kept. Run without --mode it runs both modes in fresh
processes and writes OUT/cupy.json.

Modes: cupy (CuPy's own pool), emm (emm.cupy's C-level allocator), emm-python (its Python
allocator).

usage: python3 cupy_workload.py OUT_DIR            (every mode, compare)
       python3 cupy_workload.py --mode emm|emm-python|cupy --json FILE
"""

import hashlib
import os
import sys
import time

STEPS = 400


def workload():
    import cupy as cp

    rng = cp.random.RandomState(1234)
    digest = hashlib.sha256()
    sizes = [256, 4096, 65536, 1 << 20, 1 << 24]
    keep = []
    values = []
    for step in range(STEPS):
        n = sizes[step % len(sizes)] + (step * 7919) % 4096
        a = rng.standard_normal(n, dtype=cp.float32)
        b = cp.sin(a) * cp.float32(1.5) + a * a
        m = 64 + (step % 5) * 32
        x = rng.standard_normal((m, m), dtype=cp.float32)
        y = x @ x.T
        f = cp.fft.rfft(b[: 1 << 12])
        s = cp.stack([b.sum(), y.trace(), cp.abs(f).max()])
        host = cp.asnumpy(s)
        digest.update(host.tobytes())
        values.extend(float(v) for v in host)
        if step % 10 == 0:
            keep.append(b[:1024].copy())  # some memory lives across steps
        if len(keep) > 20:
            keep.pop(0)
    cp.cuda.Device().synchronize()
    return digest.hexdigest(), values


def one(mode, path):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common
    import cupy as cp

    if mode in ("emm", "emm-python"):
        import emm
        import emm.cupy

        emm.cupy.use_emm(c_level=mode == "emm")
        if mode == "emm" and cp.cuda.get_allocator().__self__.__class__.__name__ != "CFunctionAllocator":
            raise SystemExit("emm.cupy did not install its C-level allocator with this CuPy")
    workload()  # warm-up: kernels compiled, pools filled
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    digest, values = workload()
    seconds = time.perf_counter() - t0
    result = {"mode": mode, "steps": STEPS, "seconds": seconds, "digest": digest, "values": values, "mem_used_after": common.mem_used_bytes()}
    if mode != "cupy":
        import emm

        result["emm_stats"] = emm.stats()
    common.write_json(path, result)


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common

    out = common.command_line(one)
    if out is None:
        return None
    r = common.run_modes(os.path.abspath(__file__), ["cupy", "emm", "emm-python"], out)
    e, c, p = r.get("emm", {}), r.get("cupy", {}), r.get("emm-python", {})
    summary = {"workload": "cupy", "results": r}
    if "digest" in e and "digest" in c:
        summary["bitwise_equal"] = e["digest"] == c["digest"]
        summary["max_relative_difference"] = common.max_rel_diff(e["values"], c["values"])
        summary["same_results"] = summary["bitwise_equal"] or summary["max_relative_difference"] <= 1e-6
        summary["time_ratio_emm_over_cupy"] = e["seconds"] / c["seconds"]
        if "seconds" in p:
            summary["time_ratio_emm_python_over_cupy"] = p["seconds"] / c["seconds"]
    common.write_json(os.path.join(out, "cupy.json"), summary)
    print({k: v for k, v in summary.items() if k != "results"})
    return 0 if summary.get("same_results") else 1


if __name__ == "__main__":
    sys.exit(main())
