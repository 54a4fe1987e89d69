# Session 18, calls 3-6 and 9: session 16's ab.sh with PASSES passes a process (default 7).
# Builds of the A/B driver (stripped into hw/ab/prof_<build>) interleaved, VMM=1; each
# process's fourth-fastest pass (the median of 7) and fastest pass into $OUT/ab.txt, e.g.
#   PASSES=11 BUILDS="base flc" ROUNDS=70 bash hw/ab2.sh
# then `python3 summ.py` and `python3 pair.py $OUT/ab.txt "$BUILDS"`. The summary's heading
# below says "of 7" whatever PASSES was (as it ran).
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
