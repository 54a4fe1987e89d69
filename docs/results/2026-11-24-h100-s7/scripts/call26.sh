# Session 7, call 26: power-of-two chunks (8b8ed81). W2 by 1 and 8 threads, three rounds; W1, W3 by 1 and 16 once.
set -u
E=$(pwd)/target/hardware/bin/emm; R=$OUT
for i in 1 2 3; do echo "== round $i"
  timeout 60 $E bench --backend cuda --threads 1,8 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
done > $R/w2-rounds.txt
timeout 100 $E bench --backend cuda --threads 1,2,4,8 --streams own,shared --resource sharded --workload W2 --round-ops 200000 > $R/w2-sweep.txt 2>&1
timeout 90 $E bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1,W3 --round-ops 200000 > $R/w1w3.txt 2>&1
cat $R/w2-rounds.txt $R/w2-sweep.txt $R/w1w3.txt
