//! Pools in a process that limits its address space (`ulimit -v`, `RLIMIT_AS`): each heap's
//! block records once took 4 GiB of address space up front, so under a 4 GiB limit the first
//! allocation aborted the process, and sixteen shards aborted under 16 GiB. Each case runs in
//! a child process (this test binary again) under the limit and must exit cleanly.
//!
//! A heap whose block records cannot grow any more (the limit reached) refuses the allocation
//! with an out-of-memory error instead of aborting the process, and stays usable.

use std::process::Command;
use std::sync::Arc;

use emm_core::mr::{
    ArenaResource, CudaResource, DeviceMemoryResource, MrError, PoolResource, ShardedPoolResource,
};
use emm_core::{DevicePtr, Driver, StreamId};
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

/// Bytes of address space the process maps now (`VmSize`).
fn mapped_now() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmSize in /proc/self/status");
    kib << 10
}

/// Limits the process's address space to what it maps now and `more` bytes.
fn limit_address_space(more: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    #[allow(unsafe_code, reason = "getrlimit and setrlimit have no std wrapper")]
    // SAFETY: `r` is a valid `rlimit` to read and write.
    let rc = unsafe {
        if libc::getrlimit(libc::RLIMIT_AS, &mut r) == 0 {
            // Below the hard limit, which the parent's `ulimit -v` set.
            r.rlim_cur = (mapped_now() + more).min(r.rlim_max);
            libc::setrlimit(libc::RLIMIT_AS, &r)
        } else {
            -1
        }
    };
    assert_eq!(rc, 0, "getrlimit / setrlimit");
}

/// Allocates 256-byte blocks through `mr` until it refuses one; each refusal must be an
/// out-of-memory error of the host, never an abort. Then the blocks are freed and taken
/// again (their records are reused), and freed for good: `mr` stays usable throughout.
fn fill_until_the_host_refuses(mr: &dyn DeviceMemoryResource, live: &mut Vec<DevicePtr>) {
    let s = StreamId::DEFAULT;
    let refusal = loop {
        assert!(
            live.len() < live.capacity(),
            "no refusal in {} blocks",
            live.len()
        );
        match mr.allocate(256, s) {
            Ok(p) => live.push(p),
            Err(e) => break e,
        }
    };
    assert!(refusal.is_out_of_memory(), "{refusal}");
    assert!(
        matches!(refusal, MrError::HostOutOfMemory { requested: 256, .. }),
        "{refusal:?}"
    );
    let text = refusal.to_string();
    assert!(
        text.contains("out of host memory") && text.contains("block records"),
        "{text}"
    );
    eprintln!("{} blocks, then: {text}", live.len());
    // Every block handed out is still live and freed once; half of them are taken again.
    let n = live.len();
    for p in live.drain(n / 2..) {
        mr.deallocate(p, 256, s).expect("free");
    }
    for _ in 0..n - n / 2 {
        live.push(mr.allocate(256, s).expect("a record freed is reused"));
    }
    for p in live.drain(..) {
        mr.deallocate(p, 256, s).expect("free");
    }
    let big = mr.allocate(MIB as usize, s).expect("usable after");
    mr.deallocate(big, MIB as usize, s).expect("free");
}

#[test]
fn a_heap_whose_records_cannot_grow_refuses_the_allocation_and_stays_usable() {
    const CASE: &str = "a_heap_whose_records_cannot_grow_refuses_the_allocation_and_stays_usable";
    if !is_child(CASE) {
        // The child sets a tighter limit of its own once its heaps exist.
        return run_limited(CASE, 64);
    }
    let g = Arc::new(
        SimDriver::new(
            SimConfig::new(3)
                .memory_per_device(64 * GIB)
                .track_races(false)
                .record_trace(false),
        )
        .expect("config"),
    );
    let up = || CudaResource::<SimDriver>::new(Arc::clone(&g));
    let pool = PoolResource::new(up());
    let arena = ArenaResource::new(up());
    let sharded = ShardedPoolResource::over(PoolResource::new(up()), 1);
    let resources: [&dyn DeviceMemoryResource; 3] = [&pool, &arena, &sharded];
    let mut live = Vec::with_capacity(4 << 20);
    for mr in resources {
        // Each heap made and its first chunk taken before the limit.
        let p = mr.allocate(256, StreamId::DEFAULT).expect("allocate");
        mr.deallocate(p, 256, StreamId::DEFAULT).expect("free");
    }
    // Room for a few mebibytes of records, not for the millions of blocks asked for.
    limit_address_space(8 * MIB);
    for mr in resources {
        fill_until_the_host_refuses(mr, &mut live);
        limit_address_space(8 * MIB);
    }
    pool.check().expect("the pool's invariants");
    drop((pool, arena, sharded));
    g.context_synchronize().expect("sync");
}
