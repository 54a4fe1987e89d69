//! Every resource on the standard workloads W1, W2, W3 (`emm_core::workloads`), RMM's
//! `random_allocations` grid and the holes test, on the simulated GPU with contents tracking
//! and trace recording off.
//!
//! Run with `cargo bench -p emm-bench --bench resources`. Before divan's timings, `main` prints
//! one JSON line per (resource, workload) from the shared harness (`emm_bench::harness`: the
//! peers' protocol, warm-up plus median of three passes, with memory held at peak over peak
//! live bytes) and the holes test, and writes them to `target/emm-bench/resources.jsonl`
//! (`EMM_BENCH_RESULTS` overrides the path). `EMM_BENCH_SUMMARY=0` skips that part;
//! `EMM_BENCH_ONLY=pool,arena` limits it to the resources named.

use std::io::Write;
use std::sync::Arc;

use divan::counter::ItemsCount;
use divan::Bencher;
use emm_bench::harness::{self as bench, BenchConfig, BenchResult};
use emm_core::mr::{
    ArenaResource, AsyncResource, Backing, BinningResource, CudaResource, DeviceMemoryResource,
    FixedSizeResource, ManagedResource, MrResult, PoolOptions, PoolResource,
};
use emm_core::workloads::{self, Workload};
use emm_core::StreamId;
use emm_sim::{SimConfig, SimDriver, GIB, MIB};

fn main() {
    if std::env::var("EMM_BENCH_SUMMARY").as_deref() != Ok("0") {
        summary();
    }
    divan::main();
}

fn gpu() -> Arc<SimDriver> {
    Arc::new(
        SimDriver::new(
            SimConfig::new(1)
                .memory_per_device(80 * GIB)
                .track_contents(false)
                .record_trace(false),
        )
        .expect("valid config"),
    )
}

/// The resources benchmarked, by label.
const RESOURCES: [&str; 8] = [
    "cuda",
    "async",
    "managed",
    "pool",
    "pool(chunks)",
    "fixed_size",
    "binning(pool)",
    "arena",
];

/// Builds resource `label` on `g`; `largest` is the workload's largest request (the block
/// size of `fixed_size`, which serves one size only).
fn build(label: &str, g: &Arc<SimDriver>, largest: u64) -> MrResult<Arc<dyn DeviceMemoryResource>> {
    let cuda = || CudaResource::<SimDriver>::new(Arc::clone(g));
    Ok(match label {
        "cuda" => Arc::new(cuda()),
        "async" => Arc::new(AsyncResource::<SimDriver>::new(Arc::clone(g))?),
        "managed" => Arc::new(ManagedResource::<SimDriver>::new(Arc::clone(g))),
        "pool" => Arc::new(PoolResource::new(cuda())),
        "pool(chunks)" => Arc::new(PoolResource::with_options(
            cuda(),
            PoolOptions::default().backing(Backing::Chunks),
        )?),
        "fixed_size" => Arc::new(FixedSizeResource::new(cuda(), largest)?),
        "binning(pool)" => Arc::new(BinningResource::with_range(
            PoolResource::new(cuda()),
            8,
            20,
        )?),
        _ => Arc::new(ArenaResource::new(cuda())),
    })
}

fn largest(w: &Workload) -> u64 {
    w.ops
        .iter()
        .filter_map(|op| match op {
            workloads::Op::Alloc(n) => Some(*n),
            workloads::Op::Free(_) => None,
        })
        .max()
        .unwrap_or(1)
}

fn results_path() -> std::path::PathBuf {
    if let Ok(p) = std::env::var("EMM_BENCH_RESULTS") {
        return p.into();
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("emm-bench/resources.jsonl")
}

/// The harness figures: ns/op and held/peak per (resource, workload), and the holes test.
fn summary() {
    let only = std::env::var("EMM_BENCH_ONLY").ok();
    let wanted = |label: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x == label))
    };
    let mut lines = Vec::new();
    for w in [workloads::w1(), workloads::w2(), workloads::w3()] {
        for label in RESOURCES.into_iter().filter(|l| wanted(l)) {
            let g = gpu();
            let max = largest(&w);
            let r = bench::run(
                &*g,
                || build(label, &g, max),
                label,
                &w,
                &BenchConfig::default(),
            );
            match r {
                Ok(r) => {
                    eprintln!(
                        "{:<14} {}  {:>9.1} ns/op  held/peak live {:.3}",
                        label,
                        w.name,
                        r.ns_per_op,
                        r.held_over_live()
                    );
                    lines.push(r.to_json());
                }
                Err(e) => eprintln!("{label:<14} {}  failed: {e}", w.name),
            }
        }
    }
    for label in ["pool", "arena", "binning(pool)"]
        .into_iter()
        .filter(|l| wanted(l))
    {
        for holes in [4096usize, 16_384, 65_536] {
            let g = gpu();
            let r = build(label, &g, MIB)
                .and_then(|r| bench::holes_test(&*r, holes, 200_000, StreamId::DEFAULT));
            match r {
                Ok(ns) => {
                    eprintln!("{label:<14} holes={holes:<6} {ns:>9.1} ns/op");
                    lines.push(
                        BenchResult {
                            resource: label.to_string(),
                            workload: format!("holes/{holes}"),
                            ops: 400_000,
                            ns_per_op: ns,
                            peak_held_bytes: 0,
                            peak_live_bytes: 0,
                        }
                        .to_json(),
                    );
                }
                Err(e) => eprintln!("{label:<14} holes={holes} failed: {e}"),
            }
        }
    }
    let path = results_path();
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::File::create(&path))
        .and_then(|mut f| lines.iter().try_for_each(|l| writeln!(f, "{l}")));
    match written {
        Ok(()) => eprintln!("wrote {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}

/// One workload replayed per iteration on a warmed-up resource.
fn replay_bench(bencher: Bencher, label: &str, w: &Workload) {
    let g = gpu();
    let r = build(label, &g, largest(w)).expect("resource");
    bench::replay_once(&*r, w, StreamId::DEFAULT, || Ok(())).expect("warm-up");
    bencher
        .counter(ItemsCount::new(w.ops.len()))
        .bench_local(|| bench::replay_once(&*r, w, StreamId::DEFAULT, || Ok(())).expect("pass"));
}

macro_rules! workload_benches {
    ($($fname:ident => $label:literal,)*) => {$(
        /// W1, W2, W3 replayed on this resource (items = ops).
        #[divan::bench(args = ["W1", "W2", "W3"], sample_count = 5, sample_size = 1)]
        fn $fname(bencher: Bencher, workload: &str) {
            let w = workloads::by_name(workload).expect("standard workload");
            replay_bench(bencher, $label, &w);
        }
    )*};
}

workload_benches! {
    cuda => "cuda",
    cuda_async => "async",
    managed => "managed",
    pool => "pool",
    pool_chunks => "pool(chunks)",
    fixed_size => "fixed_size",
    binning_over_pool => "binning(pool)",
    arena => "arena",
}

/// RMM's random_allocations grid: N allocations of up to `max` MiB (16 000 MiB live at most).
#[divan::bench(
    args = [(1000, 1), (1000, 64), (1000, 256), (10_000, 1), (10_000, 64), (10_000, 256),
            (100_000, 1), (100_000, 64), (100_000, 256)],
    consts = [0, 1, 2, 3],
    sample_count = 3,
    sample_size = 1
)]
fn random_allocations<const RESOURCE: usize>(bencher: Bencher, (n, max_mib): (u64, u64)) {
    let label = ["pool", "binning(pool)", "arena", "cuda"][RESOURCE];
    let w = bench::random_allocations(7, n, max_mib * MIB, 16_000 * MIB);
    if label != "cuda" {
        return replay_bench(bencher, label, &w);
    }
    // The simulator never reuses an address (so that every use after free is caught), and a
    // pass of 100 000 driver allocations of up to 256 MiB spans 12.8 TB of its 16 TiB: give
    // each pass of the pass-through resource a fresh GPU (built untimed; it has no warm state).
    bencher
        .counter(ItemsCount::new(w.ops.len()))
        .with_inputs(|| {
            let g = gpu();
            let r = build(label, &g, MIB).expect("resource");
            (g, r)
        })
        .bench_local_values(|(_g, r)| {
            bench::replay_once(&*r, &w, StreamId::DEFAULT, || Ok(())).expect("pass")
        });
}

/// Allocate 1 KiB + free with this many 512-byte holes that cannot serve it (items = ops).
#[divan::bench(args = [4096, 16_384, 65_536], consts = [0, 1], sample_count = 20, sample_size = 5000)]
fn holes<const RESOURCE: usize>(bencher: Bencher, holes: usize) {
    let label = ["pool", "arena"][RESOURCE];
    let g = gpu();
    let r = build(label, &g, MIB).expect("resource");
    let s = StreamId::DEFAULT;
    let blocks: Vec<_> = (0..2 * holes + 1)
        .map(|_| r.allocate(512, s).expect("fits"))
        .collect();
    for p in blocks.iter().skip(1).step_by(2) {
        r.deallocate(*p, 512, s).expect("live");
    }
    for _ in 0..10_000 {
        let p = r.allocate(1024, s).expect("fits");
        r.deallocate(p, 1024, s).expect("live");
    }
    bencher.counter(ItemsCount::new(2usize)).bench_local(|| {
        let p = r.allocate(divan::black_box(1024), s).expect("fits");
        r.deallocate(p, 1024, s).expect("live");
    });
    for p in blocks.iter().step_by(2) {
        r.deallocate(*p, 512, s).expect("live");
    }
}
