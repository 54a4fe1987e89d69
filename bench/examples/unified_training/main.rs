//! A training-loop-like workload on the simulated GPU (1 GiB, H100 costs) at 0.5×, 1× and 2×
//! device memory: the caching managed allocator against plain managed allocation and against
//! explicit copies. Prints the table of the book's "Benchmarks"; `--sweep` prints the
//! measurements behind the allocator's rounding and segment sizes; `--hot-path` the wall-clock
//! cost of an allocate or free on the standard workloads W1, W2, W3.
//!
//! `cargo run --release -p emm-bench --example unified_training [-- --sweep | --hot-path]`

mod strategies;
mod workload;

use std::sync::Arc;

use emm_bench::harness::{self as bench, BenchConfig};
use emm_core::mr::{ManagedResource, PoolResource};
use emm_core::unified::{CachingManagedAllocator, CachingManagedOptions, GiveBack, ManagedLimit};
use emm_core::{workloads, DeviceId, Driver, StreamId};
use emm_sim::{CallKind, SimConfig, SimDriver, GIB, MIB};

use strategies::{host_scratch, shared, Caching, Explicit, Plain};
use workload::{run, Shape, Strategy};

const LAYERS: usize = 24;
const ITERATIONS: usize = 3;

/// What one run measured.
struct Row {
    virtual_ms: f64,
    faults: u64,
    to_device_mib: f64,
    to_host_mib: f64,
    prefetched_mib: f64,
    evictions: u64,
    copied_mib: f64,
    alloc_calls: usize,
    free_calls: usize,
    advise_calls: usize,
    syncs: usize,
    races: usize,
    /// Peak bytes held from the driver over peak live activations (caching only).
    held_over_live: Option<f64>,
}

fn machine(seed: u64) -> Result<(SimDriver, StreamId), String> {
    let config = SimConfig::new(seed)
        .memory_per_device(GIB)
        .track_contents(false);
    let g = SimDriver::new(config)?;
    let s = g.stream_create(true).map_err(|x| x.to_string())?;
    Ok((g, s))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// Runs the workload over `s` on `g`, then reads the counters.
fn measure<S: Strategy>(g: &SimDriver, s: &mut S, shape: &Shape) -> Result<(Row, u64), String> {
    let peak_live = run(s, shape)?;
    g.context_synchronize().map_err(|x| x.to_string())?;
    let st = g.managed_stats();
    let trace = g.trace();
    let count = |kinds: &[CallKind]| trace.iter().filter(|e| kinds.contains(&e.call)).count();
    let row = Row {
        virtual_ms: g.now_ns() as f64 / 1e6,
        faults: st.faults,
        to_device_mib: mib(st.migrated_to_device),
        to_host_mib: mib(st.migrated_to_host),
        prefetched_mib: mib(st.prefetched),
        evictions: st.evictions,
        copied_mib: 0.0,
        alloc_calls: count(&[
            CallKind::MemAlloc,
            CallKind::MemAllocManaged,
            CallKind::HostAlloc,
        ]),
        free_calls: count(&[CallKind::MemFree, CallKind::HostFree]),
        advise_calls: count(&[CallKind::MemAdvise]),
        syncs: count(&[CallKind::ContextSynchronize, CallKind::StreamSynchronize]),
        races: g.report().races().count(),
        held_over_live: None,
    };
    Ok((row, peak_live))
}

fn caching(shape: &Shape, options: CachingManagedOptions) -> Result<Row, String> {
    let (g, s) = machine(1)?;
    let cache = CachingManagedAllocator::new(shared(&g), DeviceId(0), options)
        .map_err(|x| x.to_string())?;
    let mut strategy = Caching {
        g: g.clone(),
        cache: Arc::new(cache),
        s,
        buf: host_scratch(64 << 20),
    };
    let (mut row, peak_live) = measure(&g, &mut strategy, shape)?;
    let stats = strategy.cache.stats();
    row.held_over_live = Some(stats.peak_held_bytes as f64 / peak_live as f64);
    strategy.cache.take_failures().map_err(|x| x.to_string())?;
    Ok(row)
}

fn plain(shape: &Shape, prefetch: bool) -> Result<Row, String> {
    let (g, s) = machine(1)?;
    let mut strategy = Plain {
        g: g.clone(),
        s,
        prefetch,
        buf: host_scratch(64 << 20),
    };
    Ok(measure(&g, &mut strategy, shape)?.0)
}

fn explicit(shape: &Shape) -> Result<Row, String> {
    let (g, s) = machine(1)?;
    let mut strategy = Explicit::new(&g, s, 64 << 20);
    let (mut row, _) = measure(&g, &mut strategy, shape)?;
    row.copied_mib = mib(strategy.copied);
    strategy.teardown()?;
    Ok(row)
}

fn sim_options() -> CachingManagedOptions {
    // The simulated GPU handles oversubscription; real hardware keeps the default limit.
    CachingManagedOptions::default().limit(ManagedLimit::Oversubscribe)
}

fn shape(factor: f64) -> Shape {
    Shape {
        device_memory: GIB,
        factor,
        layers: LAYERS,
        iterations: ITERATIONS,
    }
}

fn table() -> Result<(), String> {
    println!(
        "| memory | strategy | virtual time | page faults | migrated to device | migrated to host \
         | prefetched | evictions | copied | alloc / free calls | advise | syncs |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for factor in [0.5, 1.0, 2.0] {
        let sh = shape(factor);
        let rows = [
            ("caching managed (emm)", caching(&sh, sim_options())?),
            ("plain managed + prefetch", plain(&sh, true)?),
            ("plain managed (faults)", plain(&sh, false)?),
            ("explicit copies (pool + pinned)", explicit(&sh)?),
        ];
        for (name, r) in rows {
            if r.races != 0 {
                return Err(format!("{name} at {factor}×: {} races", r.races));
            }
            println!(
                "| {factor}× | {name} | {:.1} ms | {} | {:.0} MiB | {:.0} MiB | {:.0} MiB | {} | \
                 {:.0} MiB | {} / {} | {} | {} |",
                r.virtual_ms,
                r.faults,
                r.to_device_mib,
                r.to_host_mib,
                r.prefetched_mib,
                r.evictions,
                r.copied_mib,
                r.alloc_calls,
                r.free_calls,
                r.advise_calls,
                r.syncs
            );
        }
    }
    Ok(())
}

fn sweep() -> Result<(), String> {
    let base = sim_options();
    let pytorch = base.segments(2 << 20, 20 << 20);
    let variants = [
        (
            "emm's default: 512 B, 2 / 128 MiB, give back displaced",
            base,
        ),
        (
            "PyTorch's sizes: 512 B, 2 / 20 MiB, give back displaced",
            pytorch,
        ),
        (
            "PyTorch's sizes, never give back (PyTorch's policy)",
            pytorch.give_back(GiveBack::Never),
        ),
        (
            "2 / 128 MiB, never give back",
            base.give_back(GiveBack::Never),
        ),
        (
            "large requests rounded to 64 KiB (a page)",
            base.large_rounding(64 << 10),
        ),
        (
            "large requests rounded to 2 MiB",
            base.large_rounding(2 << 20),
        ),
        ("small requests rounded to 256 B", base.min_block(256)),
        ("2 / 64 MiB segments", base.segments(2 << 20, 64 << 20)),
        ("8 / 128 MiB segments", base.segments(8 << 20, 128 << 20)),
    ];
    println!(
        "| memory | caching allocator options | virtual time | page faults | migrated | \
         segments taken | peak held / peak live |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for factor in [0.5, 1.0, 2.0] {
        for (name, options) in variants {
            let r = caching(&shape(factor), options)?;
            if r.races != 0 {
                return Err(format!("{name} at {factor}×: {} races", r.races));
            }
            println!(
                "| {factor}× | {name} | {:.1} ms | {} | {:.0} MiB | {} | {:.3} |",
                r.virtual_ms,
                r.faults,
                r.to_device_mib + r.to_host_mib,
                r.alloc_calls,
                r.held_over_live.unwrap_or(0.0)
            );
        }
    }
    Ok(())
}

/// Wall-clock ns per allocate or free on W1, W2, W3 (the resources bench's protocol): the
/// caching allocator's hot path against a driver call per operation and against a pool over
/// managed memory.
fn hot_path() -> Result<(), String> {
    let err = |x: emm_core::mr::MrError| x.to_string();
    println!("| allocator | W1 ns/op | W2 ns/op | W3 ns/op |");
    println!("| --- | ---: | ---: | ---: |");
    for label in [
        "CachingManagedAllocator",
        "PoolResource over ManagedResource",
        "ManagedResource",
    ] {
        let mut cells = Vec::new();
        for w in [workloads::w1(), workloads::w2(), workloads::w3()] {
            let g = SimDriver::new(SimConfig::new(1).track_contents(false).record_trace(false))?;
            let d = Arc::new(g.clone());
            let config = BenchConfig::default();
            let r = match label {
                "CachingManagedAllocator" => bench::run(
                    &g,
                    || {
                        CachingManagedAllocator::new(shared(&g), DeviceId(0), sim_options())
                            .map_err(Into::into)
                    },
                    label,
                    &w,
                    &config,
                ),
                "PoolResource over ManagedResource" => bench::run(
                    &g,
                    || {
                        Ok(PoolResource::new(ManagedResource::<SimDriver>::new(
                            Arc::clone(&d),
                        )))
                    },
                    label,
                    &w,
                    &config,
                ),
                _ => bench::run(
                    &g,
                    || Ok(ManagedResource::<SimDriver>::new(Arc::clone(&d))),
                    label,
                    &w,
                    &config,
                ),
            }
            .map_err(err)?;
            cells.push(format!("{:.1}", r.ns_per_op));
        }
        println!("| `{label}` | {} |", cells.join(" | "));
    }
    Ok(())
}

fn main() -> Result<(), String> {
    if std::env::args().any(|a| a == "--sweep") {
        sweep()
    } else if std::env::args().any(|a| a == "--hot-path") {
        hot_path()
    } else {
        table()
    }
}
