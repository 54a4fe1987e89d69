//! `ShardedPoolResource` beyond the generic suite: threads on their own shards without driver
//! calls, frees from another thread, memory a thread stops using reaching another thread,
//! the cross-stream rule inside a shard, and memory held under many threads (measured by the
//! many-threads benchmark in emm-bench's tests, `sharded_pool.rs`).

use crate::common::two_streams;

use std::sync::{Arc, Barrier};

use emm_core::mr::sharded_pool::SHARD_CHUNK;
use emm_core::mr::{
    Backing, CudaResource, DeviceMemoryResource, PoolOptions, PoolResource, ShardedPoolResource,
};
use emm_core::workloads::{self, Workload};
use emm_core::{DeviceId, DevicePtr, Driver, StreamId};
use emm_sim::{CallKind, SimConfig, SimDriver, GIB, MIB};

type Sharded = ShardedPoolResource<CudaResource<SimDriver>>;

/// The many-threads benchmark's bound on memory held over peak live (emm-bench's
/// `threads::HELD_BOUND`), which the sharded pool is built to keep.
const HELD_BOUND: f64 = 1.25;

fn gpu(memory: u64) -> Arc<SimDriver> {
    Arc::new(SimDriver::new(SimConfig::new(7).memory_per_device(memory)).expect("config"))
}

fn sharded(g: &Arc<SimDriver>, shards: usize) -> Sharded {
    ShardedPoolResource::over(PoolResource::new(CudaResource::new(Arc::clone(g))), shards)
}

/// Runs `f` on a new thread with the driver's current context set, as a worker thread would.
fn on_thread<T: Send>(g: &SimDriver, f: impl FnOnce() -> T + Send) -> T {
    let ctx = g.current_context().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            g.set_current_context(ctx).unwrap();
            f()
        })
        .join()
        .unwrap()
    })
}

/// Waits for the device, checks the simulator saw no race or use after free, runs `then`
/// (e.g. a release), and destroys `streams`.
fn end_clean(g: &SimDriver, streams: [StreamId; 2], then: impl FnOnce()) {
    g.context_synchronize().unwrap();
    assert!(g.report().violations.is_empty(), "{:?}", g.report());
    then();
    for s in streams {
        g.stream_destroy(s).unwrap();
    }
}

#[test]
fn shard_counts_round_up_to_powers_of_two() {
    let g = gpu(GIB);
    assert_eq!(sharded(&g, 0).shards(), 1);
    assert_eq!(sharded(&g, 3).shards(), 4);
    assert_eq!(sharded(&g, 16).shards(), 16);
    let r: Sharded = ShardedPoolResource::new(CudaResource::new(Arc::clone(&g)));
    assert!(r.shards() >= 4);
}

#[test]
fn warm_threads_allocate_without_driver_calls_or_the_shared_pool() {
    let g = gpu(4 * GIB);
    let r = sharded(&g, 8);
    let threads = 4;
    let barrier = Barrier::new(threads);
    let ctx = g.current_context().unwrap();
    // Warm: every thread grows its shard once.
    let churn = |rounds: usize| {
        for k in 0..rounds {
            let n = 1 + (k * 7919) % (1 << 20);
            let p = r.allocate(n, StreamId::DEFAULT).unwrap();
            r.deallocate(p, n, StreamId::DEFAULT).unwrap();
        }
    };
    let run = |rounds: usize| {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    g.set_current_context(ctx).unwrap();
                    barrier.wait();
                    churn(rounds);
                });
            }
        })
    };
    run(100);
    let (held, live) = r.shard_bytes();
    assert_eq!(live, 0);
    assert!(
        held <= threads as u64 * 2 * MIB,
        "each shard keeps one spare chunk: {held}"
    );
    let before = g.call_count();
    // New threads get new shards (thread numbers go on), which take one chunk each.
    run(5_000);
    let taken = g.call_count() - before;
    // Each new thread sets its context (one call), and its new shard's one chunk grows the
    // shared pool's segment by a granule (four: cuCtxGetCurrent, cuMemCreate, cuMemMap,
    // cuMemSetAccess); the old shards' single chunks are no spare to take.
    assert!(
        taken <= 5 * threads as u64,
        "{taken} driver calls for 20 000 operations"
    );
    // Each of the 8 shards keeps one chunk (2 MiB: the largest request is 1 MiB).
    assert!(
        r.shard_bytes().0 <= 8 * SHARD_CHUNK,
        "{:?}",
        r.shard_bytes()
    );
    assert!(r.shared().live_allocations() <= 8);
}

#[test]
fn a_free_from_another_thread_finds_the_owning_shard() {
    let g = gpu(GIB);
    let r = sharded(&g, 4);
    let s = StreamId::DEFAULT;
    let p = r.allocate(5000, s).unwrap();
    on_thread(&g, || r.deallocate(p, 5000, s)).unwrap();
    // The block is back: freeing it again anywhere is refused, and nothing is live.
    assert!(r.deallocate(p, 5000, s).is_err());
    assert!(on_thread(&g, || r.deallocate(p, 5000, s)).is_err());
    assert_eq!(r.shard_bytes().1, 0);
    let q = on_thread(&g, || r.allocate(300, s)).unwrap();
    assert!(r.deallocate(q, 299, s).is_err(), "wrong size refused");
    r.deallocate(q, 300, s).unwrap();
}

#[test]
fn memory_one_thread_stops_using_serves_another() {
    // 1 GiB device: a thread fills 700 MiB and frees it; another thread then needs 700 MiB.
    let g = gpu(GIB);
    let r = sharded(&g, 4);
    let s = StreamId::DEFAULT;
    let fill = || {
        let ps: Vec<_> = (0..350).map(|_| r.allocate(2 << 20, s).unwrap()).collect();
        for p in ps {
            r.deallocate(p, 2 << 20, s).unwrap();
        }
    };
    on_thread(&g, fill);
    on_thread(&g, fill);
    let (held, live) = r.shard_bytes();
    assert_eq!(live, 0);
    // The first thread's shard kept its 700 MiB when it freed them (its recent peak); the
    // second thread's growth took from the shared pool while it held at most 1.20 × the
    // peak of live bytes, then took the first shard's chunks (two fills would not fit in
    // 1 GiB), so the shards hold one fill and the budget's margin, not two fills, and the
    // device holds no more.
    let bound = 700 * MIB + 700 * MIB / 5;
    assert!(
        held <= bound,
        "the shards kept {held} bytes, more than {bound}"
    );
    assert!(g.device_memory_used(DeviceId(0)) <= bound);
    // A large request is served by the thread's shard too.
    let big = r.allocate(64 << 20, s).unwrap();
    assert_eq!(r.shard_bytes().1, 64 << 20, "in a shard");
    r.deallocate(big, 64 << 20, s).unwrap();
    r.release().unwrap();
    assert_eq!(
        g.device_memory_used(DeviceId(0)),
        0,
        "release gives all back"
    );
}

#[test]
fn memory_freed_on_another_stream_is_reused_only_after_an_event() {
    let g = gpu(GIB);
    let r = sharded(&g, 1);
    let (a, b) = two_streams(&g);
    let p = r.allocate(1 << 20, a).unwrap();
    g.device_access(p, 1 << 20, a, true).unwrap();
    r.deallocate(p, 1 << 20, a).unwrap();
    let waits = |g: &SimDriver| {
        g.trace()
            .iter()
            .filter(|e| e.call == CallKind::StreamWaitEvent)
            .count()
    };
    let before = waits(&g);
    // Nothing else fits on b: the shard takes a's block after ordering b after a.
    let q = r.allocate(1 << 20, b).unwrap();
    if q == p {
        assert_eq!(
            waits(&g),
            before + 1,
            "b waits on a before reusing a's block"
        );
    }
    g.device_access(q, 1 << 20, b, true).unwrap();
    r.deallocate(q, 1 << 20, b).unwrap();
    end_clean(&g, [a, b], || {});
}

#[test]
fn a_thread_replaying_its_list_again_takes_nothing_from_the_shared_pool() {
    // Each pass rises to its peak and frees everything at the end, as a training step does:
    // the shard keeps what it freed, so the second pass neither locks the shared pool nor
    // calls the driver.
    let g = gpu(4 * GIB);
    let r = sharded(&g, 4);
    let w = workloads::w1_shaped(20_000);
    let pass = || crate::common::replay(&r, &w).unwrap();
    pass();
    let (calls, moves) = (g.call_count(), r.chunk_moves().unwrap());
    assert!(moves > 0, "the first pass grew the shard");
    pass();
    assert_eq!(g.call_count(), calls, "no driver call in the second pass");
    assert_eq!(r.chunk_moves(), Some(moves), "no chunk moved");
    // Held stays bounded by the pool's own rule (1.05 × live plus a chunk at each growth).
    let peak = w.summary().peak_live_bytes;
    assert!(
        r.shard_bytes().0 as f64 <= 1.25 * peak as f64,
        "{:?}",
        r.shard_bytes()
    );
}

/// Stream-ordering calls in the trace: event records and waits.
fn ordering_calls(g: &SimDriver) -> usize {
    g.trace()
        .iter()
        .filter(|e| matches!(e.call, CallKind::EventRecord | CallKind::StreamWaitEvent))
        .count()
}

#[test]
fn a_second_steal_of_chunks_freed_before_the_first_needs_no_new_event() {
    // One thread fills 64 chunks on stream a and frees them; another, on stream b, takes them
    // in batches. The first batch orders b after a (an event recorded on a after every free);
    // the later batches were freed before that record, so they need no event of their own.
    let g = gpu(GIB);
    let r = sharded(&g, 4);
    let (a, b) = two_streams(&g);
    on_thread(&g, || {
        let ps: Vec<_> = (0..64).map(|_| r.allocate(1 << 20, a).unwrap()).collect();
        for p in ps {
            g.device_access(p, 1 << 20, a, true).unwrap();
            r.deallocate(p, 1 << 20, a).unwrap();
        }
    });
    let (before, moves) = (ordering_calls(&g), r.chunk_moves().unwrap());
    let qs = on_thread(&g, || {
        let qs: Vec<_> = (0..32).map(|_| r.allocate(1 << 20, b).unwrap()).collect();
        for &q in &qs {
            g.device_access(q, 1 << 20, b, true).unwrap();
        }
        qs
    });
    let steals = r.chunk_moves().unwrap() - moves;
    assert!(steals >= 2, "{steals} moves: the 32 MiB came in batches");
    assert_eq!(
        ordering_calls(&g) - before,
        2,
        "one record and one wait for {steals} batches"
    );
    g.context_synchronize().unwrap();
    assert!(g.report().violations.is_empty(), "{:?}", g.report());
    for q in qs {
        r.deallocate(q, 1 << 20, b).unwrap();
    }
    // A chunk freed on a after that record still needs one.
    let p = on_thread(&g, || r.allocate(1 << 20, a)).unwrap();
    g.device_access(p, 1 << 20, a, true).unwrap();
    r.deallocate(p, 1 << 20, a).unwrap();
    end_clean(&g, [a, b], || {
        r.release().unwrap();
    });
}

#[test]
fn a_chunk_made_wholly_free_by_adopting_another_stream_serves_another_thread() {
    // Two 1 MiB chunks, each a 256 KiB block freed on a and a 768 KiB block freed on b: no
    // chunk is wholly free. A 700 KiB request on a adopts b's blocks, which makes both chunks
    // wholly free and uses one; the other must be found by the next thread's growth, not
    // left out of sight until `release`.
    let g = gpu(GIB);
    let r = sharded(&g, 4);
    let (a, b) = two_streams(&g);
    let (small, large) = (256 << 10, 768 << 10);
    let (p1, q1, p2, q2) = (
        r.allocate(small, a).unwrap(),
        r.allocate(large, a).unwrap(),
        r.allocate(small, a).unwrap(),
        r.allocate(large, a).unwrap(),
    );
    assert_eq!((q1.0 - p1.0, q2.0 - p2.0), (small as u64, small as u64));
    for q in [q1, q2] {
        r.deallocate(q, large, b).unwrap();
    }
    for p in [p1, p2] {
        r.deallocate(p, small, a).unwrap();
    }
    let used = r.allocate(700 << 10, a).unwrap();
    let other = if used == p1 { p2 } else { p1 };
    assert!(used == p1 || used == p2, "served from an adopted chunk");
    let held = g.device_memory_used(DeviceId(0));
    // Another thread, on stream a: the wholly free chunk moves to its shard.
    let taken = on_thread(&g, || r.allocate(1 << 20, a)).unwrap();
    assert_eq!(taken, other, "the chunk the adoption freed");
    assert_eq!(g.device_memory_used(DeviceId(0)), held, "no new memory");
    r.deallocate(taken, 1 << 20, a).unwrap();
    r.deallocate(used, 700 << 10, a).unwrap();
    end_clean(&g, [a, b], || {
        r.release().unwrap();
    });
}

#[test]
fn w1_shaped_lists_out_of_step_move_few_chunks_and_hold_a_quarter_above_peak_live() {
    // Threads out of step at their most: each replays its own W1-shaped random walk (its own
    // seed) on its own stream, so memory must flow from threads whose live bytes fall to
    // threads whose live bytes climb. Moves stay rare (growth takes up to 1/64 of live at
    // once, steals up to 1/8, and a shard keeps its recent peak while memory held allows)
    // and held stays within the bound the bench checks.
    use std::sync::atomic::{AtomicU64, Ordering};
    let threads = 4u64;
    let g = SimDriver::new(
        SimConfig::new(13)
            .memory_per_device(16 * GIB)
            .track_contents(false)
            .record_trace(false),
    )
    .unwrap();
    let r = sharded(&Arc::new(g.clone()), 8);
    let lists: Vec<Workload> = (0..threads)
        .map(|k| {
            Workload::new(
                "w1-shaped",
                emm_core::workloads::random_walk(0xA11C_0001 + k, 20_000, 1 << 20, 8 * GIB),
            )
        })
        .collect();
    let (live, peak_live, peak_held) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let ctx = g.current_context().unwrap();
    let barrier = Barrier::new(threads as usize);
    // One pass to grow the shards, then two counted, as the bench counts its timed rounds.
    let counted: u64 = 2 * lists.iter().map(|w| w.ops.len() as u64).sum::<u64>();
    let warm_moves = AtomicU64::new(0);
    std::thread::scope(|s| {
        for (k, w) in lists.iter().enumerate() {
            let (g, r, live, peak_live, peak_held, barrier, warm_moves) =
                (&g, &r, &live, &peak_live, &peak_held, &barrier, &warm_moves);
            s.spawn(move || {
                g.set_current_context(ctx).unwrap();
                let stream = g.stream_create(true).unwrap();
                barrier.wait();
                for pass in 0..3 {
                    if pass == 1 {
                        barrier.wait();
                        if k == 0 {
                            warm_moves.store(r.chunk_moves().unwrap(), Ordering::Relaxed);
                        }
                        barrier.wait();
                    }
                    emm_core::workloads::replay(
                        w,
                        |size| {
                            let p = r.allocate(size as usize, stream)?;
                            let now = live.fetch_add(size, Ordering::Relaxed) + size;
                            peak_live.fetch_max(now, Ordering::Relaxed);
                            peak_held
                                .fetch_max(g.device_memory_used(DeviceId(0)), Ordering::Relaxed);
                            Ok::<_, emm_core::mr::MrError>((p, size))
                        },
                        |(p, size): (emm_core::DevicePtr, u64), _| {
                            live.fetch_sub(size, Ordering::Relaxed);
                            r.deallocate(p, size as usize, stream).unwrap()
                        },
                    )
                    .unwrap();
                }
                g.context_synchronize().unwrap();
                g.stream_destroy(stream).unwrap();
            });
        }
    });
    let moved = r.chunk_moves().unwrap() - warm_moves.into_inner();
    let moves = moved as f64 * 1000.0 / counted as f64;
    let held = peak_held.into_inner() as f64 / peak_live.into_inner() as f64;
    // Measured on 2 cores here: 0.15–1.3 moves per 1 000 operations with held 1.14–1.18
    // (0.4–1.7 and 1.13–1.18 before growth took more than 1 MiB at once and shards kept
    // their recent peaks); a thread in step with its list moves nothing (the test above).
    assert!(moves <= 3.0, "{moves:.2} chunk moves per 1 000 operations");
    assert!(held <= HELD_BOUND, "held {held:.3} × peak live");
}

/// A sharded pool over a shared pool of `cuMemAlloc` chunks, as `emm bench` builds `sharded`.
fn sharded_chunks(g: &Arc<SimDriver>, shards: usize) -> Arc<Sharded> {
    let up = CudaResource::<SimDriver>::new(Arc::clone(g));
    let shared =
        PoolResource::with_options(up, PoolOptions::default().backing(Backing::Chunks)).unwrap();
    Arc::new(ShardedPoolResource::over(shared, shards))
}

type Job = Box<dyn FnOnce() + Send>;

/// A thread that keeps its shard from one job to the next: runs each job it is given, in
/// order, and waits for it.
struct Worker {
    jobs: Option<std::sync::mpsc::Sender<Job>>,
    done: std::sync::mpsc::Receiver<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn new(g: &SimDriver) -> Self {
        let ctx = g.current_context().unwrap();
        let g = g.clone();
        let (jobs, rx) = std::sync::mpsc::channel::<Job>();
        let (tx, done) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            g.set_current_context(ctx).unwrap();
            for job in rx {
                job();
                tx.send(()).unwrap();
            }
        });
        Worker {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        }
    }

    fn run(&self, job: impl FnOnce() + Send + 'static) {
        self.jobs.as_ref().unwrap().send(Box::new(job)).unwrap();
        self.done.recv().expect("the job panicked");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Allocates `n` blocks of 1 MiB on the default stream.
fn take_mib(r: &Sharded, n: usize) -> Vec<emm_core::DevicePtr> {
    (0..n)
        .map(|_| r.allocate(1 << 20, StreamId::DEFAULT).unwrap())
        .collect()
}

fn free_mib(r: &Sharded, ps: Vec<emm_core::DevicePtr>) {
    for p in ps {
        r.deallocate(p, 1 << 20, StreamId::DEFAULT).unwrap();
    }
}

#[test]
fn a_grower_beyond_the_budget_takes_from_the_shard_with_the_most_to_spare() {
    let g = gpu(GIB);
    let r = sharded_chunks(&g, 4);
    let (a, b, c) = (Worker::new(&g), Worker::new(&g), Worker::new(&g));
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    // A (shard 0) and B (shard 1) peak together at 20 + 60 MiB, then free it all: both keep
    // their chunks (1 MiB each), their recent peaks.
    let (ra, rb, rc) = (r.clone(), r.clone(), r.clone());
    let ha = held.clone();
    a.run(move || *ha.lock().unwrap() = take_mib(&ra, 20));
    let hb = held.clone();
    b.run(move || hb.lock().unwrap().extend(take_mib(&rb, 60)));
    let (ra, ha) = (r.clone(), held.clone());
    a.run(move || free_mib(&ra, ha.lock().unwrap().drain(..20).collect()));
    let (rb, hb) = (r.clone(), held.clone());
    b.run(move || free_mib(&rb, hb.lock().unwrap().drain(..).collect()));
    // C climbs to 20 MiB: the shared pool grows to 1.20 × the 80 MiB peak, then C must take
    // spare chunks beyond the others' live bytes — from B, which has the most.
    let hc = held.clone();
    c.run(move || hc.lock().unwrap().extend(take_mib(&rc, 20)));
    assert!(
        g.device_memory_used(DeviceId(0)) <= 97 * MIB,
        "within the budget"
    );
    // A climbs back to its peak from its own shard: nothing moves.
    let moves = r.chunk_moves().unwrap();
    let ra = r.clone();
    a.run(move || free_mib(&ra.clone(), take_mib(&ra, 20)));
    assert_eq!(
        r.chunk_moves().unwrap(),
        moves,
        "A's chunks stayed with A: C took B's"
    );
    let rc = r.clone();
    c.run(move || free_mib(&rc, held.lock().unwrap().drain(..).collect()));
}

#[test]
fn a_shard_keeps_its_peak_over_thousands_of_allocations_below_it() {
    let g = gpu(GIB);
    let r = sharded_chunks(&g, 4);
    let (a, b) = (Worker::new(&g), Worker::new(&g));
    // A climbs to 40 MiB, falls back to 1 MiB, and allocates small blocks 5 000 times.
    let ra = r.clone();
    a.run(move || {
        let mut ps = take_mib(&ra, 40);
        free_mib(&ra, ps.split_off(1));
        for _ in 0..5_000 {
            let p = ra.allocate(256, StreamId::DEFAULT).unwrap();
            ra.deallocate(p, 256, StreamId::DEFAULT).unwrap();
        }
        free_mib(&ra, ps);
    });
    // B needs 4 MiB: within the budget, it takes them from the shared pool, not from A.
    let rb = r.clone();
    b.run(move || free_mib(&rb.clone(), take_mib(&rb, 4)));
    // A climbs back to 40 MiB from its own shard.
    let moves = r.chunk_moves().unwrap();
    let ra = r.clone();
    a.run(move || free_mib(&ra.clone(), take_mib(&ra, 40)));
    assert_eq!(r.chunk_moves().unwrap(), moves, "A kept its peak's chunks");
}

#[test]
fn a_growth_that_gives_chunks_back_takes_the_shared_pools_lock_once() {
    let g = gpu(GIB);
    let r = sharded_chunks(&g, 1);
    // 20 chunks of 1 MiB, all free; then one 64 MiB request, which none fits.
    free_mib(&r, take_mib(&r, 20));
    let moves = r.chunk_moves().unwrap();
    let p = r.allocate(64 << 20, StreamId::DEFAULT).unwrap();
    // The shard gave 16 chunks back (keeping 1.05 × live plus one chunk) and took one, in
    // one call to the shared pool.
    assert_eq!(r.chunk_moves().unwrap() - moves, 1);
    let (held, live) = r.shard_bytes();
    assert_eq!(live, 64 << 20);
    assert!(held <= 69 * MIB, "gave back what it did not keep: {held}");
    assert!(g.device_memory_used(DeviceId(0)) <= 69 * MIB);
    r.deallocate(p, 64 << 20, StreamId::DEFAULT).unwrap();
}

/// Twenty thousand streams in turn, each freeing the block the one before allocated (its first
/// use is a free) and allocating a larger one: the shard keeps lists for a bounded number of
/// streams (as `PoolResource` does), and each new stream costs what the one before did — an
/// adoption looks only at the blocks it moves, not at every chunk of the shard.
#[test]
fn per_stream_state_is_bounded_when_each_stream_frees_the_last_ones_block() {
    let g = Arc::new(
        SimDriver::new(
            SimConfig::new(7)
                .memory_per_device(8 * GIB)
                .track_races(false)
                .record_trace(false),
        )
        .expect("config"),
    );
    let p = sharded(&g, 1);
    let first = g.stream_create(false).unwrap();
    let mut prev: (StreamId, DevicePtr, usize) = (first, p.allocate(1000, first).unwrap(), 1000);
    let mut most = 0;
    let start = std::time::Instant::now();
    for k in 1..20_000usize {
        let s = g.stream_create(false).unwrap();
        let (was, ptr, n) = prev;
        p.deallocate(ptr, n, s).unwrap();
        g.stream_destroy(was).unwrap();
        let n = 1000 + (k % 5000) * 256;
        prev = (s, p.allocate(n, s).unwrap(), n);
        most = most.max(p.stream_lists());
    }
    let took = start.elapsed();
    assert!(most <= 160, "{most} streams' lists kept at once");
    let (held, live) = p.shard_bytes();
    assert!(
        live < 2 * MIB && held <= 96 * MIB,
        "held {held}, live {live}"
    );
    let (_, ptr, n) = prev;
    p.deallocate(ptr, n, prev.0).unwrap();
    p.release().unwrap();
    // Generous for a debug build on a loaded machine: the quadratic cost took 10 s here.
    assert!(took.as_secs_f64() < 8.0, "{took:?} for 20 000 streams");
}
