# Session 21, call 9: the bundle of 87f2197 (`cargo xtask hardware --bundle-only`): smoke tests,
# conformance on the simulated GPU and this GPU for every plugin, the gate, and every
# resource's standard workloads (the driver-bound ones for the cost model); no peers.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
uptime > $R/host.txt 2>&1
PARTS=smoke,check,gate,bench \
  BENCH_RESOURCES=pool-vmm,pool,sharded,arena,binning,async,cuda,managed \
  RESULTS="$R/run" timeout 560 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -3 $R/run.log
sed -n '/Conformance: simulated/,/Peers in the same/p' $R/report.md | head -80
