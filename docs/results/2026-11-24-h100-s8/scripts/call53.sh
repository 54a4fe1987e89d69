# Session 8, call 53 (H200): a thief giving the victim's lock bias back as it unlocks (hb, uncommitted
# tree of b2c7fca + SpinGuard::hand_bias_back) against b2c7fca, interleaved: W2 by 1 and 16
# threads ten rounds; W1 by 1 and 16 four rounds.
set -u
R=$OUT
for b in hb new; do gunzip -c hw/emm-$b.gz > /tmp/emm-$b; chmod +x /tmp/emm-$b; done
for i in 1 2 3 4 5 6 7 8 9 10; do for b in hb new; do
  timeout 60 /tmp/emm-$b bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W2 --round-ops 200000 2>&1 | grep -v "^resource" >> $R/w2-$b.txt
done; done
for i in 1 2 3 4; do for b in hb new; do
  timeout 60 /tmp/emm-$b bench --backend cuda --threads 1,16 --streams own,shared --resource sharded --workload W1 --round-ops 200000 2>&1 | grep -v "^resource" >> $R/w1-$b.txt
done; done
for f in w2-hb w2-new w1-hb w1-new; do echo "== $f"; bash hw/summ.sh $R/$f.txt | cut -c1-150; done
