# Session 8, call 50 (H200): one thread of W2 and of W1 (sharded, own stream) pinned to each core in
# turn, twice: whether the bimodal one-thread figures follow the core.
set -u
R=$OUT; gunzip -c hw/emm-new.gz > /tmp/emm; chmod +x /tmp/emm
for pass in 1 2; do for c in $(seq 0 15); do
  w2=$(taskset -c $c timeout 30 /tmp/emm bench --backend cuda --threads 1 --streams own --resource sharded --workload W2 --round-ops 200000 2>&1 | awk '$1=="sharded"{printf "%.1f", $5/1e6}')
  w1=$(taskset -c $c timeout 30 /tmp/emm bench --backend cuda --threads 1 --streams own --resource sharded --workload W1 --round-ops 200000 2>&1 | awk '$1=="sharded"{printf "%.1f", $5/1e6}')
  echo "pass $pass cpu $c W2 $w2 W1 $w1"
done; done | tee $R/pinned.txt
