# Session 7, call 25: does pinning to one core steady the one-thread figures?
set -u
H=$(pwd)/target/hardware; R=$OUT
nproc; cat /proc/cpuinfo | grep "model name" | head -1; cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null
for i in 1 2 3; do
  echo "== free $i"; $H/bin/host_floor | grep -v harness | awk '{print $NF}' | tr '\n' ' '; echo
  echo "== pinned $i"; taskset -c 3 $H/bin/host_floor | grep -v harness | awk '{print $NF}' | tr '\n' ' '; echo
done
for i in 1 2 3; do
  echo "== bench free $i"; timeout 60 $H/bin/emm bench --backend cuda --resource pool-vmm,pool,sharded --passes 5 | grep -v resource
  echo "== bench pinned $i"; timeout 60 taskset -c 3 $H/bin/emm bench --backend cuda --resource pool-vmm,pool,sharded --passes 5 | grep -v resource
done
