# Session 13, call 63: hardware counters of the pool's hot path (prof_w3 on the sim driver: host code only).
set -u
R=$OUT; mkdir -p /tmp/pp; tar xzf hw/perfpack.tgz -C /tmp/pp; P="env LD_LIBRARY_PATH=/tmp/pp/perfpack/lib /tmp/pp/perfpack/perf"
$P --version; cat /proc/sys/kernel/perf_event_paranoid; grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu MHz" /proc/cpuinfo; grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -c .
lscpu | head -30 > $R/lscpu.txt
B=hw/ab/prof_dbg
EV=cycles:u,instructions:u,branches:u,branch-misses:u,L1-dcache-loads:u,L1-dcache-load-misses:u
for w in w1 w3; do
  for n in 2 12; do echo "== $w $n passes"; VMM=1 $P stat -x, -e $EV -- $B $w $n 2>&1 | tail -14; done
done > $R/stat.txt 2>&1
cat $R/stat.txt
for w in w1 w3; do
  VMM=1 $P record -q -e cycles:u -F 20000 -o $R/rec-$w.data -- $B $w 20 2>&1 | tail -3
  VMM=1 $P record -q -e branch-misses:u -c 2000 -o $R/bm-$w.data -- $B $w 20 2>&1 | tail -1
done
ls -la $R
