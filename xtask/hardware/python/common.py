"""Helpers of the GPU workloads: run a script's modes in fresh processes (an allocator must be
chosen before a library's first allocation), device memory in use, results as JSON."""

import argparse
import json
import os
import subprocess
import sys
import time


def mem_used_bytes():
    """Device 0's memory in use (total - free), from the driver (cuMemGetInfo), whatever
    library holds it."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    if cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) != 0:
        return None
    return total.value - free.value


def run_modes(script, modes, out_dir, extra_env=None, timeout=240):
    """Runs `script --mode M --json FILE` for each mode in a fresh process; returns
    {mode: result dict or {"error": ...}}."""
    results = {}
    for mode in modes:
        path = os.path.join(out_dir, "%s-%s.json" % (os.path.basename(script)[:-3], mode))
        env = dict(os.environ)
        env.update((extra_env or {}).get(mode, {}))
        t0 = time.time()
        try:
            p = subprocess.run(
                [sys.executable, script, "--mode", mode, "--json", path],
                env=env, capture_output=True, text=True, timeout=timeout,
            )
            log = p.stdout + p.stderr
            rc = p.returncode
        except subprocess.TimeoutExpired as e:
            log, rc = "timeout after %ss: %s" % (timeout, e), 124
        with open(path[:-5] + ".log", "w") as f:
            f.write(log)
        try:
            with open(path) as f:
                results[mode] = json.load(f)
        except (OSError, ValueError):
            results[mode] = {"error": "exit %s after %.1f s; see %s" % (rc, time.time() - t0, path[:-5] + ".log"),
                             "tail": log[-2000:]}
    return results


def command_line(one):
    """The command line of a workload script. `--mode M --json FILE`, as run_modes starts each
    mode in a fresh process, runs that mode through `one(M, FILE)` and gives None; `OUT_DIR`
    gives the folder, for the script to run and compare every mode."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--mode")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.mode:
        one(a.mode, a.json)
        return None
    return a.out


def write_json(path, data):
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)


def max_rel_diff(a, b):
    """The largest relative difference between two equally long lists of numbers (inf when
    their lengths differ)."""
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        scale = max(abs(x), abs(y), 1e-30)
        worst = max(worst, abs(x - y) / scale)
    return worst
