# Session 7, call 28: a diagnostic build of 8b8ed81 timing the slow paths, W1 and W3 by 1 and 16 threads.
set -u
R=$OUT; gunzip -c hw/bin/emm-d.gz > /tmp/emm-d; chmod +x /tmp/emm-d
for i in 1 2; do
  EMM_DIAG=1 timeout 100 /tmp/emm-d bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1,W3 --round-ops 200000 2>&1 | grep -v "^resource"
done | tee $R/diag.txt
