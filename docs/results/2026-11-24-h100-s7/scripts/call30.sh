# Session 7, call 30: diagnostic builds of 8b8ed81 (d) and d81e2a8 (d2, the pool's growth unlocked), alternated.
set -u
R=$OUT; for b in emm-d emm-d2; do gunzip -c hw/bin/$b.gz > /tmp/$b; chmod +x /tmp/$b; done
for i in 1 2; do for b in emm-d emm-d2; do
  echo "== round $i $b"
  EMM_DIAG=1 timeout 100 /tmp/$b bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1,W3 --round-ops 200000 2>&1 | grep -v "^resource"
  EMM_DIAG=1 timeout 100 /tmp/$b bench --backend cuda --threads 1,8 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
done; done > $R/diag.txt 2>&1
grep -E "^==|sharded .* (8|16) " $R/diag.txt
