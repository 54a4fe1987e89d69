# Session 16, calls 2, 3 and 5: builds of the A/B driver (stripped into hw/ab/prof_<build>)
# interleaved, VMM=1; each process's median and fastest of 7 passes into $OUT/ab.txt.
#   call 2: BUILDS="base sl6 sl6l4" ROUNDS=30 bash ab.sh
#   call 3: BUILDS="base bl" ROUNDS=40 bash ab.sh
#   call 5: BUILDS="base bl blsl6" ROUNDS=40 bash ab.sh
# then `python3 summ.py $OUT/ab.txt "$BUILDS"` splits the processes by the host's two speeds.
set -u
R=$OUT
uptime > $R/host.txt 2>&1; nproc >> $R/host.txt; grep "model name" /proc/cpuinfo | head -1 >> $R/host.txt
for i in $(seq 1 "$ROUNDS"); do
  for v in $BUILDS; do
    for w in w1 w2 w3; do
      p=$(MONO=1 VMM=1 hw/ab/prof_$v $w 7 2>&1 | awk '{print $1}' | sort -n)
      echo "$i $v $w $(echo "$p" | sed -n 4p) $(echo "$p" | sed -n 1p)"
    done
  done
done > $R/ab.txt 2>&1
for k in 4 5; do echo "== column $k ($([ $k = 4 ] && echo median || echo min) pass of 7), sorted over processes"
for v in $BUILDS; do for w in w1 w2 w3; do
  echo "$v $w $(awk -v v=$v -v w=$w -v k=$k '$2==v && $3==w {print $k}' $R/ab.txt | sort -n | tr '\n' ' ')"
done; done; done | tee $R/ab-summary.txt
