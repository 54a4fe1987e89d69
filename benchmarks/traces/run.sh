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
for w in "${workloads[@]}"; do
    for a in ${ALLOCATORS:-caching expandable pool pool-vmm pool-vmm-tight trace}; do
        manager=pool
        case $a in
            trace) args=(--allocator caching --trace "$out/$w.pickle.gz") ;;
            pool | pool-vmm | pool-vmm-tight) args=(--allocator emm) manager=$a ;;
            *) args=(--allocator "$a") ;;
        esac
        echo "== $w $a"
        EMM_MEMORY_MANAGER=$manager timeout 300 python3 "$here/record.py" "$w" "${args[@]}" "${s[@]}" \
            --json "$out/$w.$a.json" || echo "$w $a failed"
    done
done
python3 - "$out" "$final/results.json" <<'PY'
import glob, json, sys
json.dump([json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/*.json"))],
          open(sys.argv[2], "w"), indent=1)
PY
mv "$out"/*.pickle.gz "$final"/ 2>/dev/null || true
