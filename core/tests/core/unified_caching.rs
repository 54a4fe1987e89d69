//! `CachingManagedAllocator` on the simulated GPU: caching (frees never reach `cuMemFree`),
//! segment sizes and rounding, stream-ordered reuse, bad frees, out of memory, the limit on
//! real hardware and oversubscription on the simulator.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use emm_core::mr::DeviceMemoryResource;
use emm_core::unified::{
    CachingManagedAllocator, CachingManagedOptions, GiveBack, ManagedLimit, Placement, UnifiedError,
};
use emm_core::{CudaCode, DeviceId, DevicePtr, Driver, Location, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, GIB, MIB};

use crate::common::calls_of;

const S0: StreamId = StreamId::DEFAULT;
const DEV: Placement = Placement::Device(DeviceId(0));

fn cache_on(g: &SimDriver, limit: ManagedLimit) -> CachingManagedAllocator {
    let driver: Arc<dyn Driver> = Arc::new(g.clone());
    let options = CachingManagedOptions::default().limit(limit);
    CachingManagedAllocator::new(driver, DeviceId(0), options).unwrap()
}

fn gpu(memory: u64) -> SimDriver {
    SimDriver::new(SimConfig::new(21).memory_per_device(memory)).unwrap()
}

fn segment_of(g: &SimDriver, p: DevicePtr) -> u64 {
    g.mem_get_address_range(p).unwrap().1 as u64
}

#[test]
fn frees_never_reach_the_driver_and_reuse_is_a_cache_hit() {
    let g = gpu(GIB);
    let cache = cache_on(&g, ManagedLimit::Oversubscribe);
    let sizes = [100usize, 4096, 70_000, 512 << 10, 3 << 20, 12 << 20];
    for _ in 0..50 {
        let live: Vec<_> = sizes
            .iter()
            .map(|&n| (cache.allocate_placed(n, DEV, S0).unwrap(), n))
            .collect();
        for (p, n) in live {
            cache.free(p, n, S0).unwrap();
        }
    }
    assert_eq!(
        calls_of(&g, CallKind::MemFree),
        0,
        "no cuMemFree on the hot path"
    );
    let s = cache.stats();
    // A small segment, and a large one whose rest after 3 MiB holds the 12 MiB request.
    assert_eq!(s.segments_allocated, 2);
    assert_eq!(calls_of(&g, CallKind::MemAllocManaged), 2);
    assert_eq!((s.cache_misses, s.cache_hits), (2, 298));
    assert_eq!((s.live_blocks, s.frees), (0, 300));
    cache.check().unwrap();
}

/// PyTorch's sizes as the RFC's starting point: 512-byte rounding, 2 MiB small segments for
/// requests up to 1 MiB, 20 MiB large segments (emm's default: 128 MiB), a segment of its own
/// from 10 MiB.
#[test]
fn segments_and_rounding_start_from_pytorchs() {
    let g = gpu(GIB);
    let default = cache_on(&g, ManagedLimit::Oversubscribe);
    let p = default.allocate_placed(3 << 20, DEV, S0).unwrap();
    assert_eq!(segment_of(&g, p), 128 * MIB);
    default.free(p, 3 << 20, S0).unwrap();
    let driver: Arc<dyn Driver> = Arc::new(g.clone());
    let pytorch = CachingManagedOptions::default()
        .limit(ManagedLimit::Oversubscribe)
        .segments(2 << 20, 20 << 20);
    let cache = CachingManagedAllocator::new(driver, DeviceId(0), pytorch).unwrap();
    let a = cache.allocate_placed(1000, DEV, S0).unwrap();
    let b = cache.allocate_placed(1, DEV, S0).unwrap();
    assert_eq!(b.0 - a.0, 1024, "1000 bytes round to 1024");
    assert_eq!(segment_of(&g, a), 2 * MIB);
    let c = cache.allocate_placed(1 << 20, DEV, S0).unwrap();
    assert_eq!(segment_of(&g, c), 2 * MIB, "1 MiB is still small");
    let e = cache.allocate_placed(12 << 20, DEV, S0).unwrap();
    assert_eq!(
        segment_of(&g, e),
        12 * MIB,
        "10 MiB and more: a segment of its own"
    );
    let f = cache.allocate_placed((10 << 20) + 5, DEV, S0).unwrap();
    assert_eq!(segment_of(&g, f), 12 * MIB, "rounded to 2 MiB");
    let d = cache.allocate_placed(3 << 20, DEV, S0).unwrap();
    assert_eq!(segment_of(&g, d), 20 * MIB, "above 1 MiB: a large segment");
    let d2 = cache.allocate_placed((1 << 20) + 1, DEV, S0).unwrap();
    assert_eq!(
        d2.0 - f.0,
        (10 << 20) + 512,
        "the rest of f's segment, 512-byte rounded"
    );
    // Device and host allocations never share a segment: each carries its own hints.
    let h = cache
        .allocate_placed(
            1000,
            Placement::Host {
                accessed_by: DeviceId(0),
            },
            S0,
        )
        .unwrap();
    assert_ne!(
        g.mem_get_address_range(h).unwrap().0,
        g.mem_get_address_range(a).unwrap().0
    );
    assert_eq!(
        cache.placement_of(h),
        Some(Placement::Host {
            accessed_by: DeviceId(0)
        })
    );
    assert_eq!(cache.placement_of(a), Some(DEV));
}

/// The pool's stream rule: "memory freed on stream A is reused on stream A at once, and on
/// stream B only after B waits for A".
#[test]
fn stream_ordered_reuse_follows_the_pools_rules() {
    let g = gpu(GIB);
    let cache = cache_on(&g, ManagedLimit::Oversubscribe);
    let (a, b) = crate::common::two_streams(&g);
    let p = cache.allocate_placed(64 << 10, DEV, a).unwrap();
    g.device_access(p, 64 << 10, a, true).unwrap();
    cache.free(p, 64 << 10, a).unwrap();
    let (records, waits) = (
        calls_of(&g, CallKind::EventRecord),
        calls_of(&g, CallKind::StreamWaitEvent),
    );
    let q = cache.allocate_placed(64 << 10, DEV, a).unwrap();
    assert_eq!(q, p, "same stream: at once");
    assert_eq!(
        calls_of(&g, CallKind::EventRecord),
        records,
        "and with no event"
    );
    g.device_access(q, 64 << 10, a, true).unwrap();
    cache.free(q, 64 << 10, a).unwrap();
    let r = cache.allocate_placed(64 << 10, DEV, b).unwrap();
    assert_eq!(r, p, "B takes A's block…");
    assert_eq!(calls_of(&g, CallKind::EventRecord), records + 1);
    assert_eq!(
        calls_of(&g, CallKind::StreamWaitEvent),
        waits + 1,
        "…after waiting for A"
    );
    g.device_access(r, 64 << 10, b, true).unwrap();
    assert_eq!(g.report().races().count(), 0, "{}", g.report());
    assert_eq!(cache.stats().stream_orderings, 1);
    cache.free(r, 64 << 10, b).unwrap();
}

#[test]
fn bad_frees_are_errors_and_change_nothing() {
    let g = gpu(GIB);
    let cache = cache_on(&g, ManagedLimit::Oversubscribe);
    let p = cache.allocate_placed(1000, DEV, S0).unwrap();
    let keep = cache.allocate_placed(1000, DEV, S0).unwrap();
    let e = cache.free(p, 999, S0).unwrap_err();
    assert!(e.to_string().contains("allocated with 1000 bytes"), "{e}");
    let e = cache.free(p.offset(256), 1000, S0).unwrap_err();
    assert!(
        e.to_string().contains("no live allocation starts there"),
        "{e}"
    );
    let e = cache.free(DevicePtr(0xdead_0000), 8, S0).unwrap_err();
    assert!(matches!(e, UnifiedError::Resource(_)), "{e}");
    cache.free(p, 1000, S0).unwrap();
    let e = cache.free(p, 1000, S0).unwrap_err();
    assert!(e.to_string().contains("already freed"), "{e}");
    assert_eq!(cache.stats().live_blocks, 1);
    assert_eq!(cache.stats().frees, 1);
    cache.check().unwrap();
    assert!(cache.allocate_placed(0, DEV, S0).is_err());
    assert!(cache
        .allocate_placed(usize::MAX, DEV, S0)
        .unwrap_err()
        .is_out_of_memory());
    cache.free(keep, 1000, S0).unwrap();
    // The resource interface keeps the resource rules for zero bytes.
    assert_eq!(
        DeviceMemoryResource::allocate(&cache, 0, S0).unwrap(),
        DevicePtr::NULL
    );
    DeviceMemoryResource::deallocate(&cache, DevicePtr::NULL, 0, S0).unwrap();
}

/// PyTorch frees its cached blocks and retries once when the driver is out of memory.
#[test]
fn out_of_memory_gives_back_cached_segments_and_retries_once() {
    let g = gpu(GIB);
    let cache = cache_on(&g, ManagedLimit::Oversubscribe);
    let big = cache.allocate_placed(30 << 20, DEV, S0).unwrap();
    cache.free(big, 30 << 20, S0).unwrap();
    g.inject(Fault::FailNth {
        call: Some(CallKind::MemAllocManaged),
        nth: 1,
        code: CudaCode::OUT_OF_MEMORY,
    });
    let small = cache.allocate_placed(4096, DEV, S0).unwrap();
    let s = cache.stats();
    assert_eq!((s.segments_freed, s.segments_allocated), (1, 2));
    assert_eq!(s.held_bytes, 2 * MIB, "the cached 30 MiB went back");
    cache.free(small, 4096, S0).unwrap();
    // Twice out of memory is an error, and the allocator stays usable.
    g.inject(Fault::FailNth {
        call: Some(CallKind::MemAllocManaged),
        nth: 1,
        code: CudaCode::OUT_OF_MEMORY,
    });
    g.inject(Fault::FailNth {
        call: Some(CallKind::MemAllocManaged),
        nth: 2,
        code: CudaCode::OUT_OF_MEMORY,
    });
    let e = cache.allocate_placed(5 << 20, DEV, S0).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    g.clear_faults();
    let p = cache.allocate_placed(5 << 20, DEV, S0).unwrap();
    cache.free(p, 5 << 20, S0).unwrap();
    cache.check().unwrap();
}

/// "On real hardware never allocate more managed memory than the device has free (it can
/// hang a GPU): the allocator refuses with a clear error beyond a configurable fraction."
#[test]
fn the_limit_refuses_segments_beyond_the_fraction_of_free_memory() {
    let g = gpu(64 * MIB);
    let cache = cache_on(&g, ManagedLimit::FractionOfFree(0.9));
    let a = cache.allocate_placed(50 << 20, DEV, S0).unwrap();
    let e = cache.allocate_placed(20 << 20, DEV, S0).unwrap_err();
    assert!(matches!(e, UnifiedError::LimitExceeded { .. }), "{e}");
    assert!(e.is_out_of_memory());
    let text = e.to_string();
    assert!(
        text.contains("refused a 20.0 MiB managed segment") && text.contains("hang a real GPU"),
        "{text}"
    );
    let small = cache.allocate_placed(4096, DEV, S0).unwrap();
    cache.free(small, 4096, S0).unwrap();
    cache.free(a, 50 << 20, S0).unwrap();
    assert_eq!(
        cache.release().unwrap(),
        52 * MIB,
        "the 50 MiB and the small segment"
    );
    // Device memory taken by others counts: a segment must fit in 90 % of what is free.
    let other = g.mem_alloc((60 << 20) as usize).unwrap();
    let e = cache.allocate_placed(3 << 20, DEV, S0).unwrap_err();
    assert!(
        matches!(e, UnifiedError::LimitExceeded { free, .. } if free == 4 << 20),
        "{e}"
    );
    g.mem_free(other).unwrap();
    let p = cache.allocate_placed(3 << 20, DEV, S0).unwrap();
    cache.free(p, 3 << 20, S0).unwrap();
}

/// Oversubscription on the simulated GPU: twice the device's memory, pages evicted to the
/// host and faulted back.
#[test]
fn oversubscription_is_allowed_and_evicts_to_the_host() {
    let g = gpu(64 * MIB);
    let cache = cache_on(&g, ManagedLimit::Oversubscribe);
    let blocks: Vec<_> = (0..4)
        .map(|_| cache.allocate_placed(32 << 20, DEV, S0).unwrap())
        .collect();
    for &p in &blocks {
        g.device_access(p, 32 << 20, S0, true).unwrap();
    }
    let st = g.managed_stats();
    assert_eq!(st.evictions, 1024, "64 MiB of 64 KiB pages pushed out");
    assert_eq!(st.migrated_to_host, 64 * MIB);
    g.device_access(blocks[0], 32 << 20, S0, false).unwrap();
    let st = g.managed_stats();
    assert_eq!((st.faults, st.migrated_to_device), (512, 32 * MIB));
    assert_eq!(g.residency(blocks[0]), Some(Location::Device(DeviceId(0))));
    // Holding more than the device has, an emptied segment goes back to the driver: cached,
    // its evicted pages would migrate back when the next user first touches them.
    cache.free(blocks[0], 32 << 20, S0).unwrap();
    assert_eq!(cache.stats().segments_freed, 1);
    assert_eq!(cache.stats().held_bytes, 96 * MIB);
    for &p in &blocks[1..] {
        cache.free(p, 32 << 20, S0).unwrap();
    }
    assert_eq!(
        cache.stats().held_bytes,
        64 * MIB,
        "no longer oversubscribed: cached"
    );
    assert_eq!(cache.release().unwrap(), 64 * MIB);
    assert_eq!(g.device_memory_used(DeviceId(0)), 0);
}

/// `GiveBack::Displaced` gives back a segment emptied by a block that was moved away from its
/// pool's location; `GiveBack::Never` (PyTorch's policy) keeps it.
#[test]
fn a_segment_emptied_by_a_moved_block_goes_back_unless_never() {
    for (give_back, kept) in [(GiveBack::Displaced, 0), (GiveBack::Never, 1)] {
        let g = gpu(GIB);
        let driver: Arc<dyn Driver> = Arc::new(g.clone());
        let options = CachingManagedOptions::default()
            .limit(ManagedLimit::Oversubscribe)
            .give_back(give_back);
        let cache = CachingManagedAllocator::new(driver, DeviceId(0), options).unwrap();
        let host = Placement::Host {
            accessed_by: DeviceId(0),
        };
        let p = cache.allocate_placed(16 << 20, host, S0).unwrap();
        let q = cache.allocate_placed(16 << 20, DEV, S0).unwrap();
        cache.free(q, 16 << 20, S0).unwrap();
        cache.free_advised(p, 16 << 20, S0, DEV).unwrap();
        let s = cache.stats();
        assert_eq!(
            s.segments_allocated - s.segments_freed,
            1 + kept,
            "{give_back:?}"
        );
        cache.take_failures().unwrap();
    }
}

#[test]
fn release_gives_back_wholly_free_segments_only() {
    let g = gpu(GIB);
    let cache = cache_on(&g, ManagedLimit::Oversubscribe);
    let s = g.stream_create(true).unwrap();
    let a = cache.allocate_placed(4096, DEV, S0).unwrap();
    let b = cache.allocate_placed(3 << 20, DEV, s).unwrap();
    let c = cache.allocate_placed(3 << 20, DEV, s).unwrap();
    cache.free(b, 3 << 20, s).unwrap();
    assert_eq!(
        cache.release().unwrap(),
        0,
        "every segment still has a live block"
    );
    cache.free(c, 3 << 20, s).unwrap();
    assert_eq!(cache.release().unwrap(), 128 * MIB);
    assert_eq!(calls_of(&g, CallKind::MemFree), 1);
    cache.free(a, 4096, S0).unwrap();
    assert_eq!(cache.release().unwrap(), 2 * MIB);
    assert_eq!(cache.stats().held_bytes, 0);
    drop(cache);
    g.stream_destroy(s).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn threads_never_get_overlapping_blocks() {
    let g = gpu(GIB);
    let cache = Arc::new(cache_on(&g, ManagedLimit::Oversubscribe));
    let live = Arc::new(Mutex::new(BTreeMap::<u64, u64>::new()));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (cache, live) = (Arc::clone(&cache), Arc::clone(&live));
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                for step in 0..2000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if step % 3 != 2 || mine.is_empty() {
                        let n = 1 + (x % (2 << 20)) as usize;
                        let p = cache.allocate_placed(n, DEV, S0).unwrap();
                        let mut l = live.lock().unwrap();
                        let below = l.range(..=p.0).next_back().map(|(a, s)| a + s);
                        let above = l.range(p.0..).next().map(|(a, _)| *a);
                        assert!(below.is_none_or(|end| end <= p.0), "overlap below {p}");
                        assert!(
                            above.is_none_or(|a| a >= p.0 + n as u64),
                            "overlap above {p}"
                        );
                        l.insert(p.0, n as u64);
                        mine.push((p, n));
                    } else {
                        let (p, n) = mine.swap_remove((x % mine.len() as u64) as usize);
                        live.lock().unwrap().remove(&p.0);
                        cache.free(p, n, S0).unwrap();
                    }
                }
                for (p, n) in mine {
                    live.lock().unwrap().remove(&p.0);
                    cache.free(p, n, S0).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(cache.stats().live_blocks, 0);
    cache.check().unwrap();
}
