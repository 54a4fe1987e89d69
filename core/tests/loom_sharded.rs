//! Model checks of the thread-safe resources with loom: `PoolResource` shared by threads on
//! several streams, `ShardedPoolResource` (per-thread
//! shards, each behind its own lock, over one shared `PoolResource`) and `ArenaResource` (the
//! same shape). Built only with `RUSTFLAGS="--cfg loom"`, which puts the resources' locks,
//! their shard counter and their thread-locals on loom's (core/src/sync.rs); loom then runs
//! each scenario under every interleaving of those, up to a bound on preemptions. Run with
//! `cargo xtask loom`.
//!
//! In every interleaving: no deadlock (loom reports one), no two live blocks overlap, every
//! block lies in a chunk the upstream has handed out and not taken back, every upstream chunk
//! comes back exactly once, the counters agree at the end, and after `release` with every
//! block freed nothing is held.

#![cfg(loom)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Instant;

use emm_core::mr::{
    ArenaResource, DeviceMemoryResource, MrError, MrResult, PoolResource, ShardedPoolResource,
};
use emm_core::{DevicePtr, Driver, MemInfo, StreamId};
use emm_sim::{SimConfig, SimDriver, MIB};

const S: StreamId = StreamId::DEFAULT;
const KIB: u64 = 1 << 10;

/// The default bound on preemptions per execution; `LOOM_MAX_PREEMPTIONS` overrides it.
const PREEMPTIONS: usize = 5;

/// Runs `f` under loom with the bound, and prints how many interleavings it explored.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    static RUNS: StdMutex<()> = StdMutex::new(());
    let count = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&count);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound.get_or_insert(PREEMPTIONS);
    let bound = builder.preemption_bound;
    let start = Instant::now();
    let f = Arc::new(f);
    builder.check(move || {
        counted.fetch_add(1, SeqCst);
        // On a thread of its own: loom's main thread keeps its small stack (see `STACK`).
        let f = Arc::clone(&f);
        loom::thread::Builder::new()
            .stack_size(STACK)
            .spawn(move || f())
            .expect("a modelled thread")
            .join()
            .expect("the scenario");
    });
    // One line per scenario, whole, however the harness runs them.
    let _one = RUNS.lock();
    println!(
        "loom {name}: {} interleavings, preemption bound {bound:?}, {:.2} s",
        count.load(SeqCst),
        start.elapsed().as_secs_f64()
    );
}

/// The upstream: hands out chunks at addresses never reused, up to `limit` bytes live at
/// once, and checks that every chunk comes back once, whole. Every call reaches it under the
/// shared pool's lock, so its own lock is never contended: a std lock, which loom does not
/// interleave, keeps the state space to the resources' own locks.
struct Upstream {
    driver: SimDriver,
    limit: u64,
    chunks: StdMutex<BTreeMap<u64, u64>>,
    next: StdMutex<u64>,
}

impl Upstream {
    fn new(limit: u64) -> Arc<Self> {
        Arc::new(Upstream {
            driver: SimDriver::new(SimConfig::new(1)).expect("simulator"),
            limit,
            chunks: StdMutex::new(BTreeMap::new()),
            next: StdMutex::new(1 << 32),
        })
    }

    /// Bytes handed out and not given back.
    fn used(&self) -> u64 {
        self.chunks.lock().unwrap().values().sum()
    }

    /// Whether `[p, p + n)` lies inside one chunk handed out and not given back.
    fn covers(&self, p: u64, n: u64) -> bool {
        let chunks = self.chunks.lock().unwrap();
        chunks
            .range(..=p)
            .next_back()
            .is_some_and(|(&base, &size)| p + n <= base + size)
    }
}

impl DeviceMemoryResource for Upstream {
    fn name(&self) -> &'static str {
        "Upstream"
    }

    fn allocate(&self, bytes: usize, _stream: StreamId) -> MrResult<DevicePtr> {
        let n = bytes as u64;
        let used = self.used();
        if used + n > self.limit {
            return Err(MrError::OutOfMemory {
                resource: "Upstream",
                requested: n,
                available: Some(self.limit - used),
            });
        }
        let mut next = self.next.lock().unwrap();
        let p = *next;
        *next += n.next_multiple_of(256);
        self.chunks.lock().unwrap().insert(p, n);
        Ok(DevicePtr(p))
    }

    fn deallocate(&self, ptr: DevicePtr, bytes: usize, _stream: StreamId) -> MrResult<()> {
        let back = self.chunks.lock().unwrap().remove(&ptr.0);
        assert_eq!(
            back,
            Some(bytes as u64),
            "upstream chunk {ptr} ({bytes} bytes) given back twice, or with another size"
        );
        Ok(())
    }

    fn memory_info(&self) -> Option<MemInfo> {
        let used = self.used();
        Some(MemInfo {
            free: self.limit - used,
            total: self.limit,
        })
    }

    fn driver(&self) -> &dyn Driver {
        &self.driver
    }
}

/// The blocks the resource under test has handed out and not taken back (a std lock: the
/// test's own bookkeeping, which loom need not interleave).
#[derive(Default)]
struct Live(StdMutex<BTreeMap<u64, u64>>);

impl Live {
    fn handed(&self, up: &Upstream, p: DevicePtr, n: usize) {
        let (p, n) = (p.0, n as u64);
        assert_eq!(p % 256, 0, "block {p:#x} not 256-byte aligned");
        assert!(
            up.covers(p, n),
            "block {p:#x}+{n} outside every live upstream chunk"
        );
        let mut live = self.0.lock().unwrap();
        if let Some((&q, &m)) = live.range(..p + n).next_back() {
            assert!(
                q + m <= p,
                "block {p:#x}+{n} overlaps live block {q:#x}+{m}"
            );
        }
        live.insert(p, n);
    }

    fn freeing(&self, p: DevicePtr, n: usize) {
        let gone = self.0.lock().unwrap().remove(&p.0);
        assert_eq!(gone, Some(n as u64), "block {p} freed twice");
    }

    fn is_empty(&self) -> bool {
        self.0.lock().unwrap().is_empty()
    }
}

/// A resource under test, the upstream under it, and the live blocks.
struct Env<R> {
    mr: R,
    up: Arc<Upstream>,
    live: Live,
}

impl<R: DeviceMemoryResource> Env<R> {
    fn alloc(&self, n: usize) -> DevicePtr {
        self.alloc_on(n, S)
    }

    fn alloc_on(&self, n: usize, stream: StreamId) -> DevicePtr {
        let p = self
            .mr
            .allocate(n, stream)
            .unwrap_or_else(|e| panic!("allocate {n} on {stream:?}: {e}"));
        self.live.handed(&self.up, p, n);
        p
    }

    fn free_on(&self, p: DevicePtr, n: usize, stream: StreamId) {
        // Off the books first: once freed, another thread may be handed the block.
        self.live.freeing(p, n);
        self.mr
            .deallocate(p, n, stream)
            .unwrap_or_else(|e| panic!("deallocate {p} ({n} bytes) on {stream:?}: {e}"));
    }

    fn try_alloc(&self, n: usize) -> MrResult<DevicePtr> {
        let p = self.mr.allocate(n, S)?;
        self.live.handed(&self.up, p, n);
        Ok(p)
    }

    fn free(&self, p: DevicePtr, n: usize) {
        self.free_on(p, n, S)
    }
}

type Sharded = ShardedPoolResource<Arc<Upstream>>;
type Arena = ArenaResource<Arc<Upstream>>;

fn sharded(limit: u64, shards: usize) -> Arc<Env<Sharded>> {
    let up = Upstream::new(limit);
    let mr = ShardedPoolResource::over(PoolResource::new(Arc::clone(&up)), shards);
    Arc::new(Env {
        mr,
        up,
        live: Live::default(),
    })
}

fn arena(limit: u64, arenas: usize) -> Arc<Env<Arena>> {
    let up = Upstream::new(limit);
    let mr = ArenaResource::with_arenas(Arc::clone(&up), arenas);
    Arc::new(Env {
        mr,
        up,
        live: Live::default(),
    })
}

/// The stack of a modelled thread: loom runs each on a coroutine of 32 KiB by default, and the
/// unoptimized pool (a stream's free lists are 8 KiB, built on the stack and moved) needs more;
/// a real thread has megabytes.
const STACK: usize = 1 << 20;

fn spawn<R: DeviceMemoryResource + 'static>(
    env: &Arc<Env<R>>,
    f: impl FnOnce(&Env<R>) + Send + 'static,
) -> loom::thread::JoinHandle<()> {
    let env = Arc::clone(env);
    loom::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || f(&env))
        .expect("a modelled thread")
}

/// Every block freed: the counters agree, and `release` gives everything back to the upstream;
/// dropping the resource then leaves nothing with it.
fn settle_sharded(env: Arc<Env<Sharded>>) {
    let env = Arc::into_inner(env).expect("every thread joined");
    assert!(env.live.is_empty());
    let (mr, up) = (&env.mr, &env.up);
    let (held, live) = mr.shard_bytes();
    assert_eq!(live, 0, "bytes live in the shards with every block freed");
    let shared = mr.shared();
    shared.check().expect("shared pool invariants");
    assert_eq!(
        shared.held_bytes() - shared.free_bytes(),
        held,
        "the shards' chunks are the shared pool's only live blocks"
    );
    assert_eq!(up.used(), shared.held_bytes());
    mr.release().expect("release");
    assert_eq!(
        mr.shard_bytes(),
        (0, 0),
        "the shards hold nothing after release"
    );
    assert_eq!(shared.held_bytes(), 0);
    assert_eq!(up.used(), 0, "the upstream has everything back");
    let up = Arc::clone(up);
    drop(env);
    assert_eq!(up.used(), 0);
}

fn settle_arena(env: Arc<Env<Arena>>) {
    let env = Arc::into_inner(env).expect("every thread joined");
    assert!(env.live.is_empty());
    let (mr, up) = (&env.mr, &env.up);
    let global = mr.global();
    global.check().expect("global arena invariants");
    assert_eq!(
        (global.held_bytes() - global.free_bytes()) % (2 * MIB),
        0,
        "only superblocks live in the global arena"
    );
    assert_eq!(up.used(), global.held_bytes());
    mr.release().expect("release");
    assert_eq!(
        global.held_bytes(),
        0,
        "the arenas hold nothing after release"
    );
    assert_eq!(global.live_allocations(), 0);
    assert_eq!(up.used(), 0, "the upstream has everything back");
    let up = Arc::clone(up);
    drop(env);
    assert_eq!(up.used(), 0);
}

/// Two threads allocate and free on their own shards while one frees a block of the main
/// thread's shard (the free searches the shards); a shard that grows may take another's
/// wholly free chunk (each shard locked in turn).
#[test]
fn sharded_own_shards_and_cross_shard_free() {
    model("sharded_own_shards_and_cross_shard_free", || {
        let env = sharded(64 * MIB, 4);
        let x = env.alloc(1000);
        let t1 = spawn(&env, move |e| {
            let a = e.alloc(300);
            e.free(x, 1000);
            e.free(a, 300);
        });
        let t2 = spawn(&env, |e| {
            let c = e.alloc(700);
            let d = e.alloc((600 * KIB) as usize);
            e.free(c, 700);
            e.free(d, (600 * KIB) as usize);
        });
        let y = env.alloc(200);
        env.free(y, 200);
        t1.join().unwrap();
        t2.join().unwrap();
        // Each thread had a shard of its own, which keeps its chunk; a chunk wholly free when
        // another shard grew may have moved to that shard whole (`ShardedPoolResource::grow`).
        let chunks = env.mr.shared().live_allocations();
        assert!(
            (2..=3).contains(&chunks),
            "three shards took {chunks} chunks"
        );
        settle_sharded(env);
    });
}

/// `release` gathers every shard's free chunks while two threads allocate and free on theirs
/// (one of them leaving a chunk wholly free, which its free may give back at the same time).
#[test]
fn sharded_release_while_allocating() {
    model("sharded_release_while_allocating", || {
        let env = sharded(64 * MIB, 4);
        let t1 = spawn(&env, |e| {
            let a = e.alloc(256);
            e.free(a, 256);
            let b = e.alloc(512);
            e.free(b, 512);
        });
        let t2 = spawn(&env, |e| {
            let c = e.alloc((700 * KIB) as usize);
            let d = e.alloc(256);
            e.free(c, (700 * KIB) as usize);
            e.free(d, 256);
        });
        env.mr.release().expect("release");
        t1.join().unwrap();
        t2.join().unwrap();
        settle_sharded(env);
    });
}

/// Out of memory until every shard's (or arena's) free chunks are gathered: the upstream
/// holds `limit` bytes, all taken, and the main thread's shard keeps a chunk whose blocks are
/// all free but `y`. Thread 1 asks for `big` bytes, which fit only once that chunk is back with
/// the upstream; thread 2 meanwhile frees `y` (a free from another shard) and calls `release`.
/// Once that free has returned, the request must succeed: the memory is free, whichever thread
/// gathers it. (It failed before the fix: when thread 2's `release` gave the chunk back between
/// thread 1's failure and thread 1's own `release`, the latter found nothing and thread 1
/// gave up.)
fn out_of_memory_gathers_everything<R: DeviceMemoryResource + 'static>(
    env: Arc<Env<R>>,
    limit: u64,
    big: usize,
) -> Arc<Env<R>> {
    let x = env.alloc(256);
    let y = env.alloc(256);
    env.free(x, 256);
    assert_eq!(env.up.used(), limit, "the upstream is full");
    let freed = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&freed);
    let t1 = spawn(&env, move |e| {
        let after_free = seen.load(SeqCst);
        match e.try_alloc(big) {
            Ok(p) => e.free(p, big),
            Err(err) => {
                assert!(err.is_out_of_memory(), "{err}");
                assert!(
                    !after_free,
                    "out of memory although every block was free before the request: {err}"
                );
            }
        }
    });
    let t2 = spawn(&env, move |e| {
        e.free(y, 256);
        freed.store(true, SeqCst);
        e.mr.release().expect("release");
    });
    t1.join().unwrap();
    t2.join().unwrap();
    // Everything is free now: the request succeeds from any thread.
    let p = env.alloc(big);
    env.free(p, big);
    env
}

/// A request a shard serves (2 MiB): its chunk is the whole upstream.
#[test]
fn sharded_out_of_memory_gathers_every_shard() {
    model("sharded_out_of_memory_gathers_every_shard", || {
        let env = out_of_memory_gathers_everything(sharded(2 * MIB, 4), 2 * MIB, 2 << 20);
        settle_sharded(env);
    });
}

/// A request of 5 MiB, which the thread's shard takes a chunk of its own size for.
#[test]
fn sharded_large_out_of_memory_gathers_every_shard() {
    model("sharded_large_out_of_memory_gathers_every_shard", || {
        let env = out_of_memory_gathers_everything(sharded(6 * MIB, 4), 2 * MIB, 5 << 20);
        settle_sharded(env);
    });
}

/// The arena: thread 1's arena needs a superblock, and the only one is the main thread's.
#[test]
fn arena_out_of_memory_gathers_every_arena() {
    model("arena_out_of_memory_gathers_every_arena", || {
        let env = out_of_memory_gathers_everything(arena(2 * MIB, 3), 2 * MIB, 256);
        settle_arena(env);
    });
}

/// Two shards for three threads: two of them share one (their blocks interleave in its
/// chunks, and a second chunk comes and goes), and the third frees a block of that shared
/// shard.
#[test]
fn sharded_threads_sharing_a_shard() {
    model("sharded_threads_sharing_a_shard", || {
        let env = sharded(64 * MIB, 2);
        let x = env.alloc(300 << 10);
        let t1 = spawn(&env, move |e| {
            let a = e.alloc(300 << 10);
            e.free(x, 300 << 10);
            e.free(a, 300 << 10);
        });
        let t2 = spawn(&env, |e| {
            let c = e.alloc(256);
            e.free(c, 256);
        });
        let y = env.alloc(300 << 10);
        env.free(y, 300 << 10);
        t1.join().unwrap();
        t2.join().unwrap();
        settle_sharded(env);
    });
}

/// Two streams on one shard: one thread frees on stream A what a thread on stream B then
/// needs, so B's allocation orders B after A with an event and adopts A's free blocks, while
/// the main thread churns on the default stream of the same shard; then `release` coalesces
/// every stream's free blocks.
#[test]
fn sharded_two_streams_on_one_shard() {
    model("sharded_two_streams_on_one_shard", || {
        let env = sharded(64 * MIB, 1);
        let (a, b) = (
            env.up.driver.stream_create(true).unwrap(),
            env.up.driver.stream_create(true).unwrap(),
        );
        let t1 = spawn(&env, move |e| {
            let x = e.alloc_on(100 << 10, a);
            e.free_on(x, 100 << 10, a);
        });
        let t2 = spawn(&env, move |e| {
            let y = e.alloc_on(64 << 10, b);
            e.free_on(y, 64 << 10, b);
        });
        let z = env.alloc(256);
        env.free(z, 256);
        t1.join().unwrap();
        t2.join().unwrap();
        settle_sharded(env);
    });
}

/// The arena: two threads on their own arenas, a free of the main thread's block from
/// another arena's thread, and `release` at the same time.
#[test]
fn arena_cross_free_and_release() {
    model("arena_cross_free_and_release", || {
        let env = arena(64 * MIB, 2);
        let x = env.alloc(1000);
        let t1 = spawn(&env, move |e| {
            let a = e.alloc(300);
            e.free(x, 1000);
            e.free(a, 300);
        });
        let t2 = spawn(&env, |e| {
            let c = e.alloc(700);
            e.free(c, 700);
            e.mr.release().expect("release");
        });
        t1.join().unwrap();
        t2.join().unwrap();
        settle_arena(env);
    });
}

fn pool(limit: u64) -> Arc<Env<PoolResource<Arc<Upstream>>>> {
    let up = Upstream::new(limit);
    let mr = PoolResource::new(Arc::clone(&up));
    Arc::new(Env {
        mr,
        up,
        live: Live::default(),
    })
}

/// Every block freed: the pool's invariants hold, it holds exactly what the upstream handed
/// out, and `release` (which coalesces every stream's free blocks) gives it all back.
fn settle_pool(env: Arc<Env<PoolResource<Arc<Upstream>>>>) {
    let env = Arc::into_inner(env).expect("every thread joined");
    assert!(env.live.is_empty());
    let (mr, up) = (&env.mr, &env.up);
    mr.check().expect("pool invariants");
    assert_eq!(mr.live_allocations(), 0);
    assert_eq!(up.used(), mr.held_bytes());
    mr.release().expect("release");
    assert_eq!(mr.held_bytes(), 0);
    assert_eq!(up.used(), 0, "the upstream has everything back");
}

/// `PoolResource` itself, shared by three threads on two streams: a thread on stream A frees
/// a block while two threads on stream B allocate — one may find B's lists empty and take A's
/// free blocks (recording A's cached event and making B wait), the other grows by a chunk
/// with the lock let go over the upstream call, while the others take, free or adopt around
/// it.
#[test]
fn pool_two_streams_three_threads() {
    model("pool_two_streams_three_threads", || {
        let env = pool(64 * MIB);
        let (a, b) = (
            env.up.driver.stream_create(true).unwrap(),
            env.up.driver.stream_create(true).unwrap(),
        );
        let x = env.alloc_on(300 << 10, a);
        let t1 = spawn(&env, move |e| e.free_on(x, 300 << 10, a));
        let t2 = spawn(&env, move |e| {
            let c = e.alloc_on(200 << 10, b);
            e.free_on(c, 200 << 10, b);
        });
        let t3 = spawn(&env, move |e| {
            let d = e.alloc_on(3 << 20, b);
            e.free_on(d, 3 << 20, b);
        });
        t1.join().unwrap();
        t2.join().unwrap();
        t3.join().unwrap();
        settle_pool(env);
    });
}
