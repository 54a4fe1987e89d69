# Session 15, call 70 (H100): (1) three CPU-only builds interleaved, twelve rounds, VMM=1, median
# of 7 passes: s14 (a220ed4, main when the session began, through dyn), s15a (12ebcca, call 69's
# s15) and s15 (b17a87d: the first stream's slot a constant on the hot path), the last two with
# MONO=1; (2) the bundle of b17a87d: bench (pool-vmm, pool), peers and rounds (16 rounds).
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
uptime > $R/host.txt 2>&1
for i in $(seq 1 12); do
  for v in s14 s15a s15; do
    for w in w1 w2 w3; do
      m=$(MONO=$([ $v != s14 ] && echo 1) VMM=1 hw/ab/prof_$v $w 7 2>&1 | awk '{print $1}' | sort -n | sed -n 4p)
      echo "$i $v $w $m"
    done
  done
done > $R/ab.txt 2>&1
for v in s14 s15a s15; do for w in w1 w2 w3; do
  echo "$v $w $(awk -v v=$v -v w=$w '$2==v && $3==w {print $4}' $R/ab.txt | sort -n | tr '\n' ' ')"
done; done | tee $R/ab-summary.txt
PARTS=bench,peers,rounds BENCH_RESOURCES=pool-vmm,pool ANCHOR_BUDGET_S=150 ROUNDS=16 \
  ROUNDS_RESOURCES=pool-vmm RESULTS="$R/run" timeout 480 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -3 $R/run.log
sed -n '/Standard workloads/,/Peers in the same/p' $R/report.md | head -30
sed -n '/Many processes/,$p' $R/report.md | head -16
