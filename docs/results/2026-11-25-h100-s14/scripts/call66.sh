# Session 14, call 66 (H100): three CPU-only builds interleaved, twelve rounds, VMM=1, median of
# 7 passes: s13 (dd9c970: the live index doubles at half full), l8 (an eighth, main) and l4 (a
# quarter).
set -u
R=$OUT
uptime > $R/host.txt 2>&1
for i in $(seq 1 12); do
  for v in s13 l8 l4; do
    for w in w1 w2 w3; do
      m=$(VMM=1 hw/ab/prof_$v $w 7 2>&1 | awk '{print $1}' | sort -n | sed -n 4p)
      echo "$i $v $w $m"
    done
  done
done > $R/ab.txt 2>&1
for v in s13 l8 l4; do for w in w1 w2 w3; do
  echo "$v $w $(awk -v v=$v -v w=$w '$2==v && $3==w {print $4}' $R/ab.txt | sort -n | tr '\n' ' ')"
done; done | tee $R/ab-summary.txt
