# Session 19, call 5: the bundle of 903fcf2 on a lent H100 (`cargo xtask hardware
# --bundle-only`): bench (pool-vmm, pool), the peers and sixteen rounds, as session 18's call 4.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
uptime > $R/host.txt 2>&1
PARTS=bench,peers,rounds BENCH_RESOURCES=pool-vmm,pool ANCHOR_BUDGET_S=150 ROUNDS=16 \
  ROUNDS_RESOURCES=pool-vmm RESULTS="$R/run" timeout 560 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -3 $R/run.log
sed -n '/Standard workloads/,/The simulator/p' $R/report.md | head -8
sed -n '/Many processes/,$p' $R/report.md | head -16
