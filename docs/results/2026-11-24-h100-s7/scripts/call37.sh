# Session 7, call 37: final code 11d1932. host_floor; the contract, gate and smoke tests; one thread
# beside the peers; the sharded pool by 1 and 16 threads (W2: 8), three rounds.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
$H/bin/host_floor > $R/host-floor.txt 2>&1
PARTS=smoke,check,gate,bench,peers BENCH_RESOURCES=pool-vmm,pool,sharded,binning ANCHOR_BUDGET_S=150 \
  RESULTS="$R/run" timeout 400 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
for i in 1 2 3; do echo "== round $i"
  timeout 50 $H/bin/emm bench --backend cuda --threads 1,8 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
  timeout 60 $H/bin/emm bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1,W3 --round-ops 200000 2>&1 | grep -v "^resource"
done > $R/rounds.txt 2>&1
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
cat $R/host-floor.txt | grep -v harness | tr '\n' ' '; echo
tail -5 $R/run.log
tar xzf "$R/run.tgz" -O run/report.md 2>/dev/null | sed -n '/Standard workloads/,/cost model/p' | head -30
tar xzf "$R/run.tgz" -O run/peers/results.md 2>/dev/null | sed -n '/Speed/,/^## Device/p' | head -14
cat $R/rounds.txt
