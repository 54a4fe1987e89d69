#!/bin/bash
# Ir per op of the timed passes by callgrind-less cachegrind (no cache sim): (3 passes - 1)/(2 ops)
for bin in "$@"; do for w in w1 w2 w3; do
  ops=$( [ $w = w1 ] && echo 100468 || ([ $w = w2 ] && echo 20068 || echo 1000000))
  cg() { VMM=1 valgrind --tool=cachegrind --cache-sim=no --branch-sim=yes --cachegrind-out-file=/dev/null $bin $w $1 2>&1 | grep -E "Mispredicts|I   refs" | awk '{gsub(",",""); if ($2=="Mispredicts:") printf "%s ", $3; else printf "%s ", $4}'; }
  a=($(cg 1)); b=($(cg 3))
  printf "%s %s Ir %.1f mispred %.3f\n" $(basename $bin) $w $(echo "(${b[0]}-${a[0]})/(2*$ops)" | bc -l) $(echo "(${b[1]}-${a[1]})/(2*$ops)" | bc -l)
done; done
