//! Simulated allocation throughput: one `cuMemAlloc` + `cuMemFree` pair per iteration, with
//! and without contents tracking, the standard workload W3 replayed through the driver, and
//! one granule of virtual memory mapped and unmapped (five calls).
//!
//! Run with `cargo bench -p emm-sim`; ops/s = 2e9 / (ns per pair).

use emm_core::workloads;
use emm_core::Driver;
use emm_sim::{SimConfig, SimDriver, GIB};

fn main() {
    divan::main();
}

fn gpu(contents: bool) -> SimDriver {
    SimDriver::new(
        SimConfig::new(1)
            .memory_per_device(80 * GIB)
            .track_contents(contents)
            .record_trace(false),
    )
    .expect("valid config")
}

/// One alloc + free pair of 4 KiB, with 1 000 other allocations live.
#[divan::bench(args = [false, true])]
fn alloc_free_pair(bencher: divan::Bencher, contents: bool) {
    let g = gpu(contents);
    let keep: Vec<_> = (0..1000)
        .map(|_| g.mem_alloc(4096).expect("fits"))
        .collect();
    bencher.bench_local(|| {
        let p = g.mem_alloc(divan::black_box(4096)).expect("fits");
        g.mem_free(p).expect("live");
    });
    drop(keep);
}

/// W3 (1 000 000 ops, sizes 8 B to 64 KiB) replayed as cuMemAlloc / cuMemFree.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn w3_replay(bencher: divan::Bencher) {
    let w = workloads::w3();
    bencher.bench_local(|| {
        let g = gpu(false);
        workloads::replay(
            &w,
            |size| g.mem_alloc(size as usize),
            |p, _| g.mem_free(p).expect("live"),
        )
        .expect("fits");
    });
}

/// One granule grown and given back: `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`,
/// `cuMemUnmap`, `cuMemRelease` in a reservation with 1 000 other granules mapped.
#[divan::bench]
fn vmm_granule_cycle(bencher: divan::Bencher) {
    use emm_core::{DeviceId, DevicePtr};
    let g = gpu(false);
    let granule = g.mem_get_allocation_granularity(DeviceId(0)).expect("vmm");
    let base = g.mem_address_reserve(1024 * granule, 0).expect("reserve");
    let at = |i: usize| DevicePtr(base.0 + (i * granule) as u64);
    let keep: Vec<_> = (0..1000)
        .map(|i| {
            let h = g.mem_create(granule, DeviceId(0)).expect("fits");
            g.mem_map(at(i), granule, h).expect("map");
            h
        })
        .collect();
    bencher.bench_local(|| {
        let h = g.mem_create(granule, DeviceId(0)).expect("fits");
        g.mem_map(at(1000), granule, h).expect("map");
        g.mem_set_access(at(1000), granule, DeviceId(0))
            .expect("access");
        g.mem_unmap(at(1000), granule).expect("unmap");
        g.mem_release(h).expect("release");
    });
    for (i, h) in keep.into_iter().enumerate() {
        g.mem_unmap(at(i), granule).expect("unmap");
        g.mem_release(h).expect("release");
    }
}
