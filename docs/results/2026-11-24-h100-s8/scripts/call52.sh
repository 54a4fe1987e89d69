# Session 8, call 52 (H200): the shared pool taking 2 or 4 chunks from the driver at once
# (EMM_X_GROWK, a diagnostic build of b2c7fca) against one, six rounds interleaved: W2 by 1 and 16.
set -u
R=$OUT; gunzip -c hw/emm-x.gz > /tmp/emm-x; chmod +x /tmp/emm-x
for i in 1 2 3 4 5 6; do for k in 1 2 4; do
  EMM_DIAG=1 EMM_X_GROWK=$k timeout 100 /tmp/emm-x bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource" >> $R/k$k.txt
done; done
for k in 1 2 4; do echo "== k $k"; bash hw/summ.sh $R/k$k.txt | cut -c1-200; grep -B1 "sharded *W2 *16" $R/k$k.txt | grep DIAG | awk '{for(i=1;i<=NF;i++) if($i=="upstream-alloc") {n+=$(i+1); split($(i+3),a,"u"); t+=$(i+1)*a[1]}} END {printf "upstream-alloc per call %.0f, %.0f us avg\n", n/NR, t/(n+1e-9)}'; done
