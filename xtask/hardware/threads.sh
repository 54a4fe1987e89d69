#!/usr/bin/env bash
# The peers driven by many threads (peers_threads.cu beside this script), built here with nvcc
# against the RMM wheels and the installed torch, as the peers' run_all.sh builds its runners.
# Writes $RESULTS/threads-peers.raw (THREADS lines) and $RESULTS/threads-peers.log.
#
# Environment: RESULTS (required), THREADS (default 1,2,4,8,16), ROUND_OPS (operations per
# thread in a timed round, default 1000000), MODES (default "own shared"), RUN_BUDGET_S (the
# longest one allocator may run on one workload, default 60: a lock contended by 16 threads
# can make one round take many seconds; cells not reached are missing from the results),
# WORKLOADS (default "W1 W2 W3"), PEERS (the peers' folder, default ./peers).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PEERS=${PEERS:-$HERE/peers}
THREADS=${THREADS:-1,2,4,8,16}
MODES=${MODES:-own shared}
RUN_BUDGET_S=${RUN_BUDGET_S:-60}
WORKLOADS=${WORKLOADS:-W1 W2 W3}
export ROUND_OPS=${ROUND_OPS:-1000000}
RAW=$RESULTS/threads-peers.raw
LOG=$RESULTS/threads-peers.log
B=/tmp/emm_threads_build
OPS=/tmp/anchors_ops
mkdir -p "$B" "$OPS"
: >> "$RAW"
: >> "$LOG"
export PATH=$PATH:/usr/local/cuda/bin
if [ ! -d "$PEERS/src" ]; then
  echo "no peers folder at $PEERS: skipping the peers' many-threads runs" | tee -a "$LOG"
  exit 0
fi
# The op lists and the wheels, unless the peers' run in this call left them.
[ -f "$OPS/W3.ops" ] || { g++ -O2 -std=c++17 -o "$B/gen_ops" "$PEERS/src/gen_ops.cpp" && "$B/gen_ops" "$OPS"; } >> "$LOG" 2>&1
[ -d /tmp/site/librmm ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$PEERS"/wheels/*.whl >> "$LOG" 2>&1
S=/tmp/site
TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>>"$LOG")
PYSITE=$(dirname "$TORCH_DIR")
ABI=$(python3 -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>>"$LOG")
CUDART_DIR=$PYSITE/nvidia/cu13/lib
[ -d "$CUDART_DIR" ] || CUDART_DIR=/usr/local/cuda/lib64
RMM_DEFS="-DCUB_DISABLE_NAMESPACE_MAGIC -DCUB_IGNORE_NAMESPACE_MAGIC_ERROR -DTHRUST_DISABLE_ABI_NAMESPACE -DTHRUST_IGNORE_ABI_NAMESPACE_ERROR -DCCCL_DISABLE_PDL"
SRC=$HERE/peers_threads.cu
(
  nvcc -O2 -std=c++17 -DWITH_RMM $RMM_DEFS -I"$PEERS/src" -I$S/librmm/include/rapids -I$S/librmm/include -I$S/rapids_logger/include \
    -o "$B/threads_rmm" "$SRC" -L$S/librmm/lib64 -L$S/rapids_logger/lib64 -lrmm -lrapids_logger \
    -Xlinker -rpath,$S/librmm/lib64:$S/rapids_logger/lib64 > "$B/rmm.log" 2>&1
  echo "threads_rmm rc=$?" >> "$B/rmm.log"
) &
(
  nvcc -O2 -std=c++17 -DWITH_TORCH -D_GLIBCXX_USE_CXX11_ABI=$ABI -I"$PEERS/src" -I"$TORCH_DIR/include" \
    -o "$B/threads_torch" "$SRC" --cudart shared -L"$CUDART_DIR" -L"$TORCH_DIR/lib" -lc10_cuda -lc10 \
    -Xlinker -rpath,"$CUDART_DIR:$TORCH_DIR/lib" > "$B/torch.log" 2>&1
  echo "threads_torch rc=$?" >> "$B/torch.log"
) &
wait
cat "$B/rmm.log" "$B/torch.log" >> "$LOG"
grep -E "rc=" "$LOG"
for w in $WORKLOADS; do
  [ -x "$B/threads_rmm" ] && for k in rmm_pool rmm_arena; do
    echo "==> $k $w" | tee -a "$LOG"
    timeout -k 5 "$RUN_BUDGET_S" "$B/threads_rmm" $k "$OPS" $w "$THREADS" $MODES 2>> "$LOG" | tee -a "$RAW"
  done
  if [ -x "$B/threads_torch" ]; then
    echo "==> torch_caching $w" | tee -a "$LOG"
    timeout -k 5 "$RUN_BUDGET_S" "$B/threads_torch" torch_caching "$OPS" $w "$THREADS" $MODES 2>> "$LOG" | tee -a "$RAW"
  fi
done
