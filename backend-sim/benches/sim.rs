//! Simulated allocation throughput: one `cuMemAlloc` + `cuMemFree` pair per iteration, with
//! and without contents tracking, and the standard workload W3 replayed through the driver.
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
