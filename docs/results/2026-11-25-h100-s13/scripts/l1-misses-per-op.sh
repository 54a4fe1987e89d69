#!/bin/bash
bin=${1:-/work/main/target/release/examples/prof_w3}
for w in ${WS:-w1 w3}; do
  ops=$( [ $w = w1 ] && echo 100468 || ([ $w = w2 ] && echo 20068 || echo 1000000))
  cg() { VMM=1 valgrind --tool=cachegrind --cache-sim=yes --D1=49152,12,64 --LL=2097152,16,64 --cachegrind-out-file=/dev/null $bin $w $1 2>&1 | grep -E "D +refs|D1 +misses|I +refs" | awk '{gsub(",",""); print $4}' | tr '\n' ' '; }
  a=($(cg 1)); b=($(cg 3))
  echo "$w ${a[*]} | ${b[*]}" | awk -v ops=$ops '{printf "%s Ir %.1f Dref %.1f D1miss %.3f\n", $1, ($6-$2)/(2*ops), ($7-$3)/(2*ops), ($8-$4)/(2*ops)}'
done
