# Session 8, call 46 (H100): b2c7fca (held budget 1.20) as committed: W1 and W3 by 1 and 16 threads,
# six rounds; W2 by 1 and 8, four rounds; own and shared streams.
set -u
R=$OUT; gunzip -c hw/emm-new.gz > /tmp/emm; chmod +x /tmp/emm
for i in 1 2 3 4 5 6; do
  echo "== round $i"
  timeout 80 /tmp/emm bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1,W3 --round-ops 200000 2>&1 | grep -v "^resource"
  [ $i -le 4 ] && timeout 60 /tmp/emm bench --backend cuda --threads 1,8 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
done > $R/rounds.txt 2>&1
bash hw/summ.sh $R/rounds.txt | tee $R/summary.txt
