# Session 7, call 23: growers choose victims by published hints (da3da48).
set -u
E=$(pwd)/target/hardware/bin/emm; R=$OUT
for i in 1 2 3; do echo "== round $i"
  timeout 60 $E bench --backend cuda --threads 1,8 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
  timeout 90 $E bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1,W3 --round-ops 200000 2>&1 | grep -v "^resource"
done > $R/rounds.txt
cat $R/rounds.txt
