# Session 21: where the pool's time goes on a lent H100 host (perf stat, perf record).
set -u
R=$OUT
uptime > $R/host.txt 2>&1; grep "model name" /proc/cpuinfo | head -1 >> $R/host.txt
export LD_LIBRARY_PATH=$PWD/hw/perf/lib PATH=$PWD/hw/perf:$PATH
{ which perf; cat /proc/sys/kernel/perf_event_paranoid; perf --version; } >> $R/host.txt 2>&1
B=hw/ab/prof_dbg
EV=cycles:u,instructions:u,branches:u,branch-misses:u,L1-dcache-loads:u,L1-dcache-load-misses:u,dTLB-load-misses:u,LLC-load-misses:u
for w in w1 w3; do
  for k in 1 2; do
    for n in 1 21; do
      echo "== $w passes $n run $k" >> $R/stat.txt
      MONO=1 VMM=1 perf stat -x, -e $EV $B $w $n >> $R/stat.txt 2>&1
    done
  done
done
MONO=1 VMM=1 perf record -o $R/w3.data -e cycles:u -c 20011 $B w3 21 > /dev/null 2>&1
perf annotate -i $R/w3.data --stdio -l --no-source 2>/dev/null | head -3000 > $R/annotate-w3.txt
perf annotate -i $R/w3.data --stdio 2>/dev/null | head -6000 > $R/annotate-w3-src.txt
perf report -i $R/w3.data --stdio --sort sym 2>/dev/null | head -40 > $R/report-w3.txt
rm -f $R/w3.data
cat $R/stat.txt | head -60; head -20 $R/report-w3.txt
