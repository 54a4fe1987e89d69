# Session 8, call 39: a diagnostic build of 1108477 (timers, steals by kind, revocations) with
# switches: rebias threshold, held budget, peak window. W2 by 1 and 8 threads, two rounds each.
set -u
R=$OUT; gunzip -c hw/emm-x.gz > /tmp/emm-x; chmod +x /tmp/emm-x
run() { echo "== $*"; env EMM_DIAG=1 "$@" timeout 50 /tmp/emm-x bench --backend cuda --threads 1,8 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"; }
for i in 1 2; do
  run X=base
  run EMM_X_REBIAS=256
  run EMM_X_REBIAS=1000000000000
  run EMM_X_BUDGET=1.20
  run EMM_X_WINDOW=16384
done > $R/w2-knobs.txt 2>&1
tar xzf hw/perfpack.tgz -C /tmp; P="env LD_LIBRARY_PATH=/tmp/perfpack/lib /tmp/perfpack/perf"
$P record -q -e cpu-clock -F 2000 -o /tmp/perf.data -- /tmp/emm-x bench --backend cuda --threads 8 --streams own --resource sharded --workload W2 --round-ops 400000 > $R/perf-run.txt 2>&1
$P report -i /tmp/perf.data --stdio --sort dso,symbol 2>/dev/null | grep -v "^#" | grep -v "^$" | head -40 | cut -c1-150 > $R/perf-w2-8.txt
grep -E "^==|sharded .* (1|8) |DIAG" $R/w2-knobs.txt | head -80; cat $R/perf-w2-8.txt
