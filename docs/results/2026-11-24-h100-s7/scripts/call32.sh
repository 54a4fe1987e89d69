# Session 7, call 32: the report's charts at the final code d81e2a8, beside call 31's peers (one
# thread) and call 3's peers by many threads.
set -u
R=$OUT; ROOT=$(pwd); H=$ROOT/target/hardware
PARTS=report REPORT_RESOURCES=pool-vmm,sharded,binning REPORT_THREADS_RESOURCES=sharded THREADS=1,2,4,8,16 \
  ROUND_OPS=100000 REPORT_PASSES=1 PEERS_RAW=$ROOT/hw/peers31/run/peers/results.raw,$ROOT/docs/results/2026-11-24-h100/call3/threads-peers.raw \
  RESULTS="$R/run" timeout 500 bash $H/run.sh > "$R/run.log" 2>&1
echo "exit $?"; tail -5 $R/run.log; tar czf $R/report.tgz -C $R/run report report.md report.log && rm -rf $R/run; ls -la $R
