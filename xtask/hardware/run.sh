#!/usr/bin/env bash
# emm's hardware run, from the bundle `cargo xtask hardware --bundle-only` builds. On a GPU
# machine (no Rust toolchain needed): the hardware smoke tests; the conformance suite for every
# plugin on the simulated GPU first and then on this GPU (a plugin that fails on the simulator
# is not run on hardware); the standard workloads for every emm resource; the peers (RMM,
# PyTorch, CuPy, CUDA) on the same workloads in the same run; then report.md and report.json.
#
# Environment: RESULTS (default: results/ beside this script), EMM_SEED (default 1),
# PARTS (default smoke,check,bench,peers: which parts run; split them across calls where one
# call may not run long; multigpu, threads-peers and report are extra parts: the multi-GPU
# tests, the peers driven by many
# threads, then `emm bench --report` with every chart), ANCHOR_BUDGET_S for the peers' time
# budget, THREADS and ROUND_OPS for the many-threads runs (default 1,2,4,8,16 and 1000000),
# PEERS_RAW for peers' figures from an earlier call to put in the report.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${RESULTS:-$HERE/results}
SEED=${EMM_SEED:-1}
EMM=$HERE/bin/emm
PARTS=${PARTS:-smoke,check,bench,peers}
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
"$HERE/bin/emm-cuda-hardware" --test-threads=1 multi_gpu > "$RESULTS/multi-gpu-tests.log" 2>&1
echo "multi_gpu_tests_exit: $?" >> "$RESULTS/env.txt"
grep -E "test result|skipped|IPC across" "$RESULTS/multi-gpu-tests.log"
fi

if part check; then
: > "$RESULTS/skipped.txt"
for p in default pool sharded arena binning async managed "$HERE"/wasm/*.wasm; do
  [ -e "$p" ] || [ "${p%.wasm}" = "$p" ] || continue
  name=$(basename "$p" .wasm)
  echo "==> check $name"
  "$EMM" check "$p" --backend sim --seed "$SEED" --no-regressions --json \
    > "$RESULTS/check-sim-$name.json" 2> "$RESULTS/check-sim-$name.err"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "$name: fails the contract on the simulated GPU (exit $rc): not run on hardware" >> "$RESULTS/skipped.txt"
    continue
  fi
  "$EMM" check "$p" --backend cuda --seed "$SEED" --no-regressions --json \
    > "$RESULTS/check-cuda-$name.json" 2> "$RESULTS/check-cuda-$name.err"
  echo "  cuda exit $?"
done
fi

if part bench; then
echo "==> emm bench on this GPU"
"$EMM" bench --backend cuda --json > "$RESULTS/bench-emm.jsonl" 2> "$RESULTS/bench-emm.err"
echo "==> emm bench on the simulated GPU (for the cost model's predictions)"
"$EMM" bench --backend sim --resource cuda,async,pool --json > "$RESULTS/bench-sim.jsonl" 2> "$RESULTS/bench-sim.err"

fi

if part peers && [ -d "$HERE/peers" ]; then
  echo "==> peers"
  OUT="$RESULTS/peers" ANCHOR_BUDGET_S=${ANCHOR_BUDGET_S:-240} bash "$HERE/peers/run_all.sh" > "$RESULTS/peers.log" 2>&1
  python3 "$HERE/peers/make_table.py" "$RESULTS/peers/results.raw" "$RESULTS/peers/env.txt" > "$RESULTS/peers/results.md" 2>> "$RESULTS/peers.log"
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
    --round-ops "${ROUND_OPS:-1000000}" --resource pool,pool-vmm,sharded,arena,binning,async \
    ${PEER_FILES:+--peers "$PEER_FILES"} > "$RESULTS/report.log" 2>&1
  echo "report exit: $?"
  tail -3 "$RESULTS/report.log"
fi

python3 "$HERE/report.py" "$RESULTS"
