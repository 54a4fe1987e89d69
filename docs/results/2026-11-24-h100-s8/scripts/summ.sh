# Prints, per workload / threads / stream, the sorted ops/s (millions) of every round and the median, and the largest held.
# usage: bash hw/summ.sh FILE
awk '$1=="sharded" { k=$2" "$3" "$4; v[k]=v[k]" "$5/1e6; if ($6>h[k]) h[k]=$6 }
  END { for (k in v) print k" |"v[k]" | held "h[k] }' "$1" | sort | while IFS='|' read k vals held; do
  s=$(echo $vals | tr ' ' '\n' | sort -n | tr '\n' ' '); n=$(echo $vals | wc -w)
  med=$(echo $vals | tr ' ' '\n' | sort -n | awk -v n=$n '{a[NR]=$1} END {if (n%2) print a[(n+1)/2]; else print (a[n/2]+a[n/2+1])/2}')
  echo "$k | median $med | $s |$held"
done
