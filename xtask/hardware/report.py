"""Turns a hardware run's results folder into report.md and report.json.
usage: python3 report.py RESULTS_DIR
"""
import glob
import json
import os
import re
import sys

res = sys.argv[1]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def lines(path):
    out = []
    try:
        for line in open(path):
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


env = open(os.path.join(res, "env.txt")).read() if os.path.exists(os.path.join(res, "env.txt")) else ""
plugins = sorted({re.sub(r"^check-(sim|cuda)-|\.json$", "", os.path.basename(p)) for p in glob.glob(os.path.join(res, "check-*.json"))})
verdicts = []
for name in plugins:
    sim, cuda = load(os.path.join(res, f"check-sim-{name}.json")), load(os.path.join(res, f"check-cuda-{name}.json"))
    row = {"plugin": name, "sim": None, "cuda": None, "differences": []}
    if sim:
        row["sim"] = sim.get("passed")
    if cuda:
        row["cuda"] = cuda.get("passed")
        sim_checks = {c["name"]: c for c in (sim or {}).get("checks", [])}
        for c in cuda.get("checks", []):
            s = sim_checks.get(c["name"])
            # A check the hardware cannot observe is skipped there; it is no difference.
            if c.get("skipped"):
                continue
            if s is None or s.get("passed") != c.get("passed"):
                row["differences"].append({"check": c["name"], "sim": s and s.get("passed"), "cuda": c.get("passed"),
                                           "cuda_failure": (c.get("failure") or {}).get("message")})
        row["cuda_skipped"] = [c["name"] for c in cuda.get("checks", []) if c.get("skipped")]
    verdicts.append(row)

bench = lines(os.path.join(res, "bench-emm.jsonl"))
sim_bench = lines(os.path.join(res, "bench-sim.jsonl"))
report = {"env": env, "conformance": verdicts, "bench": bench, "bench_sim": sim_bench}
with open(os.path.join(res, "report.json"), "w") as f:
    json.dump(report, f, indent=1)

out = ["# emm hardware run", "", "```", env.strip(), "```", "", "## Conformance: simulated GPU vs this GPU", "",
       "| plugin | sim | cuda | checks that differ | skipped on cuda (not observable there) |", "|---|---|---|---|---|"]
fmt = {True: "pass", False: "FAIL", None: "not run"}
for v in verdicts:
    diff = ", ".join(d["check"] for d in v["differences"]) or "none"
    out.append(f"| {v['plugin']} | {fmt[v['sim']]} | {fmt[v['cuda']]} | {diff} | {len(v.get('cuda_skipped', []))} |")
skipped = open(os.path.join(res, "skipped.txt")).read().strip() if os.path.exists(os.path.join(res, "skipped.txt")) else ""
if skipped:
    out += ["", "Not run on hardware:", "", skipped]
for v in verdicts:
    for d in v["differences"]:
        out.append(f"\n- {v['plugin']} / {d['check']}: sim {fmt[d['sim']]}, cuda {fmt[d['cuda']]}: {d['cuda_failure']}")
out += ["", "## Standard workloads on this GPU (`emm bench --backend cuda`)", "",
        "| resource | W1 ns/op | W2 ns/op | W3 ns/op | held / peak live W1 · W2 · W3 |", "|---|---:|---:|---:|---|"]
by = {}
for r in bench:
    by.setdefault(r["resource"], {})[r["workload"]] = r
for name, w in by.items():
    ns = [f"{w[k]['ns_per_op']:.0f}" if k in w else "-" for k in ("W1", "W2", "W3")]
    held = " · ".join(f"{w[k]['peak_held_bytes'] / max(1, w[k]['peak_live_bytes']):.3f}" if k in w else "-" for k in ("W1", "W2", "W3"))
    out.append(f"| {name} | {ns[0]} | {ns[1]} | {ns[2]} | {held} |")
sim_by = {(r["resource"], r["workload"]): r for r in sim_bench}
out += ["", "## The simulator's cost model against this GPU", "",
        "Virtual ns per op the simulator predicts (`emm bench --backend sim`) against ns per op measured here.", "",
        "| resource | workload | predicted | measured | predicted / measured |", "|---|---|---:|---:|---:|"]
for (name, wl), s in sorted(sim_by.items()):
    m = by.get(name, {}).get(wl)
    if m and s.get("virtual_ns_per_op"):
        p = s["virtual_ns_per_op"]
        out.append(f"| {name} | {wl} | {p:.0f} | {m['ns_per_op']:.0f} | {p / max(m['ns_per_op'], 1e-9):.2f} |")
peers = os.path.join(res, "peers", "results.md")
if os.path.exists(peers):
    out += ["", "## Peers in the same run", "", open(peers).read()]
python_summary = os.path.join(res, "python", "summary.md")
if os.path.exists(python_summary):
    out += ["", open(python_summary).read()]
with open(os.path.join(res, "report.md"), "w") as f:
    f.write("\n".join(out) + "\n")
print("\n".join(out))
