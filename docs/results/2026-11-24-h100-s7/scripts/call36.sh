# Session 7, call 36: a diagnostic build of e12172b; the shared pool trimming before it grows (default) or not (EMM_X_NOTRIM=1), alternated.
set -u
R=$OUT; gunzip -c hw/emm-x.gz > /tmp/emm-x; chmod +x /tmp/emm-x
for i in 1 2 3; do for v in "" 1; do
  echo "== round $i notrim=$v"
  env EMM_DIAG=1 ${v:+EMM_X_NOTRIM=1} timeout 50 /tmp/emm-x bench --backend cuda --threads 1,8 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource"
done; done > $R/notrim.txt 2>&1
for v in "" 1; do echo "== W1 W3 notrim=$v"
  env EMM_DIAG=1 ${v:+EMM_X_NOTRIM=1} timeout 60 /tmp/emm-x bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1,W3 --round-ops 200000 2>&1 | grep -v "^resource"
done >> $R/notrim.txt 2>&1
grep -E "^==|sharded .* (8|16) " $R/notrim.txt
