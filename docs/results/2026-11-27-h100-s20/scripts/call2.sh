# Session 20, calls 2 and 7: the bundle of 67ba1b5 (branchless merges) on a lent H100
# (`cargo xtask hardware --bundle-only`): bench (pool-vmm, pool), the peers and ROUNDS rounds
# (16 in call 2, 12 in call 7: `ROUNDS=12 LIMIT=440 bash call2.sh`), as session 19's call 5.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
uptime > $R/host.txt 2>&1; grep "model name" /proc/cpuinfo | head -1 >> $R/host.txt
PARTS=bench,peers,rounds BENCH_RESOURCES=pool-vmm,pool ANCHOR_BUDGET_S=150 ROUNDS=${ROUNDS:-16} \
  ROUNDS_RESOURCES=pool-vmm RESULTS="$R/run" timeout ${LIMIT:-560} bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -3 $R/run.log
sed -n '/Standard workloads/,/The simulator/p' $R/report.md | head -8
sed -n '/Many processes/,$p' $R/report.md | head -16
