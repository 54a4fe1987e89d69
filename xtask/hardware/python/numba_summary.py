"""Summarizes numba-cuda test logs (unittest / numba.runtests output, verbose or not) and
compares a run with a plugin against the baselines with Numba's own memory manager.

usage: python3 numba_summary.py OUT_DIR SUITE_LOG SUITE_BASELINE MODULES_LOG MODULES_BASELINE
Writes OUT_DIR/numba-summary.md and OUT_DIR/numba-summary.json; prints the markdown.

A log gives: the counts of its last "Ran N tests" / "OK|FAILED (...)" lines; the tests named
in "ERROR:" / "FAIL:" headers; and, from verbose output (-v), each test's outcome and each
skip's reason. Subtest ids are normalized (object addresses removed) so runs compare.
"""

import json
import os
import re
import sys

RAN = re.compile(r"^Ran (\d+) tests? in ([\d.]+)s")
RESULT = re.compile(r"^(OK|FAILED)(?: \((.*)\))?\s*$")
HEADER = re.compile(r"^(ERROR|FAIL|UNEXPECTED SUCCESS): (.+?)\s*$")
TEST_ID = re.compile(r"^(\w+) \(([\w.]+)\)")
VERBOSE = re.compile(r"^(\w+ \([\w.]+\)(?: \[.*?\])?(?: \(.*?\))?)(?:\n.*?)? \.\.\. (.*)$")
SKIP = re.compile(r"skipped (['\"])(.*)\1$")
ADDR = re.compile(r" ?\[<object object at 0x[0-9a-f]+>\]")
# Skips the source documents name as expected with an external memory manager: Numba's own
# deallocation strategy, deferred cleanup, CUDA-array-interface ownership.
EMM_SKIP = re.compile(r"EMM|external memory|memory manager|deallocat|defer", re.I)


def normalize(test):
    return ADDR.sub("", test).strip()


def parse(path):
    """The counts, error/failure ids, outcomes and skips of one log."""
    out = {"path": path, "ran": None, "seconds": None, "status": None, "counts": {},
           "errors": [], "failures": [], "skips": {}, "outcomes": {}}
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError as e:
        out["missing"] = str(e)
        return out
    pending = None
    for line in text.splitlines():
        m = RAN.match(line)
        if m:
            out["ran"], out["seconds"] = int(m.group(1)), float(m.group(2))
            continue
        m = RESULT.match(line)
        if m and out["ran"] is not None:
            out["status"] = m.group(1)
            counts = {}
            for part in (m.group(2) or "").split(","):
                if "=" in part:
                    k, v = part.split("=", 1)
                    counts[k.strip()] = int(v)
            out["counts"] = counts
            continue
        m = HEADER.match(line)
        if m:
            kind = "errors" if m.group(1) == "ERROR" else "failures"
            out[kind].append(normalize(m.group(2)))
            continue
        # Verbose lines: "test (mod.Class.test) ... ok", possibly with the docstring's first
        # line between the id and " ... ".
        if " ... " in line:
            head, result = line.rsplit(" ... ", 1)
            idm = TEST_ID.match(head)
            test = normalize(head) if idm else pending
            pending = None
            if test is None:
                continue
            result = result.strip()
            out["outcomes"][test] = result.split(" ")[0] if result else ""
            s = SKIP.search(result)
            if s or result.startswith("skipped"):
                out["skips"][test] = s.group(2) if s else result[len("skipped"):].strip()
        elif TEST_ID.match(line):
            pending = normalize(line)
    return out


def total(log, key):
    return log["counts"].get(key, 0)


def compare(name, run, base):
    keys = ["failures", "errors", "skipped", "expected failures", "unexpected successes"]
    new_errors = sorted(set(run["errors"]) - set(base["errors"]))
    new_failures = sorted(set(run["failures"]) - set(base["failures"]))
    fixed = [] if run["ran"] is None else sorted(
        (set(base["errors"]) | set(base["failures"])) - (set(run["errors"]) | set(run["failures"]))
    )
    skips = [{"test": t, "reason": r, "emm_related": bool(EMM_SKIP.search(r))} for t, r in sorted(run["skips"].items())]
    new_skips = total(run, "skipped") - total(base, "skipped")
    ok = (not run.get("missing") and run["ran"] is not None and not new_errors and not new_failures
          and total(run, "errors") <= total(base, "errors") and total(run, "failures") <= total(base, "failures"))
    return {
        "name": name,
        "baseline": {"ran": base["ran"], "status": base["status"], **{k: total(base, k) for k in keys}},
        "run": {"ran": run["ran"], "seconds": run["seconds"], "status": run["status"], **{k: total(run, k) for k in keys}},
        "new_errors": new_errors,
        "new_failures": new_failures,
        "fixed": fixed,
        "new_skips": new_skips,
        "skips": skips,
        "missing": run.get("missing"),
        "verdict": "PASS" if ok else "FAIL",
    }


def markdown(results):
    out = ["# numba-cuda's test suite with NUMBA_CUDA_MEMORY_MANAGER=emm.numba", ""]
    for r in results:
        b, n = r["baseline"], r["run"]
        out += [f"## {r['name']}: {r['verdict']}", ""]
        if r["missing"]:
            out += [f"log missing: {r['missing']}", ""]
        out += ["| | tests | failures | errors | skipped | expected failures |", "|---|---|---|---|---|---|"]
        out.append(f"| Numba's own manager (baseline) | {b['ran']} | {b['failures']} | {b['errors']} | {b['skipped']} | {b['expected failures']} |")
        out.append(f"| emm.numba | {n['ran']} | {n['failures']} | {n['errors']} | {n['skipped']} | {n['expected failures']} |")
        out.append("")
        out.append(f"- new failures: {len(r['new_failures'])}" + "".join(f"\n  - {t}" for t in r["new_failures"]))
        out.append(f"- new errors: {len(r['new_errors'])}" + "".join(f"\n  - {t}" for t in r["new_errors"]))
        if r["fixed"]:
            out.append(f"- failing in the baseline, passing here: {len(r['fixed'])}" + "".join(f"\n  - {t}" for t in r["fixed"]))
        related = sum(1 for s in r["skips"] if s["emm_related"])
        out.append(f"- skips: {n['skipped']} ({r['new_skips']:+d} against the baseline); {related} say an external memory manager is in use")
        out += ["", "| skipped test | reason | EMM-related |", "|---|---|---|"]
        for s in r["skips"]:
            out.append(f"| {s['test']} | {s['reason']} | {'yes' if s['emm_related'] else ''} |")
        out.append("")
    return "\n".join(out)


def main(argv):
    if len(argv) != 6:
        sys.exit(__doc__)
    out_dir, suite, suite_base, modules, modules_base = argv[1:]
    results = [
        compare("whole suite (numba.runtests -m 16 numba.cuda.tests)", parse(suite), parse(suite_base)),
        compare("memory-manager modules, serially (python3 -m unittest)", parse(modules), parse(modules_base)),
    ]
    text = markdown(results)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "numba-summary.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out_dir, "numba-summary.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(text)
    return 0 if all(r["verdict"] == "PASS" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
