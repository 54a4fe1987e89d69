# Session 7, call 34: where one thread's time goes in W1 by 1 and by 16 threads (perf, user space, cpu-clock).
set -u
R=$OUT; H=$(pwd)/target/hardware
tar xzf hw/perfpack.tgz -C /tmp; P="env LD_LIBRARY_PATH=/tmp/perfpack/lib /tmp/perfpack/perf"
$P --version; cat /proc/sys/kernel/perf_event_paranoid
for t in 1 16; do
  $P record -q -e cpu-clock:u -F 4000 -o /tmp/perf.$t.data -- $H/bin/emm bench --backend cuda --threads $t --streams own --resource sharded --workload W1 --round-ops 400000 2>&1 | tail -2
  $P report -i /tmp/perf.$t.data --stdio --sort symbol 2>/dev/null | grep -v "^#" | grep -v "^$" | head -40 > $R/perf-w1-$t.txt
  echo "== $t threads"; cat $R/perf-w1-$t.txt
done
