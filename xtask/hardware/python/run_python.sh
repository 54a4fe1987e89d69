#!/usr/bin/env bash
# emm's Python acceptance on a GPU machine (no Rust needed): numba-cuda's own tests with
# NUMBA_CUDA_MEMORY_MANAGER=emm.numba (the eight memory-manager modules serially, then the whole
# suite, run as the baselines in baselines/ were), a CuPy and a PyTorch workload with
# emm vs their own allocators, and Numba + CuPy + PyTorch sharing one emm pool in one process.
# Results and logs go to OUT_DIR; OUT_DIR/summary.md says what passed.
#
# usage: bash run_python.sh OUT_DIR
# Environment: PY_STEPS (default modules,cupy,torch,shared,numba), NUMBA_SUITE_TIMEOUT (330 s).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: run_python.sh OUT_DIR}
mkdir -p "$OUT"
STEPS=${PY_STEPS:-modules,cupy,torch,shared,numba}
step() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# The two environment fixes the bundle's env/ carries (--python-env): numpy 2.5 lacks
# row_stack (sitecustomize.py), numba-cuda's tests import filecheck (a wheel, no index).
SITE=${EMM_PY_SITE:-/tmp/emm-site}
python3 -m pip install -q --no-index --no-deps --target "$SITE" "$HERE"/env/filecheck-*.whl > "$OUT/pip.log" 2>&1 \
  || echo "filecheck could not be installed (see $OUT/pip.log)"
export PYTHONPATH="$HERE:$HERE/env:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export EMM_LIBRARY="$HERE/emm/libemm.so"
export EMM_BACKEND=cuda
unset EMM_MEMORY_MANAGER
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, numpy, numba, cupy, torch; print(sys.version.split()[0], 'numpy', numpy.__version__, 'numba', numba.__version__, 'cupy', cupy.__version__, 'torch', torch.__version__)"
  python3 -c "import numba_cuda; print('numba-cuda', numba_cuda.__version__)" 2>/dev/null
  python3 -c "import emm, json; print('emm', json.dumps(emm.stats()))"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

MODULES="numba.cuda.tests.cudapy.test_ipc numba.cuda.tests.cudadrv.test_emm_plugins
numba.cuda.tests.cudadrv.test_deallocations numba.cuda.tests.cudadrv.test_managed_alloc
numba.cuda.tests.cudadrv.test_cuda_memory numba.cuda.tests.cudadrv.test_host_alloc
numba.cuda.tests.cudadrv.test_context_stack numba.cuda.tests.cudapy.test_cuda_array_interface"

if step modules; then
  echo "==> numba-cuda memory-manager modules, serially, with emm.numba"
  (cd /tmp && NUMBA_CUDA_MEMORY_MANAGER=emm.numba timeout 180 python3 -m unittest -v $MODULES) \
    > "$OUT/numba-memory-modules-emm.log" 2>&1
  tail -3 "$OUT/numba-memory-modules-emm.log"
fi
for w in cupy torch shared; do
  step "$w" || continue
  script=$HERE/${w}_workload.py
  [ "$w" = shared ] && script=$HERE/shared_pool.py
  echo "==> $w workload"
  timeout 300 python3 "$script" "$OUT" > "$OUT/$w.log" 2>&1
  echo "  exit $?: $(tail -1 "$OUT/$w.log")"
  if [ "$w" = cupy ]; then
    echo "==> cupy allocation cost (CuPy's pool, emm's C-level and Python allocators)"
    timeout 300 python3 "$HERE/cupy_alloc.py" "$OUT" > "$OUT/cupy-alloc.log" 2>&1
    echo "  exit $?: $(tail -1 "$OUT/cupy-alloc.log")"
  fi
done
if step numba; then
  echo "==> numba-cuda's whole suite with emm.numba (about 4 minutes)"
  (cd /tmp && NUMBA_CUDA_MEMORY_MANAGER=emm.numba timeout "${NUMBA_SUITE_TIMEOUT:-330}" \
    python3 -m numba.runtests -v -m 16 numba.cuda.tests) > "$OUT/numba-suite-emm.log" 2>&1
  echo "  exit $?"
  tail -3 "$OUT/numba-suite-emm.log"
fi
python3 "$HERE/numba_summary.py" "$OUT" "$OUT/numba-suite-emm.log" "$HERE/baselines/numba-cuda-suite-default.log" \
  "$OUT/numba-memory-modules-emm.log" "$HERE/baselines/numba-cuda-memory-modules-default.log" > /dev/null
python3 "$HERE/report_python.py" "$OUT"
