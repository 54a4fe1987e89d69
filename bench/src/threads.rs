//! The many-threads benchmark: a standard workload replayed by `n` threads at once against one
//! resource, each thread with its own copy of the op list, on its own stream or all on one
//! shared stream.
//!
//! The protocol extends the single-thread one ([`crate::harness`]): one team of threads, as a
//! thread pool's, lives through one untimed warm-up round and the timed rounds, so that
//! per-thread caches warmed up stay with their threads; each round starts them together at a
//! barrier (each thread replays its list [`repeats`] times, about a million operations), host clock from the first thread's start
//! to the last thread's end (each thread times itself) plus a context synchronize, the median round reported as operations
//! per second (all threads' operations over the round's wall time). Memory held is measured in
//! one more round on a freshly built resource: every thread reads the device's free memory after each of its allocations,
//! and the peak of (free before the resource was built − free now) is kept; peak live is the
//! peak of all threads' live bytes together, counted with an atomic.
//!
//! [`run_counting`] also counts, over the timed rounds, the resource's driver calls (it builds
//! the resource over a [`CountingDriver`]) and the memory it moved between a thread's cache and
//! the rest ([`DeviceMemoryResource::chunk_moves`]): what a slow path costs on a GPU and what
//! serialises threads, which the simulated GPU's wall clock does not show.
//!
//! What a figure means depends on the machine: with fewer cores than threads the threads share
//! cores, so the figure shows what the resource's locking costs, not how it scales.
//!
//! # Examples
//!
//! ```
//! use emm_bench::threads::{self, ThreadsConfig};
//! use emm_core::mr::{CudaResource, ShardedPoolResource};
//! use emm_core::workloads::{Op, Workload};
//! # fn demo<D: emm_core::Driver>(driver: std::sync::Arc<D>) -> emm_core::mr::MrResult<()> {
//! let w = Workload::new("tiny", vec![Op::Alloc(1000), Op::Alloc(5000), Op::Free(0), Op::Free(0)]);
//! let config = ThreadsConfig { threads: 4, ..ThreadsConfig::default() };
//! // Called twice: once for the timed rounds, once for a fresh resource to measure memory.
//! let build = || Ok(ShardedPoolResource::new(CudaResource::<D>::new(driver.clone())));
//! let r = threads::run(&*driver, build, "sharded", &w, &config)?;
//! println!("{}", r.to_json());
//! # Ok(()) }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use crate::harness::replay_once;
use emm_core::driver::counting::{CallCounts, CountingDriver};
use emm_core::driver::{DevicePtr, Driver, StreamId};
use emm_core::mr::{DeviceMemoryResource, MrError, MrResult};
use emm_core::workloads::{self, Workload};

/// The most memory a resource may hold from the device, as a multiple of the peak of all
/// threads' live bytes together, on the standard workloads by up to 16 threads (the scaling
/// target: throughput × 8 from 1 to 16 threads within this bound).
pub const HELD_BOUND: f64 = 1.25;

/// How a many-threads benchmark runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadsConfig {
    /// Threads replaying the workload at once (at least 1).
    pub threads: usize,
    /// All threads on the default stream (`true`) or each on a stream of its own.
    pub shared_stream: bool,
    /// Timed rounds; the median is reported.
    pub timed_passes: usize,
    /// Whether to run the round that measures memory held (one `mem_get_info` per allocation).
    pub measure_held: bool,
    /// Each thread replays its list as many times as it takes to reach this many operations
    /// per timed round (at least once), so that thread start-up and scheduling noise do not
    /// count.
    pub min_ops_per_round: usize,
    /// The measuring round reads free memory after every this-many allocations of a thread
    /// (1: every one; the peers' harness reads every 16th on W3, whose million operations
    /// would otherwise spend most of the round in `cuMemGetInfo`).
    pub held_poll_every: usize,
}

impl Default for ThreadsConfig {
    /// One thread on its own stream, three timed rounds of at least a million operations per
    /// thread, memory held measured after every allocation.
    fn default() -> Self {
        ThreadsConfig {
            threads: 1,
            shared_stream: false,
            timed_passes: 3,
            measure_held: true,
            min_ops_per_round: 1_000_000,
            held_poll_every: 1,
        }
    }
}

/// One (resource, workload, threads, streams) measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadsResult {
    /// The resource's label.
    pub resource: String,
    /// The workload's name.
    pub workload: String,
    /// Threads at once.
    pub threads: usize,
    /// Whether the threads shared the default stream.
    pub shared_stream: bool,
    /// Operations of all threads in one timed round (each thread replays its list
    /// [`repeats`] times).
    pub ops: usize,
    /// Operations per second of the median round, all threads together.
    pub ops_per_s: f64,
    /// Peak bytes held from the device over the measuring round (0 when not measured).
    pub peak_held_bytes: u64,
    /// Peak bytes live, all threads together, over the measuring round (0 when not measured).
    pub peak_live_bytes: u64,
    /// Operations of all threads over every timed round together (what the counts below are
    /// over).
    pub timed_ops: usize,
    /// The resource's driver calls over the timed rounds ([`run_counting`]; `None` from [`run`]).
    pub driver_calls: Option<CallCounts>,
    /// The resource's chunk moves over the timed rounds
    /// ([`DeviceMemoryResource::chunk_moves`]; `None` when it does not count them).
    pub chunk_moves: Option<u64>,
}

impl ThreadsResult {
    /// Held at peak over peak live (0 when not measured).
    pub fn held_over_live(&self) -> f64 {
        if self.peak_live_bytes == 0 {
            return 0.0;
        }
        self.peak_held_bytes as f64 / self.peak_live_bytes as f64
    }

    /// Whether memory held stayed within [`HELD_BOUND`] × peak live (`true` when not measured).
    pub fn within_held_bound(&self) -> bool {
        self.held_over_live() <= HELD_BOUND
    }

    /// Driver calls per 1 000 operations over the timed rounds, all classes together.
    pub fn driver_calls_per_kop(&self) -> Option<f64> {
        self.driver_calls.map(|c| self.per_kop(c.total()))
    }

    /// Chunk moves per 1 000 operations over the timed rounds.
    pub fn chunk_moves_per_kop(&self) -> Option<f64> {
        self.chunk_moves.map(|c| self.per_kop(c))
    }

    /// `n` per 1 000 operations of the timed rounds.
    pub fn per_kop(&self, n: u64) -> f64 {
        n as f64 * 1000.0 / self.timed_ops.max(1) as f64
    }

    /// One JSON object on one line: `resource`, `workload`, `threads`, `stream` (`own` or
    /// `shared`), `ops`, `ops_per_s`, `peak_held_bytes`, `peak_live_bytes`, and where counted
    /// `timed_ops`, `driver_calls` (`memory`, `ordering`, `other`) and `chunk_moves`.
    pub fn to_json(&self) -> String {
        let mut counts = String::new();
        if self.driver_calls.is_some() || self.chunk_moves.is_some() {
            counts += &format!(",\"timed_ops\":{}", self.timed_ops);
        }
        if let Some(c) = self.driver_calls {
            counts += &format!(
                ",\"driver_calls\":{{\"memory\":{},\"ordering\":{},\"other\":{}}}",
                c.memory, c.ordering, c.other
            );
        }
        if let Some(n) = self.chunk_moves {
            counts += &format!(",\"chunk_moves\":{n}");
        }
        format!(
            "{{\"resource\":\"{}\",\"workload\":\"{}\",\"threads\":{},\"stream\":\"{}\",\"ops\":{},\"ops_per_s\":{:.0},\"peak_held_bytes\":{},\"peak_live_bytes\":{}{counts}}}",
            self.resource.replace(['"', '\\'], "_"),
            self.workload.replace(['"', '\\'], "_"),
            self.threads,
            if self.shared_stream { "shared" } else { "own" },
            self.ops,
            self.ops_per_s,
            self.peak_held_bytes,
            self.peak_live_bytes
        )
    }
}

/// What the measuring round counts, shared by the threads.
struct Meter<'a> {
    driver: &'a dyn Driver,
    free_before: u64,
    live: AtomicU64,
    peak_live: AtomicU64,
    peak_held: AtomicU64,
    poll_every: usize,
}

/// The threads of a run: one per stream, each replaying `workload`.
#[derive(Clone, Copy)]
struct Team<'a> {
    driver: &'a dyn Driver,
    workload: &'a Workload,
    streams: &'a [StreamId],
}

/// What one thread did in a round: when it started and ended, or its error.
type Span = Mutex<Option<MrResult<(Instant, Instant)>>>;

/// Runs `rounds` rounds with one team of threads, one per stream, that lives through all of
/// them (as a thread pool would: per-thread caches stay warm from one round to the next).
/// In each round every thread replays `workload` `repeat` times (once when metered),
/// starting together. Returns each round's wall time from the first thread's start to the
/// last thread's end plus a context synchronize, in nanoseconds. `before_round(k)` runs on
/// the calling thread before round `k` starts, while every worker waits.
fn rounds<R: DeviceMemoryResource>(
    team: &Team<'_>,
    resource: &R,
    meter: Option<&Meter<'_>>,
    repeat: usize,
    rounds: usize,
    before_round: &mut dyn FnMut(usize),
) -> MrResult<Vec<f64>> {
    let Team {
        driver,
        workload,
        streams,
    } = *team;
    let ctx = driver.current_context()?;
    // The workers and this thread: a round starts when all have reached `start`, and is over
    // when all have reached `end`.
    let (start, end) = (
        Barrier::new(streams.len() + 1),
        Barrier::new(streams.len() + 1),
    );
    let spans: Vec<Span> = streams.iter().map(|_| Mutex::new(None)).collect();
    let repeat = if meter.is_some() { 1 } else { repeat };
    std::thread::scope(|scope| {
        for (&stream, span) in streams.iter().zip(&spans) {
            let (start, end) = (&start, &end);
            scope.spawn(move || {
                // A new thread has no current context (cuCtxSetCurrent is per thread).
                let set = driver.set_current_context(ctx);
                for _ in 0..rounds {
                    start.wait();
                    // Each thread times itself: the round runs from the first start to the
                    // last end, which a busy machine cannot shorten by descheduling this one.
                    let t0 = Instant::now();
                    let work = || -> MrResult<(Instant, Instant)> {
                        set.clone()?;
                        (0..repeat)
                            .try_for_each(|_| replay_metered(resource, workload, stream, meter))?;
                        Ok((t0, Instant::now()))
                    };
                    // A panic must not leave the others waiting at the barrier.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                        .unwrap_or_else(|_| {
                            Err(MrError::InvalidArgument {
                                resource: resource.name(),
                                reason: "a benchmark thread panicked".to_string(),
                            })
                        });
                    *span.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                    end.wait();
                }
            });
        }
        let mut times = Vec::with_capacity(rounds);
        let mut first_err = None;
        for k in 0..rounds {
            before_round(k);
            start.wait();
            end.wait();
            let mut first = None::<Instant>;
            let mut last = None::<Instant>;
            for span in &spans {
                match span.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    Some(Ok((a, b))) => {
                        first = Some(first.map_or(a, |f| f.min(a)));
                        last = Some(last.map_or(b, |l| l.max(b)));
                    }
                    Some(Err(e)) => {
                        first_err.get_or_insert(e);
                    }
                    None => {}
                }
            }
            let sync = Instant::now();
            if let Err(e) = driver.context_synchronize() {
                first_err.get_or_insert(e.into());
            }
            let sync = sync.elapsed();
            let wall = match (first, last) {
                (Some(f), Some(l)) => l.saturating_duration_since(f),
                _ => std::time::Duration::ZERO,
            };
            times.push((wall + sync).as_nanos() as f64);
        }
        first_err.map_or(Ok(times), Err)
    })
}

/// How many times each thread replays `workload` in a timed round of `config`.
pub fn repeats(workload: &Workload, config: &ThreadsConfig) -> usize {
    (config.min_ops_per_round / workload.ops.len().max(1)).max(1)
}

fn replay_metered<R: DeviceMemoryResource>(
    resource: &R,
    workload: &Workload,
    stream: StreamId,
    meter: Option<&Meter<'_>>,
) -> MrResult<()> {
    let Some(m) = meter else {
        return replay_once(resource, workload, stream, || Ok(()));
    };
    let mut free_err = None;
    let mut allocations = 0usize;
    workloads::replay(
        workload,
        |size| {
            let n = usize::try_from(size).map_err(|_| MrError::OutOfMemory {
                resource: resource.name(),
                requested: size,
                available: None,
            })?;
            let p = resource.allocate(n, stream)?;
            // Counted once the resource handed the memory out, so live never runs ahead.
            let live = m.live.fetch_add(size, Ordering::Relaxed) + size;
            m.peak_live.fetch_max(live, Ordering::Relaxed);
            allocations += 1;
            if !allocations.is_multiple_of(m.poll_every) {
                return Ok::<_, MrError>((p, n));
            }
            match m.driver.mem_get_info() {
                Ok(info) => {
                    let held = m.free_before.saturating_sub(info.free);
                    m.peak_held.fetch_max(held, Ordering::Relaxed);
                    Ok::<_, MrError>((p, n))
                }
                Err(e) => {
                    m.live.fetch_sub(size, Ordering::Relaxed);
                    let _ = resource.deallocate(p, n, stream);
                    Err(e.into())
                }
            }
        },
        |(p, n): (DevicePtr, usize), size| {
            m.live.fetch_sub(size, Ordering::Relaxed);
            if let Err(e) = resource.deallocate(p, n, stream) {
                free_err.get_or_insert(e);
            }
        },
    )?;
    free_err.map_or(Ok(()), Err)
}

/// Builds a resource with `build`, measures the throughput of `workload` replayed by
/// `config.threads` threads at once, then builds a fresh one for the round that measures
/// memory held (see the module doc).
///
/// # Errors
///
/// A driver error (reading free memory, creating streams, synchronizing), or the first error
/// of the resource in any thread.
pub fn run<R: DeviceMemoryResource>(
    driver: &dyn Driver,
    build: impl Fn() -> MrResult<R>,
    label: &str,
    workload: &Workload,
    config: &ThreadsConfig,
) -> MrResult<ThreadsResult> {
    run_with(driver, build, None, label, workload, config)
}

/// As [`run`], with the resource built by `build` over a [`CountingDriver`] around `driver`
/// (the harness's own calls go to `driver` and are not counted), and its driver calls over
/// the timed rounds in [`ThreadsResult::driver_calls`].
///
/// # Errors
///
/// As [`run`].
pub fn run_counting<R: DeviceMemoryResource>(
    driver: Arc<dyn Driver>,
    build: impl Fn(Arc<dyn Driver>) -> MrResult<R>,
    label: &str,
    workload: &Workload,
    config: &ThreadsConfig,
) -> MrResult<ThreadsResult> {
    let counting = Arc::new(CountingDriver::new(Arc::clone(&driver)));
    let over: Arc<dyn Driver> = counting.clone();
    let calls = || counting.counts();
    run_with(
        &*driver,
        || build(Arc::clone(&over)),
        Some(&calls),
        label,
        workload,
        config,
    )
}

fn run_with<R: DeviceMemoryResource>(
    driver: &dyn Driver,
    build: impl Fn() -> MrResult<R>,
    calls: Option<&dyn Fn() -> CallCounts>,
    label: &str,
    workload: &Workload,
    config: &ThreadsConfig,
) -> MrResult<ThreadsResult> {
    let threads = config.threads.max(1);
    let mut streams = Vec::with_capacity(threads);
    for _ in 0..threads {
        streams.push(if config.shared_stream {
            StreamId::DEFAULT
        } else {
            driver.stream_create(true)?
        });
    }
    let result = (|| {
        let resource = build()?;
        let repeat = repeats(workload, config);
        // One team of threads for the warm-up and the timed rounds; the counts start after
        // the warm-up (read when every thread is waiting for the next round).
        let passes = config.timed_passes.max(1);
        let mut before = None;
        let mut snapshot = |k: usize| {
            if k == 1 {
                before = Some((calls.map(|c| c()), resource.chunk_moves()));
            }
        };
        let team = Team {
            driver,
            workload,
            streams: &streams,
        };
        let mut times = rounds(&team, &resource, None, repeat, 1 + passes, &mut snapshot)?;
        times.remove(0);
        let (calls_before, shared_before) = before.unwrap_or((None, None));
        let driver_calls = calls.zip(calls_before).map(|(c, b)| c().since(&b));
        let chunk_moves = resource
            .chunk_moves()
            .zip(shared_before)
            .map(|(a, b)| a.saturating_sub(b));
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let ops = workload.ops.len() * threads * repeat;
        drop(resource);
        let (mut peak_held, mut peak_live) = (0, 0);
        if config.measure_held {
            // A fresh resource: what it holds then comes from this round alone, whose peak
            // live is measured (a resource that served earlier rounds still holds for their
            // peaks, which a round in another interleaving of the threads may not reach).
            driver.context_synchronize()?;
            let free_before = driver.mem_get_info()?.free;
            let resource = build()?;
            let meter = Meter {
                driver,
                free_before,
                live: AtomicU64::new(0),
                peak_live: AtomicU64::new(0),
                peak_held: AtomicU64::new(0),
                poll_every: config.held_poll_every.max(1),
            };
            rounds(&team, &resource, Some(&meter), 1, 1, &mut |_| {})?;
            peak_held = meter.peak_held.load(Ordering::Relaxed);
            peak_live = meter.peak_live.load(Ordering::Relaxed);
        }
        Ok(ThreadsResult {
            resource: label.to_string(),
            workload: workload.name.clone(),
            threads,
            shared_stream: config.shared_stream,
            ops,
            ops_per_s: ops as f64 / (median.max(1.0) / 1e9),
            peak_held_bytes: peak_held,
            peak_live_bytes: peak_live,
            timed_ops: ops * passes,
            driver_calls,
            chunk_moves,
        })
    })();
    if !config.shared_stream {
        for s in streams {
            let _ = driver.stream_destroy(s);
        }
    }
    result
}
