# Session 10, call 57 (H100): the pool's hot path, CPU only (pool over the simulated GPU,
# expandable segment, VMM=1): s9 = 520f06b (session 9's code), s10 = 3b8d2c5 (masked slab views,
# list index in 7 instructions, heap inlined). Interleaved, 10 rounds, median of 7 passes each.
# Then host_floor and the bundle (3b8d2c5) beside the peers.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
lscpu > $R/lscpu.txt 2>&1
for i in 1 2 3 4 5 6 7 8 9 10; do
  for v in s9 s10; do
    for w in w1 w2 w3; do
      m=$(VMM=1 hw/ab/prof_$v $w 7 2>&1 | awk '{print $1}' | sort -n | sed -n 4p)
      echo "$i $v $w $m"
    done
  done
done > $R/ab.txt 2>&1
for v in s9 s10; do for w in w1 w2 w3; do
  echo "$v $w $(awk -v v=$v -v w=$w '$2==v && $3==w {print $4}' $R/ab.txt | sort -n | tr '\n' ' ')"
done; done | tee $R/ab-summary.txt
$H/bin/host_floor > $R/host-floor.txt 2>&1
PARTS=bench,peers BENCH_RESOURCES=pool-vmm,pool,binning ANCHOR_BUDGET_S=150 \
  RESULTS="$R/run" timeout 420 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
grep -v harness $R/host-floor.txt | tr '\n' ' '; echo
tail -3 $R/run.log
tar xzf "$R/run.tgz" -O run/report.md 2>/dev/null | sed -n '/Standard workloads/,/cost model/p' | head -30
tar xzf "$R/run.tgz" -O run/peers/results.md 2>/dev/null | sed -n '/Speed/,/^## Device/p' | head -14
