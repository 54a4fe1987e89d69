"""Draws the book's charts of the real PyTorch traces as SVG (no plotting library needed):

- docs/book/src/charts/real-traces-held.svg: peak device memory over peak live bytes, the
  allocator alone, per trace and allocator (from benchmarks/data/real-traces.csv);
- docs/book/src/charts/real-traces-memory.svg: device memory used through each run, as
  nvidia-smi read it every 20 ms, beside the trace's peak live bytes plus what the process
  took beside the allocator (from a results.json of
  benchmarks/traces/run.sh whose runs kept their readings: benchmarks/traces/gpu-timeline.json).

usage: python3 benchmarks/scripts/trace_charts.py
"""

import csv
import json
import os
from xml.sax.saxutils import escape

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "docs", "book", "src", "charts")
TRACES = ("transformer-train", "llm-decode", "cnn-varsize", "finetune-checkpoint")
# Allocator, label and colour (colour-blind safe: Okabe and Ito's palette).
ALLOCATORS = (
    ("caching", "PyTorch caching", "#E69F00"),
    ("expandable", "expandable segments", "#56B4E9"),
    ("pool", "emm pool", "#009E73"),
    ("pool-vmm", "emm pool-vmm", "#CC79A7"),
    ("pool-vmm-tight", "emm pool-vmm-tight", "#0072B2"),
)
FONT = 'font-family="sans-serif" font-size="12"'


def text(x, y, s, anchor="start", extra=""):
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {FONT} {extra}>{escape(s)}</text>'


def svg(width, height, body):
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">\n<rect width="100%" height="100%" fill="white"/>\n'
            + "\n".join(body) + "\n</svg>\n")


def legend(x, y, entries):
    out = []
    for i, (label, colour) in enumerate(entries):
        out.append(f'<rect x="{x}" y="{y + 18 * i - 9}" width="12" height="10" fill="{colour}"/>')
        out.append(text(x + 18, y + 18 * i, label))
    return out


def held_chart(rows):
    """Grouped bars: held over live per trace, one bar an allocator, a line at 1.02."""
    width, height, left, top, bottom = 760, 340, 50, 30, 40
    plot_w, plot_h = width - left - 200, height - top - bottom
    lo, hi = 0.9, max(float(r["alloc_" + a]) for r in rows for a, _, _ in ALLOCATORS if r["alloc_" + a]) + 0.05
    y = lambda v: top + plot_h * (1 - (v - lo) / (hi - lo))
    title = f"Peak device memory over peak live bytes (allocator alone, {rows[0]['gpu']})"
    body = [text(left, 18, title, extra='font-weight="bold"')]
    for v in [1.0, 1.1, 1.2, 1.3, 1.4, 1.5]:
        if v <= hi:
            body.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
            body.append(text(left - 6, y(v) + 4, f"{v:.1f}", "end"))
    group = plot_w / len(rows)
    bar = (group - 16) / len(ALLOCATORS)
    for i, r in enumerate(rows):
        x0 = left + i * group + 8
        for k, (a, _, colour) in enumerate(ALLOCATORS):
            if not r["alloc_" + a]:
                continue
            v = float(r["alloc_" + a])
            body.append(f'<rect x="{x0 + k * bar:.1f}" y="{y(v):.1f}" width="{bar - 2:.1f}" '
                        f'height="{y(lo) - y(v):.1f}" fill="{colour}"><title>{escape(a)} {v:.3f}</title></rect>')
        body.append(text(x0 + (group - 16) / 2, height - bottom + 16, r["trace"], "middle"))
    body.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(1.02):.1f}" y2="{y(1.02):.1f}" '
                f'stroke="black" stroke-dasharray="4 3"/>')
    body.append(text(left + plot_w + 4, y(1.02) + 4, "1.02"))
    body += legend(left + plot_w + 40, top + 20, [(label, c) for _, label, c in ALLOCATORS])
    return svg(width, height, body)


def memory_chart(runs):
    """One panel a trace: GiB used (less the first reading) against seconds since the process
    started reading, a line an allocator, and the floor (peak live and what the process took
    beside the allocator) dashed."""
    panel_w, panel_h, left, top, gap = 330, 200, 50, 40, 50
    width, height = 2 * (panel_w + left) + 180, 2 * (panel_h + gap) + top
    title = f"Device memory used through each run (nvidia-smi every 20 ms, {runs[0]['device']})"
    body = [text(left, 18, title, extra='font-weight="bold"')]
    for i, trace in enumerate(TRACES):
        px, py = left + (i % 2) * (panel_w + left), top + (i // 2) * (panel_h + gap)
        mine = {r["allocator"]: r for r in runs if r["workload"] == trace}
        series = []
        for a, _, colour in ALLOCATORS:
            r = mine.get(a)
            if r and r.get("smi_used_mib_samples"):
                s = r["smi_used_mib_samples"]
                series.append(([(k * 0.02, (v - s[0]) / 1024) for k, v in enumerate(s)], colour))
        if not series:
            continue
        # The floor no allocator can go under: peak live bytes, and what the process took
        # beside the allocator (the caching allocator's run: nvidia-smi's peak less what it
        # reserved), which every line includes.
        c = mine.get("caching")
        if c is None:  # no floor without the caching allocator's reservation: no panel
            continue
        beside = (c["smi_used_mib_peak"] - c["smi_used_mib_first"]) * 2**20 - c["max_memory_reserved"]
        live = (c["peak_live_bytes"] + beside) / 2**30
        t_max = max(p[-1][0] for p, _ in series)
        g_max = max(max(v for _, v in p) for p, _ in series) * 1.08
        x = lambda t: px + panel_w * t / t_max
        y = lambda g: py + panel_h * (1 - g / g_max)
        body.append(f'<rect x="{px}" y="{py}" width="{panel_w}" height="{panel_h}" fill="none" stroke="#999"/>')
        body.append(text(px + panel_w / 2, py - 6, trace, "middle", 'font-weight="bold"'))
        for frac in (0.0, 0.5, 1.0):
            body.append(text(px - 4, y(g_max * frac) + 4, f"{g_max * frac:.0f}", "end"))
        body.append(text(px + panel_w, py + panel_h + 14, f"{t_max:.0f} s", "end"))
        body.append(text(px - 36, py + panel_h / 2, "GiB", "middle"))
        for points, colour in series:
            step = max(1, len(points) // 400)
            d = " ".join(f"{x(t):.1f},{y(g):.1f}" for t, g in points[::step])
            body.append(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="1.2"/>')
        body.append(f'<line x1="{px}" x2="{px + panel_w}" y1="{y(live):.1f}" y2="{y(live):.1f}" '
                    f'stroke="black" stroke-dasharray="4 3"/>')
    entries = [(label, c) for a, label, c in ALLOCATORS if any(r["allocator"] == a for r in runs)]
    body += legend(2 * (panel_w + left) + 10, top + 20, entries + [("peak live + beside it", "#000")])
    return svg(width, height, body)


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(ROOT, "benchmarks", "data", "real-traces.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(OUT, "real-traces-held.svg"), "w") as f:
        f.write(held_chart(rows))
    timeline = os.path.join(ROOT, "benchmarks", "traces", "gpu-timeline.json")
    if os.path.exists(timeline):
        with open(timeline) as f:
            runs = json.load(f)
        with open(os.path.join(OUT, "real-traces-memory.svg"), "w") as f:
            f.write(memory_chart(runs))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
