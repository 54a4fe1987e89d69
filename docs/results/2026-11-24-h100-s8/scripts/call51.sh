# Session 8, call 51 (H200): a diagnostic build of b2c7fca counting why the shared pool grows
# (its free memory before each growth against the chunk, chunks trimmed, growths beyond the budget):
# W2 by 1 and 16 threads, own and shared streams, four rounds.
set -u
R=$OUT; gunzip -c hw/emm-x.gz > /tmp/emm-x; chmod +x /tmp/emm-x
for i in 1 2 3 4; do
  EMM_DIAG=1 timeout 100 /tmp/emm-x bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
done > $R/why.txt 2>&1
grep -B1 "sharded *W2 *16" $R/why.txt | cut -c17-600
