"""Writes OUT/summary.md from the Python acceptance's results (numba-summary.json, cupy.json,
torch.json, shared_pool.json) and prints it.

usage: python3 report_python.py OUT_DIR
"""

import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fmt(v, spec=".3f"):
    return format(v, spec) if isinstance(v, (int, float)) else str(v)


def main(out):
    lines = ["# emm's Python acceptance", ""]
    env = os.path.join(out, "env.txt")
    if os.path.exists(env):
        with open(env) as f:
            lines += ["```", f.read().strip(), "```", ""]
    numba = load(os.path.join(out, "numba-summary.json")) or []
    lines += ["| check | verdict | figures |", "|---|---|---|"]
    for r in numba:
        n = r["run"]
        lines.append(
            f"| numba-cuda {r['name']} | {r['verdict']} | {n['ran']} tests, failures {n['failures']}, errors {n['errors']}, "
            f"skipped {n['skipped']} ({r['new_skips']:+d}); new failures {len(r['new_failures'])}, new errors {len(r['new_errors'])} |"
        )
    c = load(os.path.join(out, "cupy.json"))
    if c:
        lines.append(
            f"| CuPy workload, emm vs CuPy's pool | {'PASS' if c.get('same_results') else 'FAIL'} | same results: "
            f"{c.get('same_results')} (bitwise {c.get('bitwise_equal')}), time emm/CuPy {fmt(c.get('time_ratio_emm_over_cupy'))} "
            f"(emm's Python allocator {fmt(c.get('time_ratio_emm_python_over_cupy'))}) |"
        )
    a = load(os.path.join(out, "cupy-alloc.json"))
    if a:
        m = a.get("median_ns_per_pair", {})
        lines.append(
            f"| CuPy allocation cost (cp.empty + release) | measured | median ns per pair: CuPy's pool {fmt(m.get('cupy'), '.0f')}, "
            f"emm C-level {fmt(m.get('emm'), '.0f')}, emm Python {fmt(m.get('emm-python'), '.0f')}; emm/CuPy {fmt(a.get('emm_over_cupy'))} |"
        )
    t = load(os.path.join(out, "torch.json"))
    if t:
        lines.append(
            f"| PyTorch training ({fmt(t['results'].get('emm', {}).get('steps'), '')} steps), emm vs caching allocator | "
            f"{'PASS' if t.get('same_results') else 'FAIL'} | weights bitwise equal: {t.get('same_weights_bitwise')}, "
            f"max loss difference {fmt(t.get('max_relative_loss_difference'), '.2e')}, time emm/torch {fmt(t.get('time_ratio_emm_over_torch'))} |"
        )
    s = load(os.path.join(out, "shared_pool.json"))
    if s:
        p = s.get("peak_held_gib", {})
        lines.append(
            f"| Numba + CuPy + PyTorch in one process | {'PASS' if s.get('same_results') and s.get('numba_used_emm') else 'FAIL'} | "
            f"peak held {fmt(p.get('emm'))} GiB with one emm pool vs {fmt(p.get('own_pools'))} GiB with their own pools "
            f"(ratio {fmt(s.get('peak_ratio_emm_over_own'))}); Numba used emm: {s.get('numba_used_emm')} |"
        )
    for name, data in (("CuPy", c), ("PyTorch", t), ("shared pool", s)):
        for mode, res in ((data or {}).get("results") or {}).items():
            if "error" in res:
                lines.append(f"\n{name} ({mode}) failed: {res['error']}\n```\n{res.get('tail', '')}\n```")
    text = "\n".join(lines) + "\n"
    if os.path.exists(os.path.join(out, "numba-summary.md")):
        with open(os.path.join(out, "numba-summary.md")) as f:
            text += "\n" + f.read()
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
