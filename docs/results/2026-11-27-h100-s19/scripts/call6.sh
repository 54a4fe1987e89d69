# Session 19, call 6: the bundle of 903fcf2, smoke tests and the Python acceptance (numba-cuda's
# memory-manager modules and whole suite with emm.numba, the CuPy and PyTorch workloads, one
# shared pool), after the pool's search changed (the own class's head without a branch).
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
uptime > $R/host.txt 2>&1
PARTS=smoke,python NUMBA_SUITE_TIMEOUT=300 RESULTS="$R/run" timeout 560 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
cp "$R/run/python/summary.md" "$R/python-summary.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -5 $R/run.log
cat $R/python-summary.md 2>/dev/null | head -60
