# Session 8, call 45 (H200): the diagnostic build of b2c7fca; rebias threshold 1024 and steal
# divisor 4 against the committed 4096 and 8, alone and together, eight rounds interleaved: W2 by 1
# and 16 threads. The host's CPU layout first.
set -u
R=$OUT; gunzip -c hw/emm-x.gz > /tmp/emm-x; chmod +x /tmp/emm-x
(lscpu; numactl -H 2>&1 | head -5) > $R/cpu.txt 2>&1
run() { echo "== $*"; env "$@" timeout 100 /tmp/emm-x bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"; }
for i in 1 2 3 4 5 6 7 8; do
  run X=base
  run EMM_X_REBIAS=1024
  run EMM_X_STEALDIV=4
  run EMM_X_REBIAS=1024 EMM_X_STEALDIV=4
done > $R/w2-16-ab.txt 2>&1
grep -E "Model name|Thread|Core|Socket|NUMA" $R/cpu.txt
for v in X=base "EMM_X_REBIAS=1024" "EMM_X_STEALDIV=4" "EMM_X_REBIAS=1024 EMM_X_STEALDIV=4"; do
  for t in "1     own" "16     own" "1  shared" "16  shared"; do
    echo "$v | $t | $(grep -A4 "^== $v\$" $R/w2-16-ab.txt | grep "W2 *$t" | awk '{print $5/1e6}' | sort -n | tr '\n' ' ')"
  done
done
