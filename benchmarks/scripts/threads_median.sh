#!/usr/bin/env bash
# Summarises rounds of `emm bench --threads ... --resource sharded` (its table lines, one per
# round and cell, concatenated into FILE): per workload, thread count and stream mode, the
# ops/s of every round in millions (sorted), their median, and the largest memory held.
# The speedups in benchmarks/data/threads.csv are the median at N threads over the median at 1.
# usage: bash benchmarks/scripts/threads_median.sh FILE
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 FILE (the emm bench lines of every round)" >&2; exit 2; }
awk '$1=="sharded" { k=$2" "$3" "$4; v[k]=v[k]" "$5/1e6; if ($6>h[k]) h[k]=$6 }
  END { for (k in v) print k" |"v[k]" | held "h[k] }' "$1" | sort | while IFS='|' read -r k vals held; do
  s=$(echo $vals | tr ' ' '\n' | sort -n | tr '\n' ' '); n=$(echo $vals | wc -w)
  med=$(echo $vals | tr ' ' '\n' | sort -n | awk -v n="$n" '{a[NR]=$1} END {if (n%2) print a[(n+1)/2]; else print (a[n/2]+a[n/2+1])/2}')
  echo "$k | median $med | $s |$held"
done
