# Session 19, call 3: the bundle of 903fcf2 (`cargo xtask hardware --bundle-only`): smoke tests,
# conformance on the simulated GPU and this GPU for every plugin, the gate, every resource's
# standard workloads (the driver-bound ones for the cost model), the peers and twelve rounds.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
uptime > $R/host.txt 2>&1
PARTS=smoke,check,gate,bench,peers,rounds \
  BENCH_RESOURCES=pool-vmm,pool,sharded,arena,binning,async,cuda,managed \
  ANCHOR_BUDGET_S=120 ROUNDS=12 ROUNDS_RESOURCES=pool-vmm RESULTS="$R/run" \
  timeout 570 bash $H/run.sh > "$R/run.log" 2>&1
echo "run.sh exit $?"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
tar czf "$R/run.tgz" -C "$R" run && rm -rf "$R/run"
tail -3 $R/run.log
sed -n '/Conformance: simulated/,/Peers in the same/p' $R/report.md | head -60
sed -n '/Many processes/,$p' $R/report.md | head -16
