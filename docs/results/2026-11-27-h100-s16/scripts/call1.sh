# Session 16, call 1: five CPU-only builds of the A/B driver interleaved, twenty rounds, VMM=1,
# median of 7 passes (`bash hw/ab/call.sh` with the binaries stripped into hw/ab/prof_$v).
set -u
R=$OUT
uptime > $R/host.txt 2>&1; nproc >> $R/host.txt; grep "model name" /proc/cpuinfo | head -1 >> $R/host.txt
V="base load4 sl6s1 combo sel"
for i in $(seq 1 20); do
  for v in $V; do
    for w in w1 w2 w3; do
      m=$(MONO=1 VMM=1 hw/ab/prof_$v $w 7 2>&1 | grep ns/op | awk '{print $1}' | sort -n | sed -n 4p)
      echo "$i $v $w $m"
    done
  done
done > $R/ab.txt 2>&1
for v in $V; do for w in w1 w2 w3; do
  echo "$v $w $(awk -v v=$v -v w=$w '$2==v && $3==w {print $4}' $R/ab.txt | sort -n | tr '\n' ' ')"
done; done | tee $R/ab-summary.txt
