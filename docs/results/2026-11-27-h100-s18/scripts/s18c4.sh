# Session 18, call 4: an A/B of main (2caf91c) against the free's two merge branches as one
# four-way dispatch, 40 rounds of 11 passes; then the bundle of 2caf91c
# (`cargo xtask hardware --bundle-only`): bench (pool-vmm, pool), the peers and sixteen rounds.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
uptime > $R/host.txt 2>&1
PASSES=11 BUILDS="base m4" ROUNDS=40 bash hw/ab2.sh > /dev/null 2>&1
mkdir -p $R/ab && mv $R/ab.txt $R/ab-summary.txt $R/ab/ && cp $R/host.txt $R/ab/ 2>/dev/null
python3 hw/ab/summ.py $R/ab/ab.txt "base m4"; python3 hw/ab/pair.py $R/ab/ab.txt "base m4"
PARTS=bench,peers,rounds BENCH_RESOURCES=pool-vmm,pool ANCHOR_BUDGET_S=150 ROUNDS=16 \
  ROUNDS_RESOURCES=pool-vmm RESULTS="$R/run" timeout 450 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -3 $R/run.log
sed -n '/Standard workloads/,/The simulator/p' $R/report.md | head -8
sed -n '/Many processes/,$p' $R/report.md | head -16
