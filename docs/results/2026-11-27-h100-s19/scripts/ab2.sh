# Session 19, calls 1, 2, 4, 7 and 8: builds of the A/B driver (`core/examples/prof_w3.rs`, local,
# stripped into hw/ab/prof_<build>) interleaved, MONO=1 VMM=1, one process a build, workload and
# round; each process's fourth-fastest and fastest of PASSES passes into $OUT/ab.txt.
#   call 1: PASSES=11 BUILDS="base s18head tag both" ROUNDS=55 bash hw/ab2.sh
#   call 2: PASSES=11 BUILDS="base s18head head2 head3" ROUNDS=55 bash hw/ab2.sh
#   call 4: PASSES=11 BUILDS="base head" ROUNDS=70 bash hw/ab2.sh
#   calls 7, 8: PASSES=11 BUILDS="head bl" ROUNDS=40, then 70, bash hw/ab2.sh
# then `python3 ../../2026-11-27-h100-s18/scripts/pair.py $OUT/ab.txt "base <build>"` (each
# build over base in the same round, median over rounds) and `summ.py` there (fast and slow
# processes apart). The summary this script prints calls column 4 the median; with 11 passes it
# is the fourth-fastest.
set -u
R=$OUT
uptime > $R/host.txt 2>&1; nproc >> $R/host.txt; grep "model name" /proc/cpuinfo | head -1 >> $R/host.txt
for i in $(seq 1 "$ROUNDS"); do
  for v in $BUILDS; do
    for w in w1 w2 w3; do
      p=$(MONO=1 VMM=1 hw/ab/prof_$v $w ${PASSES:-7} 2>&1 | awk '{print $1}' | sort -n)
      echo "$i $v $w $(echo "$p" | sed -n 4p) $(echo "$p" | sed -n 1p)"
    done
  done
done > $R/ab.txt 2>&1
for k in 4 5; do echo "== column $k ($([ $k = 4 ] && echo median || echo min) pass of 7), sorted over processes"
for v in $BUILDS; do for w in w1 w2 w3; do
  echo "$v $w $(awk -v v=$v -v w=$w -v k=$k '$2==v && $3==w {print $k}' $R/ab.txt | sort -n | tr '\n' ' ')"
done; done; done | tee $R/ab-summary.txt
