# Session 17, call 3: an A/B of the record check (7e4005c) against it with the found list
# head popped (`TlsfIndex::take`), 60 rounds; then the bundle of 7e4005c
# (`cargo xtask hardware --bundle-only`): bench (pool-vmm, pool), the peers and sixteen rounds.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
uptime > $R/host.txt 2>&1
BUILDS="check pop" ROUNDS=60 bash hw/ab.sh > /dev/null 2>&1
mkdir -p $R/ab && mv $R/ab.txt $R/ab-summary.txt $R/ab/ && cp $R/host.txt $R/ab/ 2>/dev/null
python3 hw/ab/summ.py $R/ab/ab.txt "check pop"
PARTS=bench,peers,rounds BENCH_RESOURCES=pool-vmm,pool ANCHOR_BUDGET_S=150 ROUNDS=16 \
  ROUNDS_RESOURCES=pool-vmm RESULTS="$R/run" timeout 480 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -3 $R/run.log
sed -n '/Standard workloads/,/The simulator/p' $R/report.md | head -8
sed -n '/Many processes/,$p' $R/report.md | head -16
