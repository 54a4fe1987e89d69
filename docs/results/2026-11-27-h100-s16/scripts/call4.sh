# Session 16, call 4: the bundle of f8da6d2 (`cargo xtask hardware --bundle-only`): bench
# (pool-vmm, pool), peers and sixteen rounds, the report's ratio read three ways.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
uptime > $R/host.txt 2>&1
PARTS=bench,peers,rounds BENCH_RESOURCES=pool-vmm,pool ANCHOR_BUDGET_S=150 ROUNDS=16 \
  ROUNDS_RESOURCES=pool-vmm RESULTS="$R/run" timeout 540 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -3 $R/run.log
sed -n '/Standard workloads/,/Peers in the same/p' $R/report.md | head -30
sed -n '/Many processes/,$p' $R/report.md | head -16
