# Session 16, call 5: main, the branchless merges (bl) and those with 64 classes a power of two
# (blsl6) interleaved, forty rounds, each process's median and fastest of 7 passes
# (`bash hw/ab/call.sh; python3 hw/ab/summ.py $OUT/ab.txt "base bl blsl6"`).
set -u
R=$OUT
uptime > $R/host.txt 2>&1; nproc >> $R/host.txt; grep "model name" /proc/cpuinfo | head -1 >> $R/host.txt
V="base bl blsl6"
for i in $(seq 1 40); do
  for v in $V; do
    for w in w1 w2 w3; do
      p=$(MONO=1 VMM=1 hw/ab/prof_$v $w 7 2>&1 | awk '{print $1}' | sort -n)
      echo "$i $v $w $(echo "$p" | sed -n 4p) $(echo "$p" | sed -n 1p)"
    done
  done
done > $R/ab.txt 2>&1
for k in 4 5; do echo "== column $k ($([ $k = 4 ] && echo median || echo min) pass of 7), sorted over processes"
for v in $V; do for w in w1 w2 w3; do
  echo "$v $w $(awk -v v=$v -v w=$w -v k=$k '$2==v && $3==w {print $k}' $R/ab.txt | sort -n | tr '\n' ' ')"
done; done; done | tee $R/ab-summary.txt
