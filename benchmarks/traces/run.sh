#!/usr/bin/env bash
# Runs each workload of record.py under PyTorch's caching allocator, expandable segments, emm's
# `pool`, `pool-vmm` and `pool-vmm-tight`, then once more under the caching allocator recording
# its trace; writes OUT/results.json (one object a run) and OUT/WORKLOAD.pickle.gz (the traces).
#
# usage: EMM_LIBRARY=/path/libemm.so benchmarks/traces/run.sh OUT [STEPS] [WORKLOAD...]
#   STEPS 0 (the default) keeps each workload's own step count. libemm.so comes from
#   `cargo build --release -p emm-capi`; the emm Python package from capi/python.
#   ALLOCATORS (default "caching expandable pool pool-vmm pool-vmm-tight trace") picks the runs;
#   without `trace` no trace is recorded.
#   REPS (default 1) runs each allocator that many times, in the listed order and then in the
#   reverse order by turns, for step times compared run against run (scripts/trace_steps.py);
#   the trace is recorded once.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
final=$1
steps=${2:-0}
shift $(( $# < 2 ? $# : 2 ))
workloads=("$@")
[ ${#workloads[@]} -eq 0 ] && workloads=(transformer-train llm-decode cnn-varsize finetune-checkpoint)
: "${EMM_LIBRARY:?set EMM_LIBRARY to libemm.so (cargo build --release -p emm-capi)}"
export PYTHONPATH=$here/../../capi/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
out=$(mktemp -d)
s=()
[ "$steps" != 0 ] && s=(--steps "$steps")
allocators=(${ALLOCATORS:-caching expandable pool pool-vmm pool-vmm-tight trace})
for w in "${workloads[@]}"; do
    for ((rep = 0; rep < ${REPS:-1}; rep++)); do
        order=("${allocators[@]}")
        if ((rep % 2)); then
            for ((k = 0; k < ${#allocators[@]}; k++)); do order[k]=${allocators[-k - 1]}; done
        fi
        for a in "${order[@]}"; do
            [ "$a" = trace ] && ((rep > 0)) && continue
            manager=pool
            case $a in
                trace) args=(--allocator caching --trace "$out/$w.pickle.gz") ;;
                pool | pool-vmm | pool-vmm-tight) args=(--allocator emm) manager=$a ;;
                *) args=(--allocator "$a") ;;
            esac
            echo "== $w $a $rep"
            EMM_MEMORY_MANAGER=$manager timeout 300 python3 "$here/record.py" "$w" "${args[@]}" \
                "${s[@]}" --json "$out/$w.$a.$rep.json" || echo "$w $a $rep failed"
        done
    done
done
python3 - "$out" "$final/results.json" <<'PY'
import glob, json, os, sys
runs = []
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    run = json.load(open(f))
    run["rep"] = int(os.path.basename(f).split(".")[-2])  # WORKLOAD.ALLOCATOR.REP.json
    runs.append(run)
json.dump(runs, open(sys.argv[2], "w"), indent=1)
PY
mv "$out"/*.pickle.gz "$final"/ 2>/dev/null || true
