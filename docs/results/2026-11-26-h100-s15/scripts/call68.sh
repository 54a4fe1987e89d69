# Session 15, call 68 (H100): is the slow mode a transient at a process's start? Per-pass times
# of twelve processes each of W1 (60 passes, ~3 ms each) and W3 (12 passes, ~30 ms each), s15, VMM=1.
set -u
R=$OUT
for i in $(seq 1 12); do
  echo "W1 $i $(MONO=1 VMM=1 hw/ab/prof_s15 w1 60 2>&1 | awk '{printf "%s ", $1}')"
  echo "W3 $i $(MONO=1 VMM=1 hw/ab/prof_s15 w3 12 2>&1 | awk '{printf "%s ", $1}')"
done > $R/passes.txt 2>&1
# The same with a 300 ms busy loop first, in-process (a shell spin before exec stays on the same CPU only by chance).
for i in $(seq 1 12); do
  echo "W1spin $i $(taskset -c $((i % 16)) bash -c 'end=$((SECONDS+1)); while [ $SECONDS -lt $end ]; do :; done; MONO=1 VMM=1 exec hw/ab/prof_s15 w1 60' 2>&1 | awk '{printf "%s ", $1}')"
done >> $R/passes.txt 2>&1
cat $R/passes.txt | cut -c1-400
