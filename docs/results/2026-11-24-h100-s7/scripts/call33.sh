# Session 7, call 33 (H200, 139 GB): W2 by 1, 8 and 16 threads, which the H100's 80 GB cannot hold by 16.
set -u
E=$(pwd)/target/hardware/bin/emm; R=$OUT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc
for i in 1 2; do echo "== round $i"
  timeout 120 $E bench --backend cuda --threads 1,8,16 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
done | tee $R/w2-16.txt
