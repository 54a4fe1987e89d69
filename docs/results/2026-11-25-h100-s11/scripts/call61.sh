# Session 11, call 61 (H100): what makes a process slow? s11's prof_w3 (VMM=1) interleaved in
# four ways, sixteen rounds: plain; glibc's malloc on transparent huge pages
# (GLIBC_TUNABLES=glibc.malloc.hugetlb=1); address-space randomization off (setarch -R); both.
set -u
R=$OUT
{ for f in enabled defrag shmem_enabled; do echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f 2>&1)"; done
  grep -i huge /proc/meminfo; uname -a; cat /proc/cmdline; which perf setarch; } > $R/host.txt 2>&1
run() { "$@" 2>&1 | awk '{print $1}' | sort -n | sed -n 3p; }
for i in $(seq 1 16); do
  for w in w1 w3; do
    echo "$i plain $w $(VMM=1 run hw/ab/prof_s11 $w 5)"
    echo "$i thp $w $(GLIBC_TUNABLES=glibc.malloc.hugetlb=1 VMM=1 run hw/ab/prof_s11 $w 5)"
    echo "$i norand $w $(VMM=1 run setarch -R hw/ab/prof_s11 $w 5)"
    echo "$i both $w $(GLIBC_TUNABLES=glibc.malloc.hugetlb=1 VMM=1 run setarch -R hw/ab/prof_s11 $w 5)"
  done
done > $R/modes.txt
for v in plain thp norand both; do for w in w1 w3; do
  echo "$v $w $(awk -v v=$v -v w=$w '$2==v && $3==w {print $4}' $R/modes.txt | sort -n | tr '\n' ' ')"
done; done | tee $R/modes-summary.txt
cat $R/host.txt | head -8
