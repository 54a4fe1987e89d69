# Session 8, call 40: kernel call chains of W2 by 8 threads (own streams) at 1108477's diagnostic
# build: which syscall or fault the kernel lock spinning comes from.
set -u
R=$OUT; gunzip -c hw/emm-x.gz > /tmp/emm-x; chmod +x /tmp/emm-x
tar xzf hw/perfpack.tgz -C /tmp; P="env LD_LIBRARY_PATH=/tmp/perfpack/lib /tmp/perfpack/perf"
agg() { # per sample: the kernel entry (syscall or fault) and the leaf symbol
  $P script -i $1 -F comm,ip,sym 2>/dev/null | awk '
    /^[^ \t]/ { if (n) { k[entry " <- " leaf]++ } ; n=1; leaf=""; entry="user"; next }
    /^$/ { next }
    { s=$2; if (leaf=="") leaf=s; if (s ~ /^__x64_sys_|^__do_sys_|exc_page_fault|^asm_sysvec|^asm_exc/) entry=s }
    END { if (n) k[entry " <- " leaf]++; for (x in k) print k[x], x }' | sort -rn | head -40
}
EMM_DIAG=1 $P record -q -g -e cpu-clock -F 2000 -o /tmp/p1.data -- /tmp/emm-x bench --backend cuda --threads 8 --streams own --resource sharded --workload W2 --round-ops 400000 > $R/run1.txt 2>&1
agg /tmp/p1.data > $R/w2-8-entries.txt
EMM_DIAG=1 EMM_X_REBIAS=1000000000000 $P record -q -g -e cpu-clock -F 2000 -o /tmp/p2.data -- /tmp/emm-x bench --backend cuda --threads 8 --streams own --resource sharded --workload W2 --round-ops 400000 > $R/run2.txt 2>&1
agg /tmp/p2.data > $R/w2-8-norebias-entries.txt
EMM_DIAG=1 $P record -q -g -e cpu-clock -F 2000 -o /tmp/p3.data -- /tmp/emm-x bench --backend cuda --threads 16 --streams own --resource sharded --workload W1 --round-ops 200000 > $R/run3.txt 2>&1
agg /tmp/p3.data > $R/w1-16-entries.txt
for f in run1 run2 run3; do grep -E "sharded|DIAG" $R/$f.txt; done
head -25 $R/w2-8-entries.txt; echo; head -15 $R/w2-8-norebias-entries.txt; echo; head -12 $R/w1-16-entries.txt
