# Session 8, call 41: kernel entries of the timed rounds only (perf enabled by the diagnostic
# build around them; no held round): W2 by 8 threads, W1 by 16, own streams.
set -u
R=$OUT; gunzip -c hw/emm-x.gz > /tmp/emm-x; chmod +x /tmp/emm-x
tar xzf hw/perfpack.tgz -C /tmp; P="env LD_LIBRARY_PATH=/tmp/perfpack/lib /tmp/perfpack/perf"
agg() {
  $P script -i $1 -F comm,ip,sym 2>/dev/null | awk '
    /^[^ \t]/ { if (n) { k[entry " <- " leaf]++; e[entry]++ } ; n=1; leaf=""; entry="user"; next }
    /^$/ { next }
    { s=$2; if (leaf=="") leaf=s; if (s ~ /^__x64_sys_|^__do_sys_|exc_page_fault|^asm_sysvec|^asm_exc/) entry=s }
    END { if (n) { k[entry " <- " leaf]++; e[entry]++ }; for (x in e) print e[x], "ENTRY", x; for (x in k) print k[x], x }' | sort -rn | head -30
}
rec() { out=$1; shift; rm -f /tmp/ctl; mkfifo /tmp/ctl
  env EMM_DIAG=1 EMM_X_NOHELD=1 EMM_X_PERFCTL=/tmp/ctl "$@" $P record -q -g -e cpu-clock -F 2000 -D -1 --control fifo:/tmp/ctl -o /tmp/$out.data -- /tmp/emm-x bench --backend cuda $ARGS > $R/$out.txt 2>&1
  agg /tmp/$out.data > $R/$out-entries.txt; }
ARGS="--threads 8 --streams own --resource sharded --workload W2 --round-ops 400000"; rec w2-8
ARGS="--threads 16 --streams own --resource sharded --workload W1 --round-ops 200000"; rec w1-16
ARGS="--threads 1 --streams own --resource sharded --workload W2 --round-ops 400000"; rec w2-1
for f in w2-8 w1-16 w2-1; do echo "== $f"; grep -E "sharded|DIAG" $R/$f.txt; head -16 $R/$f-entries.txt; done
