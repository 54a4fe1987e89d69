# Session 11, call 60 (H100): (1) the host: CPUs, NUMA, the GPU's CPU affinity; (2) s10 (session
# 10's code) against s11 (the live index chained through the records), CPU only, VMM=1, twelve
# rounds interleaved, median of 7 passes; (3) is the host's slow mode a CPU's? s11 pinned to each
# CPU in turn, three sweeps; (4) the bundle's bench, peers and rounds parts (pool-vmm).
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
{ lscpu; echo; numactl --hardware 2>&1; echo; nvidia-smi topo -m 2>&1; echo;
  for c in /sys/devices/system/cpu/cpu[0-9]*; do echo "$(basename $c) siblings $(cat $c/topology/thread_siblings_list) core $(cat $c/topology/core_id) pkg $(cat $c/topology/physical_package_id)"; done;
  uptime; } > $R/host.txt 2>&1
for i in $(seq 1 12); do
  for v in s10 s11; do
    for w in w1 w2 w3; do
      m=$(VMM=1 hw/ab/prof_$v $w 7 2>&1 | awk '{print $1}' | sort -n | sed -n 4p)
      echo "$i $v $w $m"
    done
  done
done > $R/ab.txt 2>&1
for v in s10 s11; do for w in w1 w2 w3; do
  echo "$v $w $(awk -v v=$v -v w=$w '$2==v && $3==w {print $4}' $R/ab.txt | sort -n | tr '\n' ' ')"
done; done | tee $R/ab-summary.txt
n=$(nproc)
for s in 1 2 3; do
  for c in $(seq 0 $((n-1))); do
    for w in w1 w3; do
      m=$(VMM=1 taskset -c $c hw/ab/prof_s11 $w 5 2>&1 | awk '{print $1}' | sort -n | sed -n 3p)
      echo "$s $c $w $m"
    done
  done
done > $R/pin.txt 2>&1
for c in $(seq 0 $((n-1))); do
  echo "cpu $c w1 $(awk -v c=$c '$2==c && $3=="w1" {print $4}' $R/pin.txt | tr '\n' ' ') w3 $(awk -v c=$c '$2==c && $3=="w3" {print $4}' $R/pin.txt | tr '\n' ' ')"
done | tee $R/pin-summary.txt
PARTS=bench,peers,rounds BENCH_RESOURCES=pool-vmm,pool ANCHOR_BUDGET_S=150 \
  ROUNDS_RESOURCES=pool-vmm RESULTS="$R/run" timeout 400 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -3 $R/run.log
sed -n '/Standard workloads/,/cost model/p' $R/report.md | head -9
sed -n '/Many processes/,$p' $R/report.md | head -16
