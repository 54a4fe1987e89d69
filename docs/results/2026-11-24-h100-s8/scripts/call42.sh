# Session 8, call 42 (H200): W2 by 1 and 16 threads at the diagnostic build of 1108477, held
# budget 1.15 (as committed), 1.18 and 1.20, alternated, two rounds.
set -u
R=$OUT; gunzip -c hw/emm-x.gz > /tmp/emm-x; chmod +x /tmp/emm-x
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv > $R/gpu.txt
for i in 1 2; do for b in 1.15 1.18 1.20; do
  echo "== round $i budget $b"
  env EMM_DIAG=1 EMM_X_BUDGET=$b timeout 120 /tmp/emm-x bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
done; done > $R/w2-16.txt 2>&1
cat $R/gpu.txt; grep -E "^==|sharded" $R/w2-16.txt
