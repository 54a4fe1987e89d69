//! Pools in a process that limits its address space (`ulimit -v`, `RLIMIT_AS`): each heap's
//! block records once took 4 GiB of address space up front, so under a 4 GiB limit the first
//! allocation aborted the process, and sixteen shards aborted under 16 GiB. Each case runs in
//! a child process (this test binary again) under the limit and must exit cleanly.

use std::process::Command;
use std::sync::Arc;

use emm_core::mr::{CudaResource, DeviceMemoryResource, PoolResource, ShardedPoolResource};
use emm_core::{Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB, MIB};

/// Set in the child: which case to run.
const CHILD_ENV: &str = "EMM_TEST_ADDRESS_LIMIT_CHILD";

/// Runs the test `case` of this binary in a child under an address-space limit of
/// `limit_gib` GiB; fails with its output unless it passes.
fn run_limited(case: &str, limit_gib: u64) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {} && exec \"$0\" --exact {case} --test-threads 1 --nocapture",
            limit_gib << 20
        ))
        .arg(exe)
        .env(CHILD_ENV, case)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "{case} under a {limit_gib} GiB address-space limit: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("{case} ... ok")),
        "the child did not run {case}:\n{stdout}"
    );
}

/// Whether this process is the child running `case`.
fn is_child(case: &str) -> bool {
    std::env::var(CHILD_ENV).is_ok_and(|c| c == case)
}

fn gpu() -> Arc<SimDriver> {
    Arc::new(SimDriver::new(SimConfig::new(3).memory_per_device(8 * GIB)).expect("config"))
}

/// Allocates and frees blocks of a few sizes through `mr`, and many small ones at once.
fn exercise(mr: &dyn DeviceMemoryResource) {
    let mut live = Vec::new();
    for k in 0..4_000usize {
        let bytes = 256 + (k % 97) * 512;
        live.push((
            mr.allocate(bytes, StreamId::DEFAULT).expect("allocate"),
            bytes,
        ));
    }
    let big = mr
        .allocate(64 * MIB as usize, StreamId::DEFAULT)
        .expect("big");
    mr.deallocate(big, 64 * MIB as usize, StreamId::DEFAULT)
        .expect("free big");
    for (p, bytes) in live {
        mr.deallocate(p, bytes, StreamId::DEFAULT).expect("free");
    }
}

#[test]
fn many_pools_work_under_a_4_gib_address_space_limit() {
    const CASE: &str = "many_pools_work_under_a_4_gib_address_space_limit";
    if !is_child(CASE) {
        return run_limited(CASE, 4);
    }
    let g = gpu();
    // Each pool's heap is made on first use; none may take 4 GiB of address space.
    let pools: Vec<_> = (0..16)
        .map(|_| PoolResource::new(CudaResource::<SimDriver>::new(Arc::clone(&g))))
        .collect();
    for pool in &pools {
        exercise(pool);
    }
    drop(pools);
    g.context_synchronize().expect("sync");
}

#[test]
fn sixteen_shards_work_under_a_16_gib_address_space_limit() {
    const CASE: &str = "sixteen_shards_work_under_a_16_gib_address_space_limit";
    if !is_child(CASE) {
        return run_limited(CASE, 16);
    }
    let g = gpu();
    let ctx = g.current_context().expect("context");
    let sharded = ShardedPoolResource::over(
        PoolResource::new(CudaResource::<SimDriver>::new(Arc::clone(&g))),
        16,
    );
    std::thread::scope(|s| {
        for _ in 0..16 {
            s.spawn(|| {
                g.set_current_context(ctx).expect("set context");
                exercise(&sharded);
            });
        }
    });
    drop(sharded);
    g.context_synchronize().expect("sync");
}
