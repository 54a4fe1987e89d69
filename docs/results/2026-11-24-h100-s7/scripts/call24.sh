# Session 7, call 24: W2 by 8 threads, old main (6314be4) against HEAD da3da48 + diag switches.
set -u
R=$OUT; mkdir -p /tmp/b; for f in hw/bin/*.gz; do gunzip -c $f > /tmp/b/$(basename $f .gz); chmod +x /tmp/b/*; done
W="--backend cuda --threads 1,8 --streams own,shared --resource sharded --workload W2 --round-ops 200000"
for i in 1 2; do
  echo "== round $i old"; timeout 60 /tmp/b/emm-old bench $W 2>&1 | grep -v "^resource"
  for v in "0 1" "1 1" "0 0" "0 2"; do set -- $v
    echo "== round $i eager=$1 fallback=$2"
    EMM_DIAG=1 EMM_X_EAGER=$1 EMM_X_FALLBACK=$2 timeout 60 /tmp/b/emm-x bench $W 2>&1 | grep -v "^resource"
  done
done > $R/w2-variants.txt
cat $R/w2-variants.txt
