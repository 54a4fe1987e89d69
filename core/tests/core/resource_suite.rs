//! RMM's generic resource tests (`mr_tests`), ported once and run over every resource on the
//! simulated GPU. Each test also writes a distinct pattern into every allocation and checks it
//! is intact before the free (contents never bleed between allocations), checks the simulator
//! saw no race, use after free or bad free, and that dropping the resource leaves nothing held.
//!
//! Adding a resource is one line in the `suite!` list at the bottom.

use std::sync::Arc;

use emm_core::mr::{
    ArenaResource, AsyncResource, Backing, BinningResource, CudaResource, DeviceMemoryResource,
    FixedSizeResource, ManagedResource, MrError, PoolOptions, PoolResource, ShardedPoolResource,
    MIN_ALIGNMENT,
};
use emm_core::workloads::SplitMix64;
use emm_core::{DevicePtr, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB, MIB};

/// Where resources legitimately differ.
#[derive(Debug, Clone, Copy)]
struct Caps {
    /// The largest request served (larger ones are `InvalidArgument`).
    max_alloc: u64,
    /// Whether a free with the wrong size is refused.
    checks_size: bool,
    /// Whether two instances over the same driver can free each other's memory.
    instances_equal: bool,
}

impl Caps {
    /// A suballocator: any size, sizes checked, instances distinct.
    const SUBALLOCATOR: Caps = Caps {
        max_alloc: u64::MAX,
        checks_size: true,
        instances_equal: false,
    };
    /// A pass-through to the driver: any size, sizes unchecked.
    const DRIVER: Caps = Caps {
        max_alloc: u64::MAX,
        checks_size: false,
        instances_equal: true,
    };
}

type Make = fn(&Arc<SimDriver>) -> Arc<dyn DeviceMemoryResource>;

fn gpu() -> Arc<SimDriver> {
    Arc::new(SimDriver::new(SimConfig::new(11).memory_per_device(8 * GIB)).expect("valid config"))
}

/// Live allocations with the pattern written into each.
struct Live<'a> {
    g: &'a SimDriver,
    r: &'a dyn DeviceMemoryResource,
    blocks: Vec<(DevicePtr, usize, u8, StreamId)>,
    next_pattern: u8,
}

/// Bytes written at each end of an allocation (all of a small one).
const MARK: usize = 4096;

impl<'a> Live<'a> {
    fn new(g: &'a SimDriver, r: &'a dyn DeviceMemoryResource) -> Self {
        Live {
            g,
            r,
            blocks: Vec::new(),
            next_pattern: 1,
        }
    }

    fn alloc(&mut self, size: usize, stream: StreamId) -> DevicePtr {
        let p = self
            .r
            .allocate(size, stream)
            .unwrap_or_else(|e| panic!("{}: allocate {size}: {e}", self.r.name()));
        if size == 0 {
            assert_eq!(p, DevicePtr::NULL, "zero bytes give the null pointer");
            return p;
        }
        assert_eq!(p.0 % MIN_ALIGNMENT as u64, 0, "{p} not 256-byte aligned");
        for &(q, n, _, _) in &self.blocks {
            assert!(
                p.0 + size as u64 <= q.0 || q.0 + n as u64 <= p.0,
                "{p}+{size} overlaps {q}+{n}"
            );
        }
        let pattern = self.next_pattern;
        self.next_pattern = self.next_pattern.wrapping_add(1).max(1);
        for (at, len) in Self::marks(size) {
            self.g
                .memset_d8(p.offset(at), pattern, len, Some(stream))
                .expect("memset");
        }
        self.blocks.push((p, size, pattern, stream));
        p
    }

    fn marks(size: usize) -> Vec<(u64, usize)> {
        if size <= 2 * MARK {
            vec![(0, size)]
        } else {
            vec![(0, MARK), ((size - MARK) as u64, MARK)]
        }
    }

    fn verify(&self, k: usize) {
        let (p, size, pattern, stream) = self.blocks[k];
        for (at, len) in Self::marks(size) {
            let mut back = vec![0u8; len];
            self.g
                .memcpy_dtoh(&mut back, p.offset(at), Some(stream))
                .expect("read back");
            assert!(
                back.iter().all(|&b| b == pattern),
                "{}: contents of {p} (+{at}) changed while live",
                self.r.name()
            );
        }
    }

    /// Verifies and frees block `k` on `stream` (its own stream when `None`).
    fn free(&mut self, k: usize, stream: Option<StreamId>) {
        self.verify(k);
        self.free_unverified(k, stream);
    }

    /// Frees block `k` without reading it back: a read back is a host synchronize, which
    /// would order the streams and hide a missing event wait from the race detector.
    fn free_unverified(&mut self, k: usize, stream: Option<StreamId>) {
        let (p, size, _, own) = self.blocks.swap_remove(k);
        self.r
            .deallocate(p, size, stream.unwrap_or(own))
            .unwrap_or_else(|e| panic!("{}: free {p}: {e}", self.r.name()));
    }

    fn free_all(&mut self) {
        while !self.blocks.is_empty() {
            self.free(self.blocks.len() - 1, None);
        }
    }
}

/// Drops the resource and checks the simulator: no violation, nothing left held.
fn finish(g: &SimDriver, r: Arc<dyn DeviceMemoryResource>) {
    let name = r.name();
    drop(r);
    let report = g.report();
    assert!(
        report.violations.is_empty(),
        "{name}: the simulator saw violations:\n{report}"
    );
    assert!(report.nothing_held(), "{name} left memory held:\n{report}");
}

fn sizes_up_to(caps: Caps, sizes: &[usize]) -> Vec<usize> {
    sizes
        .iter()
        .copied()
        .filter(|&s| s as u64 <= caps.max_alloc)
        .collect()
}

fn allocates_each_size_aligned_and_distinct(make: Make, caps: Caps) {
    let g = gpu();
    let r = make(&g);
    let mut live = Live::new(&g, &*r);
    for size in sizes_up_to(caps, &[0, 4, 1024, MIB as usize, GIB as usize]) {
        live.alloc(size, StreamId::DEFAULT);
    }
    live.free_all();
    // A zero-byte free is a no-op.
    r.deallocate(DevicePtr::NULL, 0, StreamId::DEFAULT)
        .expect("zero-byte free");
    finish(&g, r);
}

fn one_pib_is_out_of_memory_and_leaves_it_usable(make: Make, caps: Caps) {
    let g = gpu();
    let r = make(&g);
    let e = r
        .allocate(1 << 50, StreamId::DEFAULT)
        .expect_err("1 PiB cannot be had");
    if caps.max_alloc >= 1 << 50 {
        assert!(
            matches!(e, MrError::OutOfMemory { requested, .. } if requested == 1 << 50),
            "{}: {e}",
            r.name()
        );
        assert!(e.to_string().contains("1.0 PiB"), "{e}");
    } else {
        assert!(matches!(e, MrError::InvalidArgument { .. }), "{e}");
    }
    let huge = r.allocate(usize::MAX, StreamId::DEFAULT);
    assert!(huge.is_err(), "usize::MAX cannot be had");
    let mut live = Live::new(&g, &*r);
    live.alloc(1024, StreamId::DEFAULT);
    live.free_all();
    finish(&g, r);
}

fn random_allocations(make: Make, caps: Caps) {
    let g = gpu();
    let r = make(&g);
    let mut rng = SplitMix64::new(42);
    let max = caps.max_alloc.min(5 * MIB);
    let mut live = Live::new(&g, &*r);
    for _ in 0..100 {
        live.alloc(rng.range(1, max) as usize, StreamId::DEFAULT);
    }
    while !live.blocks.is_empty() {
        let k = rng.below(live.blocks.len() as u64) as usize;
        live.free(k, None);
    }
    finish(&g, r);
}

fn mixed_random_allocation_free(make: Make, caps: Caps) {
    let g = gpu();
    let r = make(&g);
    let mut rng = SplitMix64::new(53);
    let max = caps.max_alloc.min(5 * MIB);
    let mut live = Live::new(&g, &*r);
    for _ in 0..200 {
        if rng.below(100) < 53 || live.blocks.is_empty() {
            live.alloc(rng.range(1, max) as usize, StreamId::DEFAULT);
        } else {
            let k = rng.below(live.blocks.len() as u64) as usize;
            live.free(k, None);
        }
    }
    live.free_all();
    finish(&g, r);
}

fn four_threads_at_once(make: Make, caps: Caps) {
    let g = gpu();
    let r = make(&g);
    let max = caps.max_alloc.min(MIB);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (g, r) = (&g, &r);
            s.spawn(move || {
                // Each thread on its own stream, as with per-thread default streams.
                let stream = g.stream_create(true).expect("stream");
                let mut rng = SplitMix64::new(100 + t);
                let mut live = Live::new(g, &**r);
                live.next_pattern = (t as u8) * 60 + 1;
                for _ in 0..150 {
                    if rng.below(100) < 60 || live.blocks.is_empty() {
                        live.alloc(rng.range(1, max) as usize, stream);
                    } else {
                        let k = rng.below(live.blocks.len() as u64) as usize;
                        live.free(k, None);
                    }
                }
                live.free_all();
                g.stream_synchronize(stream).expect("sync");
                g.stream_destroy(stream).expect("destroy");
            });
        }
    });
    finish(&g, r);
}

fn producer_and_consumer_on_two_streams(make: Make, caps: Caps) {
    let g = gpu();
    let r = make(&g);
    let (a, b) = (
        g.stream_create(true).expect("stream"),
        g.stream_create(true).expect("stream"),
    );
    let event = g.event_create().expect("event");
    let size = caps.max_alloc.min(64 << 10) as usize;
    for round in 0..3 {
        // The producer allocates and fills on A; the consumer waits on A's event, uses the
        // memory on B and frees it on B.
        let mut live = Live::new(&g, &*r);
        live.next_pattern = 1 + round * 50;
        for _ in 0..20 {
            live.alloc(size, a);
        }
        for k in 0..live.blocks.len() {
            live.verify(k);
        }
        g.device_access(live.blocks[0].0, size, a, true)
            .expect("producer kernel");
        g.event_record(event, a).expect("record");
        g.stream_wait_event(b, event).expect("wait");
        for k in 0..live.blocks.len() {
            g.device_access(live.blocks[k].0, size, b, true)
                .expect("consumer kernel");
        }
        // No host synchronize from here on: the consumer's writes on B are ordered before A's
        // reuse only by the resource's own event.
        while !live.blocks.is_empty() {
            live.free_unverified(0, Some(b));
        }
        // A allocates again: reusing what B freed must be ordered after B's work.
        let mut again = Live::new(&g, &*r);
        again.next_pattern = 200 + round;
        for _ in 0..20 {
            again.alloc(size, a);
        }
        again.free_all();
    }
    g.stream_synchronize(a).expect("sync");
    g.stream_synchronize(b).expect("sync");
    g.event_destroy(event).expect("destroy");
    g.stream_destroy(a).expect("destroy");
    g.stream_destroy(b).expect("destroy");
    finish(&g, r);
}

fn shared_ownership_and_equality(make: Make, caps: Caps) {
    let g = gpu();
    let r = make(&g);
    let shared = Arc::clone(&r);
    assert!(r.is_equal(&*shared), "a shared resource equals itself");
    assert!(shared.is_equal(&*r), "from either handle");
    // Memory from one handle is freed through the other.
    let p = shared.allocate(1000, StreamId::DEFAULT).expect("allocate");
    r.deallocate(p, 1000, StreamId::DEFAULT).expect("free");
    let other = make(&g);
    assert_eq!(
        r.is_equal(&*other),
        caps.instances_equal,
        "{}: two instances",
        r.name()
    );
    let elsewhere = make(&gpu());
    assert!(!r.is_equal(&*elsewhere), "another GPU's resource differs");
    drop((shared, other, elsewhere));
    finish(&g, r);
}

fn bad_frees_are_refused_and_change_nothing(make: Make, caps: Caps) {
    let g = gpu();
    let r = make(&g);
    let mut live = Live::new(&g, &*r);
    let keep = live.alloc(4096, StreamId::DEFAULT);
    let gone = r.allocate(4096, StreamId::DEFAULT).expect("allocate");
    r.deallocate(gone, 4096, StreamId::DEFAULT).expect("free");
    let refused = |e: MrResult| matches!(e, Err(MrError::InvalidFree { .. }));
    type MrResult = Result<(), MrError>;
    assert!(
        refused(r.deallocate(keep.offset(256), 4096, StreamId::DEFAULT)),
        "{}: an interior pointer",
        r.name()
    );
    assert!(
        refused(r.deallocate(DevicePtr(0xdead_0000), 4096, StreamId::DEFAULT)),
        "{}: a foreign pointer",
        r.name()
    );
    if caps.checks_size {
        assert!(
            refused(r.deallocate(keep, 100, StreamId::DEFAULT)),
            "{}: a wrong size",
            r.name()
        );
        assert!(
            refused(r.deallocate(gone, 4096, StreamId::DEFAULT)),
            "{}: a double free",
            r.name()
        );
    }
    // The live allocation is intact and freeable; the resource still works.
    live.free_all();
    live.alloc(4096, StreamId::DEFAULT);
    live.free_all();
    drop(r);
    // Pass-through resources let the driver refuse bad frees, which the simulator records as
    // violations; suballocators refuse them before the driver sees anything.
    let report = g.report();
    assert!(report.nothing_held(), "{report}");
    if caps.checks_size {
        assert!(report.violations.is_empty(), "{report}");
    }
}

macro_rules! suite {
    ($($name:ident: |$g:ident| $make:expr, $caps:expr;)*) => {$(
        mod $name {
            use super::*;

            fn make($g: &Arc<SimDriver>) -> Arc<dyn DeviceMemoryResource> {
                Arc::new($make)
            }

            suite!(@tests $caps;
                allocates_each_size_aligned_and_distinct,
                one_pib_is_out_of_memory_and_leaves_it_usable,
                random_allocations,
                mixed_random_allocation_free,
                four_threads_at_once,
                producer_and_consumer_on_two_streams,
                shared_ownership_and_equality,
                bad_frees_are_refused_and_change_nothing,
            );
        }
    )*};
    // Each test of the suite, over this module's `make`.
    (@tests $caps:expr; $($test:ident,)*) => {$(
        #[test]
        fn $test() {
            super::$test(make, $caps);
        }
    )*};
}

fn cuda(g: &Arc<SimDriver>) -> CudaResource<SimDriver> {
    CudaResource::new(Arc::clone(g))
}

const FIXED: Caps = Caps {
    max_alloc: MIB,
    ..Caps::SUBALLOCATOR
};

suite! {
    cuda_resource: |g| cuda(g), Caps::DRIVER;
    managed_resource: |g| ManagedResource::<SimDriver>::new(Arc::clone(g)), Caps::DRIVER;
    async_resource: |g| AsyncResource::<SimDriver>::new(Arc::clone(g)).expect("pool"), Caps { instances_equal: false, ..Caps::DRIVER };
    pool_resource: |g| PoolResource::new(cuda(g)), Caps::SUBALLOCATOR;
    pool_of_chunks: |g| PoolResource::with_options(cuda(g), PoolOptions::default().backing(Backing::Chunks)).expect("options"), Caps::SUBALLOCATOR;
    pool_over_async: |g| PoolResource::new(AsyncResource::<SimDriver>::new(Arc::clone(g)).expect("pool")), Caps::SUBALLOCATOR;
    fixed_size_resource: |g| FixedSizeResource::new(cuda(g), MIB).expect("bin"), FIXED;
    binning_over_pool: |g| BinningResource::with_range(PoolResource::new(cuda(g)), 8, 20).expect("bins"), Caps::SUBALLOCATOR;
    arena_resource: |g| ArenaResource::new(cuda(g)), Caps::SUBALLOCATOR;
    sharded_pool: |g| ShardedPoolResource::new(cuda(g)), Caps::SUBALLOCATOR;
    sharded_pool_one_shard: |g| ShardedPoolResource::over(PoolResource::new(cuda(g)), 1), Caps::SUBALLOCATOR;
}
