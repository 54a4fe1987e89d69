//! The allocator benchmark harness: replay a workload against a resource, time it, and measure
//! memory held against peak live bytes — shared by `cargo bench` (`bench/benches/resources.rs`)
//! and the `emm bench` command.
//!
//! The protocol is the one the peer allocators were measured with: one stream;
//! the whole op list once untimed as warm-up; then timed passes, host clock around the op loop
//! plus a final context synchronize, the median pass divided by the number of ops. Memory held
//! is the device's free memory before the resource was built minus its free memory after each
//! allocation, peak over one more pass (so the timed passes carry no `cuMemGetInfo` calls).
//!
//! # Examples
//!
//! ```
//! use emm_bench::harness::{self, BenchConfig};
//! use emm_core::mr::{CudaResource, PoolResource};
//! use emm_core::workloads::{Op, Workload};
//! # fn demo<D: emm_core::Driver>(driver: std::sync::Arc<D>) -> emm_core::mr::MrResult<()> {
//! let w = Workload::new("tiny", vec![Op::Alloc(1000), Op::Alloc(5000), Op::Free(0), Op::Free(0)]);
//! let d = driver.clone();
//! let r = harness::run(&*driver, || Ok(PoolResource::new(CudaResource::<D>::new(d))), "pool", &w,
//!     &BenchConfig::default())?;
//! println!("{}", r.to_json());
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Instant;

use emm_core::driver::{DevicePtr, Driver, StreamId};
use emm_core::mr::named::{self, WithResource};
use emm_core::mr::{DeviceMemoryResource, MrError, MrResult};
use emm_core::workloads::{Op, SplitMix64, Workload};

/// How a benchmark runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchConfig {
    /// Timed passes; the median is reported.
    pub timed_passes: usize,
    /// Whether to run the list once untimed first.
    pub warm_up: bool,
    /// The stream every operation uses.
    pub stream: StreamId,
}

impl Default for BenchConfig {
    /// Warm-up, three timed passes, the default stream: the peers' protocol.
    fn default() -> Self {
        BenchConfig {
            timed_passes: 3,
            warm_up: true,
            stream: StreamId::DEFAULT,
        }
    }
}

/// One (resource, workload) measurement; [`BenchResult::to_json`] is the `emm bench --json` line.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchResult {
    /// The resource's label, e.g. `pool` or `binning(pool)`.
    pub resource: String,
    /// The workload's name, e.g. `W1`.
    pub workload: String,
    /// Operations in one pass (allocations plus frees).
    pub ops: usize,
    /// Median wall-clock nanoseconds per operation.
    pub ns_per_op: f64,
    /// Peak bytes held from the device over a pass, counted from before the resource existed.
    pub peak_held_bytes: u64,
    /// Peak bytes live (requested and not freed) over a pass.
    pub peak_live_bytes: u64,
}

impl BenchResult {
    /// Held at peak over peak live: 1.0 is perfect; RMM's pool preallocating half an H100 is
    /// about 150 on W1.
    pub fn held_over_live(&self) -> f64 {
        self.peak_held_bytes as f64 / self.peak_live_bytes.max(1) as f64
    }

    /// [`Self::held_over_live`] as a table shows it: `none` when bytes were live but the device's
    /// free memory never moved — managed memory, placed on first touch, which a replay never
    /// does — since that is no ratio of 0.
    pub fn held_cell(&self) -> String {
        if self.peak_held_bytes == 0 && self.peak_live_bytes > 0 {
            "none".to_string()
        } else {
            format!("{:.3}", self.held_over_live())
        }
    }

    /// One JSON object on one line, with the fields `resource`, `workload`, `ops`,
    /// `ns_per_op`, `peak_held_bytes`, `peak_live_bytes`.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"resource\":{},\"workload\":{},\"ops\":{},\"ns_per_op\":{:.1},\"peak_held_bytes\":{},\"peak_live_bytes\":{}}}",
            json_string(&self.resource),
            json_string(&self.workload),
            self.ops,
            self.ns_per_op,
            self.peak_held_bytes,
            self.peak_live_bytes
        )
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Replays `workload` once against `resource` on `stream`, calling `after_alloc` after each
/// allocation. Everything allocated is freed even when a step fails.
///
/// The loop is the peers' harness's: one `(pointer, size)` per live
/// entry, swap-remove on a free, so the harness charges emm what it charges them.
///
/// # Errors
///
/// The first allocation or free error.
pub fn replay_once<R: DeviceMemoryResource + ?Sized>(
    resource: &R,
    workload: &Workload,
    stream: StreamId,
    mut after_alloc: impl FnMut() -> MrResult<()>,
) -> MrResult<()> {
    replay_with(resource, workload, stream, Some(&mut after_alloc))
}

/// [`replay_once`] with nothing after each allocation: what the timed passes run.
///
/// # Errors
///
/// The first allocation or free error.
pub fn replay<R: DeviceMemoryResource + ?Sized>(
    resource: &R,
    workload: &Workload,
    stream: StreamId,
) -> MrResult<()> {
    replay_with(resource, workload, stream, None)
}

/// The replay loop, compiled once for each resource type: it is then the one caller of the
/// resource's allocate and free, which lets the compiler inline them (callers replay several
/// times, and a closure type of each would make a copy of the loop each). The peers' loop
/// polls memory behind a branch likewise.
#[inline(never)]
fn replay_with<R: DeviceMemoryResource + ?Sized>(
    resource: &R,
    workload: &Workload,
    stream: StreamId,
    mut after_alloc: Option<&mut dyn FnMut() -> MrResult<()>>,
) -> MrResult<()> {
    let mut live: Vec<(DevicePtr, usize)> = Vec::with_capacity(1024);
    let mut failure = None;
    for op in &workload.ops {
        match *op {
            Op::Alloc(size) => {
                let Ok(n) = usize::try_from(size) else {
                    failure = Some(MrError::OutOfMemory {
                        resource: resource.name(),
                        requested: size,
                        available: None,
                    });
                    break;
                };
                match resource.allocate(n, stream) {
                    Ok(p) => live.push((p, n)),
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
                if let Some(Err(e)) = after_alloc.as_mut().map(|f| f()) {
                    failure = Some(e);
                    break;
                }
            }
            Op::Free(j) => {
                let (p, n) = live.swap_remove(j);
                if let Err(e) = resource.deallocate(p, n, stream) {
                    failure.get_or_insert(e);
                }
            }
        }
    }
    drain(resource, &mut live, stream, &mut failure);
    failure.map_or(Ok(()), Err)
}

/// Frees what a replay left live. Apart from the loop, so that the loop holds the only call
/// of the resource's free, which the compiler then inlines as it does the allocation.
#[cold]
#[inline(never)]
fn drain<R: DeviceMemoryResource + ?Sized>(
    resource: &R,
    live: &mut Vec<(DevicePtr, usize)>,
    stream: StreamId,
    failure: &mut Option<MrError>,
) {
    while let Some((p, n)) = live.pop() {
        if let Err(e) = resource.deallocate(p, n, stream) {
            failure.get_or_insert(e);
        }
    }
}

/// Builds a resource with `build`, then measures `workload` on it (see the module doc).
///
/// # Errors
///
/// A driver error reading free memory, or the first error of the resource.
pub fn run<R: DeviceMemoryResource>(
    driver: &dyn Driver,
    build: impl FnOnce() -> MrResult<R>,
    label: &str,
    workload: &Workload,
    config: &BenchConfig,
) -> MrResult<BenchResult> {
    let free_before = driver.mem_get_info()?.free;
    let resource = build()?;
    let stream = config.stream;
    if config.warm_up {
        replay(&resource, workload, stream)?;
    }
    let mut times = Vec::with_capacity(config.timed_passes.max(1));
    for _ in 0..config.timed_passes.max(1) {
        let t0 = Instant::now();
        replay(&resource, workload, stream)?;
        driver.context_synchronize()?;
        times.push(t0.elapsed().as_nanos() as f64);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let mut peak_held = 0u64;
    replay_once(&resource, workload, stream, || {
        let free = driver.mem_get_info()?.free;
        peak_held = peak_held.max(free_before.saturating_sub(free));
        Ok(())
    })?;
    let summary = workload.summary();
    Ok(BenchResult {
        resource: label.to_string(),
        workload: workload.name.clone(),
        ops: summary.ops,
        ns_per_op: median / summary.ops.max(1) as f64,
        peak_held_bytes: peak_held,
        peak_live_bytes: summary.peak_live_bytes,
    })
}

/// [`run`] on the chain named `name` ([`emm_core::mr::named`]), built on `driver` and measured as
/// its own type: its allocate and free are then compiled into the replay loop, as the peers'
/// harness (a C++ template over the allocator) compiles theirs,
/// instead of being called through `dyn DeviceMemoryResource` (15–17 instructions an operation
/// more on W1 and W3, callgrind).
///
/// # Errors
///
/// An unknown name; else as [`run`].
pub fn run_named(
    driver: &Arc<dyn Driver>,
    name: &str,
    workload: &Workload,
    config: &BenchConfig,
) -> MrResult<BenchResult> {
    struct Measure<'a> {
        driver: &'a dyn Driver,
        label: &'a str,
        workload: &'a Workload,
        config: &'a BenchConfig,
    }
    impl WithResource for Measure<'_> {
        type Output = MrResult<BenchResult>;
        fn with<R: DeviceMemoryResource + 'static>(
            self,
            build: impl FnOnce() -> MrResult<R>,
        ) -> Self::Output {
            run(self.driver, build, self.label, self.workload, self.config)
        }
    }
    let measure = Measure {
        driver: &**driver,
        label: name,
        workload,
        config,
    };
    named::with_named(name, Arc::clone(driver), measure)?
}

/// RMM's `random_allocations` benchmark as an op list: `2 × n` steps; each allocates
/// `range(1, max_size)` bytes with probability 73 % while fewer than `n` allocations were made
/// and live bytes stay under `max_usage`, else frees a random live allocation; then frees what
/// is left. RMM's grid is `n` ∈ {1 000, 10 000, 100 000} × `max_size` ∈ {1, 64, 256} MiB with
/// `max_usage` 16 000 MiB.
///
/// # Time complexity
///
/// O(n).
pub fn random_allocations(seed: u64, n: u64, max_size: u64, max_usage: u64) -> Workload {
    let mut rng = SplitMix64::new(seed);
    let mut ops = Vec::new();
    let mut live: Vec<u64> = Vec::new();
    let (mut made, mut live_bytes) = (0u64, 0u64);
    for _ in 0..2 * n {
        let size = rng.range(1, max_size.max(1));
        let alloc = live.is_empty() && made < n
            || (rng.below(100) < 73 && made < n && live_bytes + size < max_usage);
        if alloc {
            ops.push(Op::Alloc(size));
            live.push(size);
            live_bytes += size;
            made += 1;
        } else if !live.is_empty() {
            let j = rng.below(live.len() as u64) as usize;
            ops.push(Op::Free(j));
            live_bytes -= live.swap_remove(j);
        }
    }
    while !live.is_empty() {
        let j = rng.below(live.len() as u64) as usize;
        ops.push(Op::Free(j));
        live.swap_remove(j);
    }
    Workload::new(format!("random_allocations/{n}/{}MiB", max_size >> 20), ops)
}

/// The holes test: `holes` free holes of 512 bytes pinned between live 512-byte allocations
/// (so none can coalesce and none fits the request), then `iterations` of allocate 1 KiB +
/// free. Returns nanoseconds per operation (an allocate or a free). A first-fit list walks
/// every hole on each allocation; a constant-time allocator does not notice them.
///
/// # Errors
///
/// The resource's first error; everything allocated is freed first.
pub fn holes_test<R: DeviceMemoryResource + ?Sized>(
    resource: &R,
    holes: usize,
    iterations: usize,
    stream: StreamId,
) -> MrResult<f64> {
    const HOLE: usize = 512;
    const REQUEST: usize = 1024;
    let mut blocks = Vec::with_capacity(2 * holes + 1);
    let setup = (|| {
        for _ in 0..2 * holes + 1 {
            blocks.push(resource.allocate(HOLE, stream)?);
        }
        for p in blocks.iter().skip(1).step_by(2) {
            resource.deallocate(*p, HOLE, stream)?;
        }
        Ok::<(), MrError>(())
    })();
    let timed = setup.and_then(|()| {
        let t0 = Instant::now();
        for _ in 0..iterations {
            let p = resource.allocate(std::hint::black_box(REQUEST), stream)?;
            resource.deallocate(p, REQUEST, stream)?;
        }
        Ok(t0.elapsed().as_nanos() as f64 / (2 * iterations.max(1)) as f64)
    });
    // Free what is still live: the even blocks, and the odd ones if setup stopped early.
    let freed_odd = blocks.len() == 2 * holes + 1;
    for (k, p) in blocks.iter().enumerate() {
        if k % 2 == 0 || !freed_odd {
            let _ = resource.deallocate(*p, HOLE, stream);
        }
    }
    timed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_fields_and_escapes() {
        let r = BenchResult {
            resource: "binning(\"pool\")".into(),
            workload: "W1".into(),
            ops: 10,
            ns_per_op: 12.345,
            peak_held_bytes: 300,
            peak_live_bytes: 200,
        };
        assert_eq!(
            r.to_json(),
            "{\"resource\":\"binning(\\\"pool\\\")\",\"workload\":\"W1\",\"ops\":10,\"ns_per_op\":12.3,\"peak_held_bytes\":300,\"peak_live_bytes\":200}"
        );
        assert!((r.held_over_live() - 1.5).abs() < 1e-9);
        assert_eq!(r.held_cell(), "1.500");
        let untouched = BenchResult {
            peak_held_bytes: 0,
            ..r.clone()
        };
        assert_eq!(
            untouched.held_cell(),
            "none",
            "managed memory never touched"
        );
        let nothing = BenchResult {
            peak_live_bytes: 0,
            ..untouched
        };
        assert_eq!(nothing.held_cell(), "0.000");
    }

    #[test]
    fn random_allocations_is_well_formed_and_capped() {
        let w = random_allocations(1, 1000, 64 << 20, 16_000 << 20);
        let s = w.summary();
        assert_eq!(s.allocs, s.frees);
        assert_eq!(s.allocs, 1000);
        assert!(s.peak_live_bytes < 16_000 << 20);
        assert_eq!(w.name, "random_allocations/1000/64MiB");
    }
}
