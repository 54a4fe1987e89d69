# Session 7, call 38: bba6a74 with REBIAS_AFTER 4096 (as committed) against 65536, alternated.
set -u
R=$OUT
for i in 1 2 3; do for b in 4096 65536; do
  echo "== round $i rebias $b"
  timeout 50 hw/b/emm-$b bench --backend cuda --threads 1,8 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
  timeout 60 hw/b/emm-$b bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1,W3 --round-ops 200000 2>&1 | grep -v "^resource"
done; done > $R/rebias.txt 2>&1
grep -E "^==|sharded .* (8|16) " $R/rebias.txt
