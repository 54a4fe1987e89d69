#!/bin/bash
# Ir, D1 misses (48 KiB 12-way) and mispredicts per op of the timed passes, by cachegrind:
# (counts with 3 timed passes - counts with 1) / (2 * ops). Usage: cgm2.sh BINARY...
for bin in "$@"; do for w in w1 w2 w3; do
  ops=$( [ $w = w1 ] && echo 100468 || ([ $w = w2 ] && echo 20068 || echo 1000000))
  cg() { valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes --cachegrind-out-file=/dev/null --D1=49152,12,64 --LL=2097152,16,64 $bin $w $1 2>&1 | grep -E "D1  misses|Mispredicts|I   refs" | awk '{gsub(",",""); if ($2=="Mispredicts:") printf "%s ", $3; else printf "%s ", $4}'; }
  a=($(cg 1)); b=($(cg 3))
  printf "%s %s Ir %.1f D1miss %.3f mispred %.3f\n" $(basename $bin) $w $(echo "(${b[0]}-${a[0]})/(2*$ops)" | bc -l) $(echo "(${b[1]}-${a[1]})/(2*$ops)" | bc -l) $(echo "(${b[2]}-${a[2]})/(2*$ops)" | bc -l)
done; done
