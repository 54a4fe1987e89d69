//! The sharded pool's slow-path counts on the simulated GPU with the H100 host's shard count:
//! driver calls by class (memory, ordering, other) and chunk moves per 1 000 operations of the
//! timed rounds, and memory held at peak over peak live, for W1, W2, W3 by 1 to 16 threads on
//! own and shared streams.
//!
//! `emm bench --threads` builds the sharded pool with twice this machine's hardware threads of
//! shards (4 on a 2-core machine, where 16 threads share them); this builds 32 (`--shards N`),
//! as on the 16-core H100 host. On 2 cores, free-running threads run in time slices of many
//! thousand operations and move far fewer chunks than threads on cores of their own; with
//! `--lockstep K` the threads wait at a barrier every K operations instead, and with `--drift
//! D` thread t of n runs K · (1 + D · t / (n − 1)) operations between barriers, so that the
//! fastest gains D on the slowest, as threads drift apart over a round on a real machine.
//! `--lockstep 64 --drift 0.3` gave counts near the H100's for the sharded pool of
//! 2026-11-24 (W1 by 16 threads on own streams: 4.8 driver calls and 1.7 moves per 1 000
//! operations here, 4.6 and 1.6 there).
//!
//! `cargo run --release -p emm-bench --example sharded_counts -- [--lockstep K [--drift D]]
//! [--shards N] [--threads 1,2,4,8,16] [--workload W1,W2,W3] [--streams own,shared]
//! [--round-ops N]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use emm_bench::threads::{self, ThreadsConfig};
use emm_core::driver::counting::{CallCounts, CountingDriver};
use emm_core::mr::{
    Backing, CudaResource, DeviceMemoryResource, MrResult, PoolOptions, PoolResource,
    ShardedPoolResource,
};
use emm_core::workloads::{self, Op, Workload};
use emm_core::{DevicePtr, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

type Counting = CountingDriver<Arc<dyn Driver>>;
type Sharded = ShardedPoolResource<CudaResource<Counting>>;

fn sim() -> Arc<dyn Driver> {
    let config = SimConfig::new(1)
        .memory_per_device(80 * GIB)
        .track_contents(false)
        .record_trace(false);
    Arc::new(SimDriver::new(config).expect("simulated GPU"))
}

fn sharded(driver: Arc<Counting>, shards: usize) -> MrResult<Sharded> {
    let cuda = CudaResource::<Counting>::new(driver);
    let pool = PoolResource::with_options(cuda, PoolOptions::default().backing(Backing::Chunks))?;
    Ok(ShardedPoolResource::over(pool, shards))
}

/// Lockstep rounds with one team of threads (so that each keeps its shard): in each, every
/// thread replays `w` `repeat` times, all waiting at a barrier every `k` operations;
/// `between(round)` runs on one thread before each round while the others wait. With `held`
/// (free memory before the resource was built), reads free memory after each allocation and
/// returns (peak held, peak live).
#[expect(clippy::too_many_arguments, reason = "an example's harness")]
fn lockstep(
    driver: &Arc<dyn Driver>,
    r: &Sharded,
    w: &Workload,
    streams: &[StreamId],
    k: usize,
    repeat: usize,
    rounds: usize,
    held: Option<u64>,
    drift: f64,
    between: &(dyn Fn(usize) + Sync),
) -> (u64, u64) {
    let ops: Vec<Op> = (0..repeat).flat_map(|_| w.ops.iter().copied()).collect();
    // Thread t runs k · (1 + drift · t / (n - 1)) operations a step: the fastest is `drift`
    // ahead of the slowest, as threads drift apart over a round on a real machine.
    let n = streams.len();
    let rate = |t: usize| k + (k as f64 * drift * t as f64 / (n.max(2) - 1) as f64) as usize;
    let steps = ops.len().div_ceil(k);
    let barrier = Barrier::new(streams.len());
    let (live, peak_live, peak_held) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let ctx = driver.current_context().expect("context");
    std::thread::scope(|s| {
        for (t, &stream) in streams.iter().enumerate() {
            let (ops, barrier, live, peak_live, peak_held) =
                (&ops, &barrier, &live, &peak_live, &peak_held);
            s.spawn(move || {
                driver.set_current_context(ctx).expect("context");
                let mut mine: Vec<(DevicePtr, u64)> = Vec::new();
                for round in 0..rounds {
                    if barrier.wait().is_leader() {
                        between(round);
                    }
                    barrier.wait();
                    for step in 0..steps {
                        let kt = rate(t);
                        for op in ops.iter().skip(step * kt).take(kt) {
                            match *op {
                                Op::Alloc(size) => {
                                    let p = r.allocate(size as usize, stream).expect("allocate");
                                    mine.push((p, size));
                                    if let Some(before) = held {
                                        let l = live.fetch_add(size, Ordering::Relaxed) + size;
                                        peak_live.fetch_max(l, Ordering::Relaxed);
                                        let free = driver.mem_get_info().expect("info").free;
                                        peak_held.fetch_max(before - free, Ordering::Relaxed);
                                    }
                                }
                                Op::Free(j) => {
                                    let (p, size) = mine.swap_remove(j);
                                    live.fetch_sub(size, Ordering::Relaxed);
                                    r.deallocate(p, size as usize, stream).expect("free");
                                }
                            }
                        }
                        barrier.wait();
                    }
                }
            });
        }
    });
    (
        peak_held.load(Ordering::Relaxed),
        peak_live.load(Ordering::Relaxed),
    )
}

struct Row {
    calls: CallCounts,
    moves: u64,
    ops: usize,
    held: u64,
    live: u64,
}

fn run_lockstep(
    w: &Workload,
    n: usize,
    shared: bool,
    (k, drift): (usize, f64),
    shards: usize,
    round_ops: usize,
) -> Row {
    let driver = sim();
    let streams: Vec<StreamId> = (0..n)
        .map(|_| {
            if shared {
                StreamId::DEFAULT
            } else {
                driver.stream_create(true).expect("stream")
            }
        })
        .collect();
    let repeat = (round_ops / w.ops.len()).max(1);
    let counting = Arc::new(CountingDriver::new(Arc::clone(&driver)));
    let r = sharded(Arc::clone(&counting), shards).expect("build");
    let passes = 3;
    let snap = std::sync::Mutex::new((counting.counts(), 0u64));
    lockstep(
        &driver,
        &r,
        w,
        &streams,
        k,
        repeat,
        1 + passes,
        None,
        drift,
        &|round| {
            if round == 1 {
                *snap.lock().unwrap() = (counting.counts(), r.chunk_moves().unwrap_or(0));
            }
        },
    );
    let (c0, m0) = *snap.lock().unwrap();
    let calls = counting.counts().since(&c0);
    let moves = r.chunk_moves().unwrap_or(0) - m0;
    drop(r);
    driver.context_synchronize().expect("sync");
    let before = driver.mem_get_info().expect("info").free;
    let counting = Arc::new(CountingDriver::new(Arc::clone(&driver)));
    let r = sharded(counting, shards).expect("build");
    let (held, live) = lockstep(
        &driver,
        &r,
        w,
        &streams,
        k,
        1,
        1,
        Some(before),
        drift,
        &|_| {},
    );
    Row {
        calls,
        moves,
        ops: w.ops.len() * repeat * n * passes,
        held,
        live,
    }
}

fn run_free(w: &Workload, n: usize, shared: bool, shards: usize, round_ops: usize) -> Row {
    let config = ThreadsConfig {
        threads: n,
        shared_stream: shared,
        timed_passes: 3,
        measure_held: true,
        min_ops_per_round: round_ops,
        held_poll_every: if w.name == "W3" { 16 } else { 1 },
    };
    let build = |d: Arc<dyn Driver>| sharded(Arc::new(CountingDriver::new(d)), shards);
    let r = threads::run_counting(sim(), build, "sharded", w, &config).expect("bench");
    Row {
        calls: r.driver_calls.unwrap_or_default(),
        moves: r.chunk_moves.unwrap_or(0),
        ops: r.timed_ops,
        held: r.peak_held_bytes,
        live: r.peak_live_bytes,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let list = |name: &str, default: &str| -> Vec<String> {
        arg(name)
            .unwrap_or_else(|| default.to_string())
            .split(',')
            .map(str::to_string)
            .collect()
    };
    let lockstep_k: Option<usize> = arg("--lockstep").and_then(|v| v.parse().ok());
    let drift: f64 = arg("--drift").and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let shards: usize = arg("--shards").and_then(|v| v.parse().ok()).unwrap_or(32);
    let round_ops: usize = arg("--round-ops")
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    println!(
        "{:<3} {:>3} {:<6} {:>9} {:>8} {:>8} {:>8} {:>9}",
        "wl", "thr", "stream", "held/live", "mem/kop", "ord/kop", "oth/kop", "moves/kop"
    );
    for name in list("--workload", "W1,W2,W3") {
        let w = workloads::by_name(&name).expect("workload");
        for streams in list("--streams", "own,shared") {
            let shared = streams == "shared";
            for n in list("--threads", "1,2,4,8,16") {
                let n: usize = n.parse().expect("threads");
                if w.summary().peak_live_bytes as f64 * n as f64 > 0.6 * (80 * GIB) as f64 {
                    continue;
                }
                let row = match lockstep_k {
                    Some(k) => run_lockstep(&w, n, shared, (k, drift), shards, round_ops),
                    None => run_free(&w, n, shared, shards, round_ops),
                };
                let per = |v: u64| v as f64 * 1000.0 / row.ops.max(1) as f64;
                println!(
                    "{:<3} {:>3} {:<6} {:>9.3} {:>8.3} {:>8.3} {:>8.3} {:>9.3}",
                    name,
                    n,
                    streams,
                    row.held as f64 / row.live.max(1) as f64,
                    per(row.calls.memory),
                    per(row.calls.ordering),
                    per(row.calls.other),
                    per(row.moves)
                );
            }
        }
    }
}
