//! The sandbox's figures, in one run: ns per op on W1, W2, W3 (`emm_core::workloads`) for the
//! first-fit example plugin sandboxed (with and without fuel and deadline), the same policy
//! compiled natively behind the same lock and upstream, the built-in `PoolResource` and
//! `cuMemAlloc` per op; then the time to load and start a plugin, to quarantine one and
//! recover, the host's floor (a guest that does next to nothing) and the lock under threads.
//!
//! Run with `cargo xtask wasm && cargo bench -p emm-sandbox --bench workloads`. The table goes
//! to stdout and to `target/sandbox-bench.md`. Timing follows workloads.md: one untimed pass,
//! three timed passes, the median, divided by the number of ops. The device is the simulator
//! with contents tracking off, so the figures are the allocator's cost plus the simulator's
//! for the chunks (a handful of driver calls per pass once the pool is warm).
//!
//! `cargo bench -p emm-sandbox --bench workloads -- TEXT` runs only the table rows whose name
//! holds `TEXT` (e.g. `sandboxed`), without the one-off figures or the results file.
//! `EMM_PLUGIN_DIR` points at another folder of built plugins, as for the tests.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use emm_core::mr::{CudaResource, DeviceMemoryResource, MrError, MrResult, PoolResource};
use emm_core::workloads::{self, SplitMix64, Workload};
use emm_core::{DevicePtr, Driver, StreamId};
use emm_plugin_sdk::{Answer, Chunk, Error, Policy, Request, Upstream};
use emm_sandbox::{PluginLimits, PluginModule, PluginResource};
use emm_sim::{SimConfig, SimDriver, GIB};
use first_fit::FirstFit;

// The tests' helpers: the built plugins are found the same way.
#[path = "../tests/sandbox/common/mod.rs"]
mod common;
use common::{plugin_path, upstream};

const S: StreamId = StreamId::DEFAULT;

/// A guest that does next to nothing: a bump pointer over one 1 GiB chunk, back to 0 when it
/// runs out (the floor measurement frees each allocation before the next), frees ignored.
const BUMP_WAT: &str = r#"(module
  (import "emm" "upstream_alloc" (func $up_alloc (param i64 i64) (result i32)))
  (memory (export "memory") 1)
  (global $chunk (mut i32) (i32.const 0))
  (global $top (mut i64) (i64.const 0))
  (func (export "emm_abi_version") (result i32) (i32.const 1))
  (func (export "emm_buffer") (param i32) (result i32) (i32.const 1024))
  (func (export "emm_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "emm_alloc") (param $size i64) (param $align i64) (param $stream i64)
    (result i64) (local $off i64)
    (if (i32.eqz (global.get $chunk))
      (then (global.set $chunk (call $up_alloc (i64.const 1073741824) (i64.const 256)))))
    (if (i32.lt_s (global.get $chunk) (i32.const 0)) (then (return (i64.const -1))))
    (local.set $off (global.get $top))
    (global.set $top (i64.add (local.get $off)
      (i64.and (i64.add (local.get $size) (i64.const 255)) (i64.const -256))))
    (if (i64.gt_u (global.get $top) (i64.const 1073741824))
      (then (local.set $off (i64.const 0))
            (global.set $top (i64.and (i64.add (local.get $size) (i64.const 255))
                                      (i64.const -256)))))
    (i64.or (i64.shl (i64.extend_i32_u (global.get $chunk)) (i64.const 40)) (local.get $off)))
  (func (export "emm_free") (param i32 i64 i64 i64) (result i32) (i32.const 0))
)"#;

/// Chunks for the native twin, from the same upstream resource the sandbox uses.
struct NativeUpstream {
    upstream: Arc<dyn DeviceMemoryResource>,
    chunks: Vec<Option<(DevicePtr, u64)>>,
    by_base: BTreeMap<u64, u32>,
}

impl Upstream for NativeUpstream {
    fn alloc_chunk(&mut self, size: u64, align: u64) -> Result<Chunk, Error> {
        let ptr = self
            .upstream
            .allocate_aligned(size as usize, align as usize, S)
            .map_err(|_| Error::OutOfMemory)?;
        self.chunks.push(Some((ptr, size)));
        let handle = self.chunks.len() as u32;
        self.by_base.insert(ptr.0, handle);
        Ok(Chunk { handle, size })
    }

    fn free_chunk(&mut self, handle: u32) -> Result<(), Error> {
        let slot = self
            .chunks
            .get_mut(handle as usize - 1)
            .ok_or(Error::Invalid)?;
        let (ptr, size) = slot.take().ok_or(Error::Invalid)?;
        self.by_base.remove(&ptr.0);
        self.upstream
            .deallocate(ptr, size as usize, S)
            .map_err(|_| Error::Invalid)
    }
}

/// The first-fit policy compiled natively, behind one lock, as the sandbox runs it.
struct NativeResource {
    inner: Mutex<(FirstFit, NativeUpstream)>,
    driver: Arc<SimDriver>,
}

impl DeviceMemoryResource for NativeResource {
    fn name(&self) -> &'static str {
        "NativeFirstFit"
    }

    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        let mut guard = self.inner.lock().unwrap();
        let (policy, up) = &mut *guard;
        let req = Request {
            size: bytes as u64,
            align: 256,
            stream: stream.0,
        };
        let a = policy.alloc(up, req).map_err(|_| MrError::OutOfMemory {
            resource: "NativeFirstFit",
            requested: bytes as u64,
            available: None,
        })?;
        let (base, _) = up.chunks[a.chunk as usize - 1].expect("chunk");
        Ok(base.offset(a.offset))
    }

    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        let mut guard = self.inner.lock().unwrap();
        let (policy, up) = &mut *guard;
        let (&base, &chunk) = up.by_base.range(..=ptr.0).next_back().expect("chunk");
        let answer = Answer {
            chunk,
            offset: ptr.0 - base,
        };
        policy
            .free(up, answer, bytes as u64, stream.0)
            .map_err(|_| MrError::InvalidFree {
                resource: "NativeFirstFit",
                ptr,
                bytes: bytes as u64,
                reason: "refused".into(),
            })
    }

    fn driver(&self) -> &dyn Driver {
        &*self.driver
    }
}

fn gpu() -> Arc<SimDriver> {
    let config = SimConfig::new(1)
        .memory_per_device(80 * GIB)
        .track_contents(false)
        .record_trace(false);
    Arc::new(SimDriver::new(config).expect("sim"))
}

/// One pass of `w` through `r`.
fn pass(r: &dyn DeviceMemoryResource, w: &Workload) -> Duration {
    let start = Instant::now();
    workloads::replay(
        w,
        |size| r.allocate(size as usize, S),
        |p, size| {
            r.deallocate(p, size as usize, S).expect("free");
        },
    )
    .expect("allocate");
    start.elapsed()
}

/// workloads.md: one untimed pass, the median of three timed passes, in ns per op.
fn ns_per_op(r: &dyn DeviceMemoryResource, w: &Workload) -> f64 {
    pass(r, w);
    let mut t: Vec<Duration> = (0..3).map(|_| pass(r, w)).collect();
    t.sort();
    t[1].as_nanos() as f64 / w.ops.len() as f64
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn sandboxed(g: &Arc<SimDriver>, limits: PluginLimits) -> PluginResource {
    let module =
        PluginModule::from_file(&plugin_path("first_fit"), limits, Vec::new()).expect("load");
    PluginResource::new(Arc::new(module), upstream(g))
}

fn main() {
    let mut out = String::new();
    let mut line = |s: String| {
        println!("{s}");
        out.push_str(&s);
        out.push('\n');
    };
    let ws = [workloads::w1(), workloads::w2(), workloads::w3()];
    line("| allocator | W1 ns/op | W2 ns/op | W3 ns/op |".into());
    line("|---|---:|---:|---:|".into());
    let g = gpu();
    let rows: Vec<(&str, Box<dyn DeviceMemoryResource>)> = vec![
        (
            "first_fit.wasm sandboxed (fuel + deadline)",
            Box::new(sandboxed(&g, PluginLimits::default())),
        ),
        (
            "first_fit.wasm sandboxed (deadline only: production)",
            Box::new(sandboxed(&g, PluginLimits::default().fuel_per_call(None))),
        ),
        (
            "first_fit.wasm sandboxed (no fuel, no deadline)",
            Box::new(sandboxed(
                &g,
                PluginLimits::default().fuel_per_call(None).deadline(None),
            )),
        ),
        (
            "first_fit native twin (same lock and upstream)",
            Box::new(NativeResource {
                inner: Mutex::new((
                    FirstFit::new(first_fit::DEFAULT_CHUNK_BYTES),
                    NativeUpstream {
                        upstream: upstream(&g),
                        chunks: Vec::new(),
                        by_base: BTreeMap::new(),
                    },
                )),
                driver: Arc::clone(&g),
            }),
        ),
        (
            "PoolResource (built-in TLSF pool, same upstream)",
            Box::new(PoolResource::new(CudaResource::<SimDriver>::new(
                Arc::clone(&g),
            ))),
        ),
        (
            "CudaResource (cuMemAlloc per op, simulated)",
            Box::new(CudaResource::<SimDriver>::new(Arc::clone(&g))),
        ),
    ];
    // Cargo passes `--bench`; any other argument picks rows.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    for (name, r) in &rows {
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        let cells: Vec<String> = ws
            .iter()
            .map(|w| format!("{:.0}", ns_per_op(&**r, w)))
            .collect();
        line(format!("| {name} | {} |", cells.join(" | ")));
    }
    drop(rows);
    if filter.is_some() {
        return;
    }

    let limits = PluginLimits::default();
    let compile = median(
        (0..5)
            .map(|_| {
                let t = Instant::now();
                drop(
                    PluginModule::from_file(&plugin_path("first_fit"), limits.clone(), Vec::new())
                        .expect("load"),
                );
                t.elapsed()
            })
            .collect(),
    );
    let module = Arc::new(
        PluginModule::from_file(&plugin_path("first_fit"), limits, Vec::new()).expect("load"),
    );
    let start = median(
        (0..50)
            .map(|_| {
                let r = PluginResource::new(Arc::clone(&module), upstream(&g));
                let t = Instant::now();
                r.start().expect("start");
                t.elapsed()
            })
            .collect(),
    );
    line(String::new());
    line(format!(
        "load and compile first_fit.wasm ({} KiB): {:.1} ms (median of 5)",
        std::fs::metadata(plugin_path("first_fit")).map_or(0, |m| m.len() / 1024),
        compile.as_secs_f64() * 1e3
    ));
    line(format!(
        "instantiate (pooled) + emm_init: {:.1} µs (median of 50)",
        start.as_secs_f64() * 1e6
    ));

    // Quarantine and recover: a plugin that traps on its second call, restarted each time.
    let wat = include_str!("../tests/fixtures/hostile.wat")
        .replace("HOSTILE", "(unreachable)")
        .replace("NTH", "2")
        .replace("VERSION", "1")
        .replace("INIT_STATUS", "0")
        .replace("FREE_STATUS", "0");
    let module = PluginModule::from_wat(
        "trap",
        &wat,
        PluginLimits::default().max_restarts(u32::MAX),
        Vec::new(),
    )
    .expect("wat");
    let r = PluginResource::new(Arc::new(module), upstream(&g));
    // Each instance serves one call and traps on its second; each trap restarts it.
    let mut prev = r.allocate(256, S).expect("first call");
    let recover = median(
        (0..200)
            .map(|_| {
                let t = Instant::now();
                assert!(r.allocate(256, S).is_err(), "the trap");
                let next = r.allocate(256, S).expect("a restarted instance");
                let d = t.elapsed();
                r.deallocate(prev, 256, S).expect("free");
                prev = next;
                d
            })
            .collect(),
    );
    r.deallocate(prev, 256, S).expect("free");
    line(format!(
        "quarantine (trap) + restart + the next allocation: {:.1} µs (median of 200)",
        recover.as_secs_f64() * 1e6
    ));

    // The host's floor: a guest that does next to nothing (a bump pointer over one chunk),
    // so what is left is the lock, the call into wasm and the checks of every answer and free.
    let floor = PluginModule::from_wat("bump", BUMP_WAT, PluginLimits::default(), Vec::new())
        .expect("bump");
    let r = PluginResource::new(Arc::new(floor), upstream(&g));
    let pairs = 200_000u32;
    let floor = median(
        (0..5)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..pairs {
                    let p = r.allocate(4096, S).expect("bump");
                    r.deallocate(p, 4096, S).expect("free");
                }
                t.elapsed()
            })
            .collect(),
    );
    line(format!(
        "the host's floor (a bump-pointer guest, fuel + deadline, 4 KiB allocate + free \
         pairs): {:.0} ns per op (median of 5)",
        floor.as_nanos() as f64 / f64::from(2 * pairs)
    ));
    drop(r);

    // The lock under threads: W3-like churn, pairs per thread.
    let shared = Arc::new(sandboxed(&g, PluginLimits::default()));
    for threads in [1u64, 2, 4] {
        let pairs = 200_000 / threads;
        let t = Instant::now();
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                let r = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let mut rng = SplitMix64::new(i);
                    let mut live = Vec::with_capacity(256);
                    for _ in 0..pairs {
                        let size = rng.range(8, 64 * 1024) as usize;
                        live.push((r.allocate(size, S).expect("alloc"), size));
                        if live.len() > 250 {
                            let (p, s) = live.swap_remove(rng.below(live.len() as u64) as usize);
                            r.deallocate(p, s, S).expect("free");
                        }
                    }
                    for (p, s) in live {
                        r.deallocate(p, s, S).expect("free");
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().expect("thread");
        }
        let ns = t.elapsed().as_nanos() as f64 / (2 * pairs * threads) as f64;
        line(format!("{threads} thread(s) sharing one sandboxed first_fit: {ns:.0} ns per op (wall / all ops)"));
    }
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/sandbox-bench.md");
    if let Err(e) = std::fs::write(&target, out) {
        eprintln!("could not write {}: {e}", target.display());
    }
}
