# Session 9, call 56 (H100): does the per-process mode follow address-space layout? v2 over the
# simulated GPU, W1 and W3, 12 processes each with ASLR (default) and without (setarch -R).
set -u
R=$OUT
for i in $(seq 12); do
  for t in aslr noaslr; do
    for w in w1 w3; do
      if [ $t = aslr ]; then m=$(hw/ab/prof_v2 $w 7 2>&1 | awk '{print $1}' | sort -n | sed -n 4p)
      else m=$(setarch "$(uname -m)" -R hw/ab/prof_v2 $w 7 2>&1 | awk '{print $1}' | sort -n | sed -n 4p); fi
      echo "$i $t $w $m"
    done
  done
done > $R/aslr-ab.txt 2>&1
for t in aslr noaslr; do for w in w1 w3; do
  echo "$t $w $(awk -v t=$t -v w=$w '$2==t && $3==w {print $4}' $R/aslr-ab.txt | sort -n | tr '\n' ' ')"
done; done
