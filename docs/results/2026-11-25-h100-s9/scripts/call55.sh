# Session 9, call 55 (H100): is the one-thread bimodality the host's pages? v2 over the simulated
# GPU, W1 and W3, 12 processes each: glibc defaults, then malloc on transparent huge pages.
set -u
R=$OUT
{ cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag; grep -i huge /proc/meminfo; } > $R/thp.txt 2>&1
for i in $(seq 12); do
  for t in none hugetlb1; do
    for w in w1 w3; do
      if [ $t = none ]; then m=$(hw/ab/prof_v2 $w 7 2>&1 | awk '{print $1}' | sort -n | sed -n 4p)
      else m=$(GLIBC_TUNABLES=glibc.malloc.hugetlb=1 hw/ab/prof_v2 $w 7 2>&1 | awk '{print $1}' | sort -n | sed -n 4p); fi
      echo "$i $t $w $m"
    done
  done
done > $R/thp-ab.txt 2>&1
cat $R/thp.txt
for t in none hugetlb1; do for w in w1 w3; do
  echo "$t $w $(awk -v t=$t -v w=$w '$2==t && $3==w {print $4}' $R/thp-ab.txt | sort -n | tr '\n' ' ')"
done; done
