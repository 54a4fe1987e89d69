# Session 18: the lent host's CPUs (topology, speed of each) and its counters, if any.
set -u
R=$OUT
{ lscpu; echo; for c in /sys/devices/system/cpu/cpu[0-9]*; do echo "$c $(cat $c/topology/thread_siblings_list 2>/dev/null) $(cat $c/topology/physical_package_id 2>/dev/null)"; done; grep MHz /proc/cpuinfo; cat /proc/sys/kernel/perf_event_paranoid; which perf taskset; } > $R/cpus.txt 2>&1
gcc -O2 -o /tmp/perfwrap hw/pc/perfwrap.c 2>> $R/cpus.txt
for r in 1 2 3; do for c in $(seq 0 15); do
  echo "$r $c $(MONO=1 VMM=1 taskset -c $c hw/ab/prof_base w1 5 2>&1 | awk '{print $1}' | sort -n | head -1)"
done; done > $R/percpu.txt 2>&1
for b in base bl v3; do for c in 0 1 2 3; do for p in 1 9; do
  echo "== $b cpu$c passes$p"; MONO=1 VMM=1 taskset -c $c /tmp/perfwrap hw/ab/prof_$b w1 $p 2>&1 | tr '\n' ' '; echo
done; done; done > $R/counters.txt 2>&1
