#!/usr/bin/env bash
# emm's hardware run, from the bundle `cargo xtask hardware --bundle-only` builds. On a GPU
# machine (no Rust toolchain needed): the hardware smoke tests; the conformance suite for every
# plugin on the simulated GPU first, recording its verdict, and then on this GPU through the
# gate (a plugin that fails on the simulator is not run on hardware: skipped.txt says why);
# the gate's own checks on this GPU (gate.txt); the standard workloads for every emm resource;
# the peers (RMM, PyTorch, CuPy, CUDA) on the same workloads in the same run; then report.md
# and report.json.
#
# Environment: RESULTS (default: $OUT, else results/ beside this script), EMM_SEED (default 1),
# PARTS (default smoke,check,gate,bench,peers: which parts run; split them across calls where
# one call may not run long). Extra parts: `python` (the Python acceptance of the C ABI, about
# 6 minutes: python/run_python.sh), `multigpu` (the multi-GPU tests), `threads-peers` (the
# peers driven by many threads), `report` (`emm bench --report` with every chart), `rounds`
# (after `peers` in the same call: ROUNDS rounds, default 8, each one process of `emm bench`
# for ROUNDS_RESOURCES, default pool-vmm, and one of each of ROUNDS_PEERS, default
# rmm:binning,torch:torch, per workload, interleaved, so that every cell has as many
# processes on both sides: a host's processes run in modes up to 1.5x apart).
# ANCHOR_BUDGET_S for the peers' time budget, THREADS and ROUND_OPS for the many-threads runs
# (default 1,2,4,8,16 and 1000000), BENCH_RESOURCES (the bench part's emm resources; default all), REPORT_RESOURCES (the report's emm resources), REPORT_THREADS_RESOURCES (its many-threads resources; default pool,sharded,arena), REPORT_PASSES (its timed passes), PEERS_RAW for peers' figures from an earlier call to put in
# the report, EMM_VERDICT_DIR (the verdict store of the check part; default $RESULTS/verdicts).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${RESULTS:-${OUT:-$HERE/results}}
SEED=${EMM_SEED:-1}
EMM=$HERE/bin/emm
PARTS=${PARTS:-smoke,check,gate,bench,peers}
VERDICTS=${EMM_VERDICT_DIR:-$RESULTS/verdicts}
# The gate is enforced here whatever the caller's environment says.
unset EMM_GATE EMM_GATE_MIN_DEPTH
part() { case ",$PARTS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
mkdir -p "$RESULTS"
{
  echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "seed: $SEED"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
} > "$RESULTS/env.txt"
cat "$RESULTS/env.txt"

if part smoke; then
echo "==> hardware smoke tests"
"$HERE/bin/emm-cuda-hardware" --test-threads=1 > "$RESULTS/hardware-tests.log" 2>&1
echo "hardware_tests_exit: $?" >> "$RESULTS/env.txt"
tail -3 "$RESULTS/hardware-tests.log"
fi

if part multigpu; then
echo "==> multi-GPU tests (skipped cleanly with one GPU)"
"$HERE/bin/emm-cuda-hardware" --test-threads=1 --nocapture multi_gpu > "$RESULTS/multi-gpu-tests.log" 2>&1
echo "multi_gpu_tests_exit: $?" >> "$RESULTS/env.txt"
grep -E "test result|skipped|IPC across" "$RESULTS/multi-gpu-tests.log"
fi

if part check; then
: > "$RESULTS/skipped.txt"
# gate/known_bad.wasm fails on the simulator: it shows a plugin kept off the GPU, and why.
for p in default pool pool-vmm sharded arena binning async managed "$HERE"/wasm/*.wasm "$HERE"/gate/known_bad.wasm; do
  [ -e "$p" ] || [ "${p%.wasm}" = "$p" ] || continue
  name=$(basename "$p" .wasm)
  echo "==> check $name"
  "$EMM" check "$p" --backend sim --seed "$SEED" --no-regressions --json --verdicts "$VERDICTS" \
    > "$RESULTS/check-sim-$name.json" 2> "$RESULTS/check-sim-$name.err"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    why=$(python3 - "$RESULTS/check-sim-$name.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    r = {}
failed = [c["name"] for c in r.get("checks", []) if c.get("failure")]
print(("failed: " + ", ".join(failed)) if failed else (r.get("error") or "no report"))
PY
)
    echo "$name: fails the contract on the simulated GPU (exit $rc; $why): not run on hardware" >> "$RESULTS/skipped.txt"
    echo "  fails on the simulator ($why): not run on hardware"
    continue
  fi
  # The sim run recorded a passing verdict at the default depth: the gate lets it through.
  "$EMM" check "$p" --backend cuda --seed "$SEED" --no-regressions --json --verdicts "$VERDICTS" \
    > "$RESULTS/check-cuda-$name.json" 2> "$RESULTS/check-cuda-$name.err"
  echo "  cuda exit $?"
done
fi

if part gate; then
echo "==> the gate on this GPU"
G=$RESULTS/gate-verdicts
rm -rf "$G" "$RESULTS/gate-plugins"; mkdir -p "$RESULTS/gate-plugins"
: > "$RESULTS/gate.txt"
# expect NAME WANT_EXIT WANT_TEXT -- command...: runs it, keeps its stderr, notes the verdict.
expect() {
  local name=$1 want=$2 text=$3; shift 4
  "$@" > "$RESULTS/gate-$name.out" 2> "$RESULTS/gate-$name.err"
  local rc=$? ok=ok
  [ "$rc" -eq "$want" ] || ok=WRONG
  grep -q -- "$text" "$RESULTS/gate-$name.err" "$RESULTS/gate-$name.out" || ok=WRONG
  echo "$ok $name: exit $rc (want $want, text \"$text\"): $(grep -m1 -o -- "$text.\{0,160\}" "$RESULTS/gate-$name.err" "$RESULTS/gate-$name.out" | head -1 | cut -d: -f2-)" >> "$RESULTS/gate.txt"
}
FF=$HERE/wasm/first_fit.wasm
CHANGED=$RESULTS/gate-plugins/first_fit_changed.wasm
# The module ends with its data section: flipping the last byte keeps it valid.
python3 -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[-1] ^= 1; open(sys.argv[2], 'wb').write(b)" "$FF" "$CHANGED"
expect unchecked 2 "has no verdict" -- "$EMM" check "$CHANGED" --backend cuda --cases 8 --ops 16 --seed "$SEED" --no-regressions --verdicts "$G"
expect checked-shallow 0 "passed" -- "$EMM" check "$CHANGED" --backend sim --cases 8 --ops 16 --seed "$SEED" --no-regressions --verdicts "$G"
expect too-shallow 2 "passed the EMM contract only to depth 8x16" -- "$EMM" check "$CHANGED" --backend cuda --cases 8 --ops 16 --seed "$SEED" --no-regressions --verdicts "$G"
expect min-depth 0 "passed" -- env EMM_GATE_MIN_DEPTH=8x16 "$EMM" check "$CHANGED" --backend cuda --cases 8 --ops 16 --seed "$SEED" --no-regressions --verdicts "$G"
expect override 0 "EMM_GATE=warn: plugin" -- env EMM_GATE=warn "$EMM" check "$FF" --backend cuda --cases 8 --ops 16 --seed "$SEED" --no-regressions --verdicts "$G"
expect known-bad-sim 1 "FAILED" -- "$EMM" check "$HERE/gate/known_bad.wasm" --backend sim --cases 8 --ops 16 --seed "$SEED" --no-regressions --verdicts "$G"
expect known-bad-cuda 2 "FAILED the EMM contract" -- env EMM_GATE=warn "$EMM" check "$HERE/gate/known_bad.wasm" --backend cuda --cases 8 --ops 16 --seed "$SEED" --no-regressions --verdicts "$G"
record=$(ls "$G"/*/8x16-seed*.json 2>/dev/null | head -1)
if [ -n "$record" ]; then
  sed -i 's/"passed": false/"passed": true/' "$G"/*/8x16-seed*.json
  expect tampered 2 "cannot be trusted" -- "$EMM" check "$HERE/gate/known_bad.wasm" --backend cuda --cases 8 --ops 16 --seed "$SEED" --no-regressions --verdicts "$G"
fi
cat "$RESULTS/gate.txt"
fi

if part bench; then
echo "==> emm bench on this GPU"
"$HERE/bin/host_floor" > "$RESULTS/host-floor.txt" 2>&1
"$EMM" bench --backend cuda --json ${BENCH_RESOURCES:+--resource "$BENCH_RESOURCES"} > "$RESULTS/bench-emm.jsonl" 2> "$RESULTS/bench-emm.err"
echo "==> emm bench on the simulated GPU (for the cost model's predictions)"
"$EMM" bench --backend sim --resource cuda,async,managed,pool --json > "$RESULTS/bench-sim.jsonl" 2> "$RESULTS/bench-sim.err"

fi

if part peers && [ -d "$HERE/peers" ]; then
  echo "==> peers"
  OUT="$RESULTS/peers" ANCHOR_BUDGET_S=${ANCHOR_BUDGET_S:-240} bash "$HERE/peers/run_all.sh" > "$RESULTS/peers.log" 2>&1
  python3 "$HERE/peers/make_table.py" "$RESULTS/peers/results.raw" "$RESULTS/peers/env.txt" > "$RESULTS/peers/results.md" 2>> "$RESULTS/peers.log"
fi

if part rounds; then
  echo "==> rounds: many processes a cell, emm and the peers interleaved"
  # Where peers/run_all.sh builds the peers and writes the op lists.
  PB=/tmp/anchors_build; OPS=/tmp/anchors_ops
  [ -x "$PB/bench_rmm" ] || echo "  the peers' binaries are not built: add the peers part to this call"
  : > "$RESULTS/rounds.txt"
  for i in $(seq 1 "${ROUNDS:-8}"); do
    "$EMM" bench --backend cuda --json --resource "${ROUNDS_RESOURCES:-pool-vmm}" 2>/dev/null | sed "s/^/ROUND $i /" >> "$RESULTS/rounds.txt"
    for spec in $(echo "${ROUNDS_PEERS:-rmm:binning,torch:torch}" | tr ',' ' '); do
      for w in W1 W2 W3; do
        case $spec in
          rmm:*) [ -x "$PB/bench_rmm" ] && "$PB/bench_rmm" "${spec#rmm:}" "$OPS" "$w" ;;
          torch:*) [ -x "$PB/bench_torch" ] && "$PB/bench_torch" "${spec#torch:}" "$OPS" "$w" ;;
        esac 2>/dev/null | grep '^RESULT' | sed "s/^/ROUND $i /" >> "$RESULTS/rounds.txt"
      done
    done
  done
  echo "  $(grep -c '^ROUND' "$RESULTS/rounds.txt") results in $RESULTS/rounds.txt"
fi

if part python; then
  echo "==> python: numba-cuda's suite with emm.numba, CuPy and PyTorch workloads, one shared pool"
  bash "$HERE/python/run_python.sh" "$RESULTS/python"
fi

if part threads-peers; then
  echo "==> the peers driven by many threads"
  RESULTS="$RESULTS" PEERS="$HERE/peers" bash "$HERE/threads.sh"
fi

if part report; then
  echo "==> emm bench --report: one thread, many threads, held against time, holes, charts"
  # The peers' figures of this results folder, and PEERS_RAW (comma-separated files, e.g.
  # threads-peers.raw brought back from an earlier call).
  PEER_FILES=""
  for f in "$RESULTS/peers/results.raw" "$RESULTS/threads-peers.raw" $(echo "${PEERS_RAW:-}" | tr ',' ' '); do
    [ -s "$f" ] && PEER_FILES="${PEER_FILES:+$PEER_FILES,}$f"
  done
  "$EMM" bench --backend cuda --report "$RESULTS/report" --threads "${THREADS:-1,2,4,8,16}" \
    --round-ops "${ROUND_OPS:-1000000}" ${REPORT_PASSES:+--passes "$REPORT_PASSES"} --resource "${REPORT_RESOURCES:-pool,pool-vmm,sharded,arena,binning,async}" \
    ${REPORT_THREADS_RESOURCES:+--threads-resource "$REPORT_THREADS_RESOURCES"} \
    ${PEER_FILES:+--peers "$PEER_FILES"} > "$RESULTS/report.log" 2>&1
  echo "report exit: $?"
  tail -3 "$RESULTS/report.log"
fi

python3 "$HERE/report.py" "$RESULTS"
