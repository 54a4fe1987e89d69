# Session 7, call 35: e12172b (rebias) against d81e2a8, alternated: W1, W3 by 1 and 16 threads,
# W2 by 1 and 8; then perf of W1 by 16 threads at e12172b.
set -u
R=$OUT; NEW=$(pwd)/target/hardware/bin/emm
gunzip -c hw/emm-prev.gz > /tmp/emm-prev; chmod +x /tmp/emm-prev
for i in 1 2 3; do for b in /tmp/emm-prev $NEW; do
  echo "== round $i $b"
  timeout 60 $b bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1,W3 --round-ops 200000 2>&1 | grep -v "^resource"
  timeout 50 $b bench --backend cuda --threads 1,8 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
done; done > $R/ab.txt 2>&1
tar xzf hw/perfpack.tgz -C /tmp; P="env LD_LIBRARY_PATH=/tmp/perfpack/lib /tmp/perfpack/perf"
$P record -q -e cpu-clock:u -F 4000 -o /tmp/perf.data -- $NEW bench --backend cuda --threads 16 --streams own --resource sharded --workload W1 --round-ops 400000 > /dev/null 2>&1
$P report -i /tmp/perf.data --stdio --sort symbol 2>/dev/null | grep -v "^#" | grep -v "^$" | head -25 | cut -c1-140 > $R/perf-w1-16.txt
grep -E "^==|sharded .* (8|16) " $R/ab.txt; cat $R/perf-w1-16.txt
