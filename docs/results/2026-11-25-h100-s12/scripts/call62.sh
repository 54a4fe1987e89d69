# Session 12, call 62 (H100): (1) three CPU-only builds interleaved, twelve rounds, VMM=1, median
# of 7 passes: s12 (main), s12 with the peers' op encoding (I64=1: the timed loop reads one i64
# an op, as the peers' harness does, instead of a 16-byte Op), tls (the biased lock's way in
# without the thread-number branch); (2) the bundle's bench (pool-vmm, pool, cuda, async: the
# cost model's rows), peers and rounds (12 rounds).
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
uptime > $R/host.txt 2>&1
for i in $(seq 1 12); do
  for v in s12 i64 tls; do
    for w in w1 w2 w3; do
      case $v in
        s12) m=$(VMM=1 hw/ab/prof_s12 $w 7 2>&1 | awk '{print $1}' | sort -n | sed -n 4p) ;;
        i64) m=$(I64=1 VMM=1 hw/ab/prof_s12 $w 7 2>&1 | awk '{print $1}' | sort -n | sed -n 4p) ;;
        tls) m=$(VMM=1 hw/ab/prof_tls $w 7 2>&1 | awk '{print $1}' | sort -n | sed -n 4p) ;;
      esac
      echo "$i $v $w $m"
    done
  done
done > $R/ab.txt 2>&1
for v in s12 i64 tls; do for w in w1 w2 w3; do
  echo "$v $w $(awk -v v=$v -v w=$w '$2==v && $3==w {print $4}' $R/ab.txt | sort -n | tr '\n' ' ')"
done; done | tee $R/ab-summary.txt
PARTS=bench,peers,rounds BENCH_RESOURCES=pool-vmm,pool,cuda,async ANCHOR_BUDGET_S=150 ROUNDS=12 \
  ROUNDS_RESOURCES=pool-vmm RESULTS="$R/run" timeout 460 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -3 $R/run.log
sed -n '/Standard workloads/,/Peers in the same/p' $R/report.md | head -30
sed -n '/Many processes/,$p' $R/report.md | head -16
