# Session 8, call 48 (H200): a diagnostic build of b2c7fca: thieves taking from shards whose lock
# bias is revoked first (EMM_X_PREFER_REVOKED=1) against the richest first, ten rounds interleaved:
# W2 by 1 and 16 threads; with the diagnostic counters.
set -u
R=$OUT; gunzip -c hw/emm-x.gz > /tmp/emm-x; chmod +x /tmp/emm-x
run() { echo "== $*"; env EMM_DIAG=1 "$@" timeout 100 /tmp/emm-x bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"; }
for i in 1 2 3 4 5 6 7 8 9 10; do
  run X=base > $R/base.$i.txt 2>&1
  run EMM_X_PREFER_REVOKED=1 > $R/pref.$i.txt 2>&1
done
cat $R/base.*.txt > $R/base.txt; cat $R/pref.*.txt > $R/pref.txt; rm $R/base.*.txt $R/pref.*.txt
for v in base pref; do echo "== $v"; bash hw/summ.sh $R/$v.txt; grep -B1 "sharded *W2 *16" $R/$v.txt | grep DIAG | awk '{print $5, $7, $(NF-9), $(NF-8), $(NF-5), $(NF-3), $(NF-1), $NF}' | head -4; done
