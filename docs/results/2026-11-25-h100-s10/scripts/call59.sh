# Session 10, call 59 (H100): the bundle's new `rounds` part end to end (main at the rounds
# commit): the standard bench and peers, then eight rounds of pool-vmm and pool against RMM
# binning and PyTorch, and the report's table of medians.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
PARTS=bench,peers,rounds BENCH_RESOURCES=pool-vmm,pool,binning ANCHOR_BUDGET_S=150 \
  ROUNDS_RESOURCES=pool-vmm,pool RESULTS="$R/run" timeout 560 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -4 $R/run.log
sed -n '/Standard workloads/,/cost model/p' $R/report.md | head -9
sed -n '/Many processes/,$p' $R/report.md | head -20
