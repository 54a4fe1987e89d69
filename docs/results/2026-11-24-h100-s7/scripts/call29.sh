# Session 7, call 29: a diagnostic build of 8b8ed81: growth, exchange, shared-pool hold, cuMemAlloc and lock waits, warm-up then timed rounds.
set -u
R=$OUT; gunzip -c hw/bin/emm-d.gz > /tmp/emm-d; chmod +x /tmp/emm-d
EMM_DIAG=1 timeout 100 /tmp/emm-d bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1,W3 --round-ops 200000 2>&1 | grep -v "^resource" | tee $R/diag.txt
EMM_DIAG=1 timeout 100 /tmp/emm-d bench --backend cuda --threads 8 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource" | tee -a $R/diag.txt
