# Session 7, call 27: does the host slow one thread's pool when 8 or 16 run at once, as processes?
set -u
H=$(pwd)/target/hardware; R=$OUT
run() { $H/bin/host_floor | grep PoolResource | awk '{print $1, $(NF-1)}' | sort | awk '{a[$1]=a[$1]" "$2} END {for (k in a) print k, a[k]}'; }
echo "== alone"; run
for n in 8 16; do
  echo "== $n at once"
  for i in $(seq $n); do (run > /tmp/hf.$n.$i) & done; wait
  cat /tmp/hf.$n.* | sort
done
echo "== alone again"; run
