"""Turns a hardware run's results folder into report.md and report.json.
usage: python3 report.py RESULTS_DIR
"""
import glob
import json
import os
import re
import statistics
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
out += ["", "## Standard workloads on this GPU (`emm bench --backend cuda`)", "",
        "| resource | W1 ns/op | W2 ns/op | W3 ns/op | held / peak live W1 · W2 · W3 |", "|---|---:|---:|---:|---|"]
def held_cell(r):
    """Held over peak live bytes, `-` where the workload did not run, `none` where nothing was
    held on the device although bytes were live (managed memory, never touched)."""
    if r is None:
        return "-"
    if r["peak_held_bytes"] == 0 and r["peak_live_bytes"] > 0:
        return "none"
    return f"{r['peak_held_bytes'] / max(1, r['peak_live_bytes']):.3f}"


by = {}
for r in bench:
    by.setdefault(r["resource"], {})[r["workload"]] = r
for name, w in by.items():
    ns = [f"{w[k]['ns_per_op']:.0f}" if k in w else "-" for k in ("W1", "W2", "W3")]
    held = " · ".join(held_cell(w.get(k)) for k in ("W1", "W2", "W3"))
    out.append(f"| {name} | {ns[0]} | {ns[1]} | {ns[2]} | {held} |")
if any(held_cell(r) == "none" for r in bench):
    out += ["", "none: the device's free memory never moved, as managed memory is placed on first "
            "touch and the benchmark touches none of it."]
sim_by = {(r["resource"], r["workload"]): r for r in sim_bench}
# Resources whose every operation is one driver call: the simulator's virtual clock, which
# charges driver calls only, times them whole. A suballocator serves from host code it does not
# time; its virtual figure is the driver time of its growth alone, so it is not compared.
DRIVER_BOUND = ("cuda", "async", "managed")
compared = [(k, s, by.get(k[0], {}).get(k[1])) for k, s in sorted(sim_by.items())]
compared = [(k, s, m) for k, s, m in compared if m and s.get("virtual_ns_per_op") is not None]
out += ["", "## The simulator's cost model against this GPU", "",
        "Virtual ns per op the simulator predicts (`emm bench --backend sim`) against ns per op measured here,",
        "for the resources whose every operation is a driver call (" + ", ".join(DRIVER_BOUND) + ").", ""]
driver_rows = [(k, s, m) for k, s, m in compared if k[0] in DRIVER_BOUND]
if driver_rows:
    out += ["| resource | workload | predicted | measured | predicted / measured |", "|---|---|---:|---:|---:|"]
    for (name, wl), s, m in driver_rows:
        p = s["virtual_ns_per_op"]
        out.append(f"| {name} | {wl} | {p:.0f} | {m['ns_per_op']:.0f} | {p / max(m['ns_per_op'], 1e-9):.2f} |")
else:
    out.append("None of them ran here (`BENCH_RESOURCES`), so there is nothing to compare.")
host = sorted({k[0] for k, _, _ in compared if k[0] not in DRIVER_BOUND})
if host:
    out += ["", "Not compared, as they serve from host code, which the simulator does not time (its figure for "
            "them is their growth's driver time alone): " + ", ".join(host) + "."]
peers = os.path.join(res, "peers", "results.md")
if os.path.exists(peers):
    out += ["", "## Peers in the same run", "", open(peers).read()]


def rounds(path):
    """ns per op of every process of the `rounds` part, by (allocator, workload), each with
    its round."""
    cells = {}
    try:
        text = open(path).read().splitlines()
    except OSError:
        return cells
    for line in text:
        m = re.match(r"ROUND (\d+) (.*)", line.strip())
        if not m:
            continue
        rnd, body = int(m.group(1)), m.group(2)
        try:
            if body.startswith("{"):
                r = json.loads(body)
                key, ns = ("emm " + r["resource"], r["workload"]), float(r["ns_per_op"])
            elif body.startswith("RESULT "):
                f = body.split()
                kv = dict(x.split("=", 1) for x in f[3:] if "=" in x)
                if kv.get("status") != "ok":
                    continue
                key, ns = (f[1], f[2]), float(kv["ns_per_op"])
            else:
                continue
        except (ValueError, KeyError, IndexError):
            continue
        cells.setdefault(key, []).append((rnd, ns))
    return cells


by_round = rounds(os.path.join(res, "rounds.txt"))
if by_round:
    cells = {k: [ns for _, ns in v] for k, v in by_round.items()}
    wls = ("W1", "W2", "W3")
    names = sorted({k[0] for k in cells})
    med = {k: statistics.median(v) for k, v in cells.items()}
    report["rounds"] = [{"allocator": k[0], "workload": k[1], "ns_per_op": sorted(v)} for k, v in sorted(cells.items())]
    out += ["", "## Many processes a cell (`rounds`)", "",
            "ns per op, median of the processes (min–max, count); emm and the peers interleaved in this call.", "",
            "| allocator | W1 | W2 | W3 |", "|---|---|---|---|"]
    for n in names:
        row = []
        for w in wls:
            v = sorted(cells.get((n, w), []))
            row.append(f"{med[(n, w)]:.1f} ({v[0]:.1f}–{v[-1]:.1f}, {len(v)})" if v else "-")
        out.append(f"| {n} | " + " | ".join(row) + " |")
    peers_only = [n for n in names if not n.startswith("emm ")]
    for n in [n for n in names if n.startswith("emm ")]:
        # A host's processes run at speeds up to 1.5x apart, by the CPU they land on, so the
        # ratio is given three ways: median against median, fastest against fastest (both
        # at the host's fast speed), and the median of the ratios within a round.
        ways = {"median against median": [], "fastest against fastest": [],
                "median of the ratios within a round": []}
        for w in wls:
            peer_meds = [(med[(p, w)], p) for p in peers_only if (p, w) in med]
            if not peer_meds or (n, w) not in med:
                continue
            best, peer = min(peer_meds)
            if not (med[(n, w)] > 0 and min(cells[(n, w)]) > 0):
                continue
            entry = {"allocator": n, "workload": w, "best_peer": peer,
                     "median_against_median": best / med[(n, w)],
                     "fastest_against_fastest": min(cells[(peer, w)]) / min(cells[(n, w)])}
            ways["median against median"].append(f"{w} {entry['median_against_median']:.1f}× ({peer})")
            ways["fastest against fastest"].append(f"{w} {entry['fastest_against_fastest']:.1f}×")
            mine = dict(by_round[(n, w)])
            paired = [ns / mine[r] for r, ns in by_round[(peer, w)] if mine.get(r)]
            if paired:
                entry["median_ratio_within_a_round"] = statistics.median(paired)
                ways["median of the ratios within a round"].append(
                    f"{w} {entry['median_ratio_within_a_round']:.1f}×")
            report.setdefault("rounds_ratios", []).append(entry)
        if ways["median against median"]:
            out += ["", f"{n} against the best peer (the lowest median): "
                    + "; ".join(f"{way} " + ", ".join(r) for way, r in ways.items() if r) + "."]
python_summary = os.path.join(res, "python", "summary.md")
if os.path.exists(python_summary):
    out += ["", open(python_summary).read()]
with open(os.path.join(res, "report.json"), "w") as f:
    json.dump(report, f, indent=1)
with open(os.path.join(res, "report.md"), "w") as f:
    f.write("\n".join(out) + "\n")
print("\n".join(out))
