# Session 8, call 44 (H200): a diagnostic build of b2c7fca (held budget 1.20) with switches:
# rebias threshold, steal divisor, large-growth divisor; W2 by 1 and 16 threads, three rounds.
# Then perf (user symbols) of the timed rounds of W2 by 16 threads, own streams.
set -u
R=$OUT; gunzip -c hw/emm-x.gz > /tmp/emm-x; chmod +x /tmp/emm-x
run() { echo "== $*"; env EMM_DIAG=1 "$@" timeout 100 /tmp/emm-x bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"; }
for i in 1 2 3; do
  run X=base
  run EMM_X_REBIAS=1024
  run EMM_X_REBIAS=16384
  run EMM_X_STEALDIV=4
  run EMM_X_LGDIV=32
done > $R/w2-16-knobs.txt 2>&1
tar xzf hw/perfpack.tgz -C /tmp; P="env LD_LIBRARY_PATH=/tmp/perfpack/lib /tmp/perfpack/perf"
rm -f /tmp/ctl; mkfifo /tmp/ctl
EMM_X_NOHELD=1 EMM_X_PERFCTL=/tmp/ctl $P record -q -e cpu-clock -F 2000 -D -1 --control fifo:/tmp/ctl -o /tmp/p.data -- /tmp/emm-x bench --backend cuda --threads 16 --streams own --resource sharded --workload W2 --round-ops 400000 > $R/perf-run.txt 2>&1
$P report -i /tmp/p.data --stdio --sort dso,symbol 2>/dev/null | grep -v "^#" | grep -v "^$" | head -45 | cut -c1-160 > $R/perf-w2-16.txt
grep -E "^==|sharded .* (1|16) " $R/w2-16-knobs.txt; cat $R/perf-run.txt | grep sharded; head -30 $R/perf-w2-16.txt
