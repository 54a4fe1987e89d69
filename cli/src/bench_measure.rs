//! The measurements `emm bench --report` adds to the workload tables: memory held against time
//! for one workload, the cost of an operation against the number of free holes, and the cost
//! of `cudaMalloc`'s peer registration on a simulated node of 1 to 16 devices.

use std::sync::Arc;

use emm_bench::harness::holes_test;
use emm_core::mr::named;
use emm_core::workloads::{self, Workload};
use emm_core::{DevicePtr, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

/// Memory held and live after every `every`-th operation of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// The resource.
    pub resource: String,
    /// The workload.
    pub workload: String,
    /// (operation index, bytes live, bytes held from the device).
    pub points: Vec<(usize, u64, u64)>,
}

/// Replays `w` once against the named resource on `driver` and samples live and held bytes
/// (held: free memory before the resource was built minus free memory now) every `every` ops.
///
/// # Errors
///
/// The resource's or the driver's first error, as text.
pub fn timeline(
    driver: &Arc<dyn Driver>,
    resource: &str,
    w: &Workload,
    every: usize,
) -> Result<Timeline, String> {
    let before = driver.mem_get_info().map_err(|e| e.to_string())?.free;
    let r = named::build(resource, Arc::clone(driver)).map_err(|e| e.to_string())?;
    // Both closures of `replay` count and sample, so the state lives in cells.
    let points = std::cell::RefCell::new(Vec::new());
    let (live, op) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0usize));
    let sample = || -> Result<(), String> {
        if op.get() % every.max(1) == 0 {
            let free = driver.mem_get_info().map_err(|e| e.to_string())?.free;
            points
                .borrow_mut()
                .push((op.get(), live.get(), before.saturating_sub(free)));
        }
        Ok(())
    };
    let mut first_err = None;
    let s = StreamId::DEFAULT;
    workloads::replay(
        w,
        |size| {
            let n = usize::try_from(size).map_err(|e| e.to_string())?;
            let p = r.allocate(n, s).map_err(|e| e.to_string())?;
            live.set(live.get() + size);
            op.set(op.get() + 1);
            sample()?;
            Ok::<(DevicePtr, usize), String>((p, n))
        },
        |(p, n), size| {
            live.set(live.get() - size);
            op.set(op.get() + 1);
            if let Err(e) = r.deallocate(p, n, s).map_err(|e| e.to_string()) {
                first_err.get_or_insert(e);
            }
            if let Err(e) = sample() {
                first_err.get_or_insert(e);
            }
        },
    )?;
    first_err.map_or(Ok(()), Err)?;
    let points = points.into_inner();
    Ok(Timeline {
        resource: resource.to_string(),
        workload: w.name.clone(),
        points,
    })
}

/// The holes test (`emm_bench::harness::holes_test`) for each count in `holes`: ns per
/// operation (median of five runs) of allocate 1 KiB + free with that many 512-byte free holes
/// pinned in the pool.
///
/// # Errors
///
/// The resource's first error, as text.
pub fn holes(
    driver: &Arc<dyn Driver>,
    resource: &str,
    holes: &[usize],
    iterations: usize,
) -> Result<Vec<(usize, f64)>, String> {
    let mut out = Vec::new();
    for &h in holes {
        let r = named::build(resource, Arc::clone(driver)).map_err(|e| e.to_string())?;
        // A short untimed round first, so the tables and lists exist.
        holes_test(&*r, h, 100, StreamId::DEFAULT).map_err(|e| e.to_string())?;
        // The median of five runs: one run is a few milliseconds, which a busy machine's
        // scheduler can double.
        let mut runs = Vec::with_capacity(5);
        for _ in 0..5 {
            runs.push(
                holes_test(&*r, h, iterations, StreamId::DEFAULT).map_err(|e| e.to_string())?,
            );
        }
        runs.sort_by(f64::total_cmp);
        out.push((h, runs[2]));
    }
    Ok(out)
}

/// A simulated node of `devices` devices (80 GiB each, contents not tracked) where every
/// context has enabled peer access to every other device, so that each `cuMemAlloc` pays the
/// peer-registration cost of the cost model (`peer_map_ns`) for each of `devices − 1` peers.
///
/// # Errors
///
/// The simulator's refusal, as text.
pub fn peered_node(devices: u32) -> Result<SimDriver, String> {
    let sim = SimDriver::new(
        SimConfig::new(1)
            .devices(devices)
            .memory_per_device(80 * GIB)
            .track_contents(false)
            .record_trace(false),
    )?;
    let ctxs = (0..devices)
        .map(|d| sim.primary_context(emm_core::DeviceId(d)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    for &c in &ctxs {
        sim.set_current_context(c).map_err(|e| e.to_string())?;
        for &p in ctxs.iter().filter(|&&p| p != c) {
            sim.enable_peer_access(p).map_err(|e| e.to_string())?;
        }
    }
    sim.set_current_context(ctxs[0])
        .map_err(|e| e.to_string())?;
    Ok(sim)
}

/// Virtual nanoseconds per operation of one pass of `w` through the named resource, built
/// fresh (so a pool pays for growing too), on device 0 of a [`peered_node`] of `devices`
/// devices: the simulator's prediction of what peer registration costs each resource as the
/// node grows.
///
/// # Errors
///
/// The simulator's or the resource's first error, as text.
pub fn peered_ns_per_op(devices: u32, resource: &str, w: &Workload) -> Result<f64, String> {
    let sim = peered_node(devices)?;
    let driver: Arc<dyn Driver> = Arc::new(sim.clone());
    let r = named::build(resource, driver).map_err(|e| e.to_string())?;
    let t0 = sim.now_ns();
    emm_bench::harness::replay_once(&*r, w, StreamId::DEFAULT, || Ok(()))
        .map_err(|e| e.to_string())?;
    sim.context_synchronize().map_err(|e| e.to_string())?;
    Ok((sim.now_ns() - t0) as f64 / w.ops.len().max(1) as f64)
}
