# Session 8, call 43 (H200): the held budget 1.20 (new) against 1.15 (old, 1108477), alternated,
# three rounds: W2 by 1 and 16 threads; W1 and W3 by 1 and 16; own and shared streams.
set -u
R=$OUT
for b in new old; do gunzip -c hw/emm-$b.gz > /tmp/emm-$b; chmod +x /tmp/emm-$b; done
for i in 1 2 3; do for b in new old; do
  echo "== round $i $b"
  timeout 120 /tmp/emm-$b bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
  timeout 90 /tmp/emm-$b bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1,W3 --round-ops 200000 2>&1 | grep -v "^resource"
done; done > $R/budget.txt 2>&1
grep -E "^==|sharded" $R/budget.txt
