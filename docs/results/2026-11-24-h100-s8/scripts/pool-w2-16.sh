# The W2 rows of every H200 round at the held budget 1.20 with the committed policy (calls 43 "new",
# 44/45/48 "X=base" of the diagnostic build, 47, 49 "b2c", 51, 52 "k1", 53 "new"), pooled; run from this folder.
# usage: bash scripts/pool-w2-16.sh
set -u
{
  awk '/^== round . new/{p=1;next} /^==/{p=0} p' c43-h200/budget.txt | grep "sharded *W2"
  awk '/^== X=base/{p=1;next} /^==/{p=0} p' c44-h200/w2-16-knobs.txt | grep sharded
  awk '/^== X=base/{p=1;next} /^==/{p=0} p' c45-h200/w2-16-ab.txt | grep sharded
  grep sharded c47-h200/rounds.txt
  grep sharded c48-h200/base.txt
  grep sharded c49-h200/w2-b2c.txt
  grep sharded c51-h200/why.txt
  grep sharded c52-h200/k1.txt
  grep sharded c53-h200/w2-new.txt
} > /tmp/w2-16-pooled.rows
bash scripts/summ.sh /tmp/w2-16-pooled.rows
