# Session 8, call 49 (H200): the shared pool serving a smaller chunk from its free memory rather
# than trading its free chunks with the driver (new, uncommitted tree of b2c7fca + exchange_or_smaller)
# against b2c7fca, ten rounds interleaved: W2 by 1 and 16 threads; then W1 by 1 and 16, four rounds.
set -u
R=$OUT
for b in new b2c; do gunzip -c hw/emm-$b.gz > /tmp/emm-$b; chmod +x /tmp/emm-$b; done
for i in 1 2 3 4 5 6 7 8 9 10; do for b in new b2c; do
  timeout 60 /tmp/emm-$b bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource" >> $R/w2-$b.txt
done; done
for i in 1 2 3 4; do for b in new b2c; do
  timeout 60 /tmp/emm-$b bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1 --round-ops 200000 2>&1 | grep -v "^resource" >> $R/w1-$b.txt
done; done
for f in w2-new w2-b2c w1-new w1-b2c; do echo "== $f"; bash hw/summ.sh $R/$f.txt; awk '$1=="sharded" && $3==16 {m+=$NF; d+=$7; n++} END {printf "moves/kop %.3f mem/kop %.3f\n", m/n, d/n}' $R/$f.txt; done
