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
        # Set when the run could not start: the gate refused the plugin, or no GPU.
        row["cuda_error"] = cuda.get("error")
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

out = ["# emm hardware run", "", "```", env.strip(), "```", "", "## Conformance: simulated GPU vs this GPU", "",
       "| plugin | sim | cuda | checks that differ | skipped on cuda (not observable there) |", "|---|---|---|---|---|"]
fmt = {True: "pass", False: "FAIL", None: "not run"}
for v in verdicts:
    diff = ", ".join(d["check"] for d in v["differences"]) or "none"
    cuda = "cannot run" if v.get("cuda_error") else fmt[v["cuda"]]
    out.append(f"| {v['plugin']} | {fmt[v['sim']]} | {cuda} | {diff} | {len(v.get('cuda_skipped', []))} |")
def text(name):
    path = os.path.join(res, name)
    return open(path).read().strip() if os.path.exists(path) else ""


skipped = text("skipped.txt")
report["skipped"] = skipped.splitlines()
if skipped:
    out += ["", "Not run on hardware (each failed on the simulated GPU first):", ""] + [f"- {l}" for l in skipped.splitlines()]
refused = [v for v in verdicts if v.get("cuda_error")]
if refused:
    out += ["", "Could not run on hardware (the gate refused it, or no GPU):", ""]
    out += [f"- {v['plugin']}: {v['cuda_error']}" for v in refused]
for v in verdicts:
    for d in v["differences"]:
        out.append(f"\n- {v['plugin']} / {d['check']}: sim {fmt[d['sim']]}, cuda {fmt[d['cuda']]}: {d['cuda_failure']}")
gate = text("gate.txt")
report["gate"] = gate.splitlines()
if gate:
    wrong = sum(1 for l in gate.splitlines() if l.startswith("WRONG"))
    out += ["", "## The gate on this GPU", "",
            f"Each line: a plugin run through the gate on this GPU and what the gate must answer ({wrong} wrong).", ""]
    out += [f"- {l}" for l in gate.splitlines()]
with open(os.path.join(res, "report.json"), "w") as f:
    json.dump(report, f, indent=1)
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
