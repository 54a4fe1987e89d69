# Session 8, call 47 (H200): b2c7fca (held budget 1.20) as committed: W2 by 1 and 16 threads, own and
# shared streams, eight rounds (W2 by 16 threads needs more than the H100's 80 GB).
set -u
R=$OUT; gunzip -c hw/emm-new.gz > /tmp/emm; chmod +x /tmp/emm
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt
for i in 1 2 3 4 5 6 7 8; do
  echo "== round $i"
  timeout 60 /tmp/emm bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
done > $R/rounds.txt 2>&1
cat $R/gpu.txt; bash hw/summ.sh $R/rounds.txt | tee $R/summary.txt
