//! The other resources beyond the generic suite: driver pools, managed and pinned memory,
//! fixed-size blocks, bins and arenas.

use std::sync::Arc;

use emm_core::mr::{
    ArenaResource, AsyncResource, Backing, BinningResource, CudaResource, DeviceMemoryResource,
    FixedSizeResource, HostMemoryResource, ManagedResource, MrError, PinnedHostResource,
    PoolOptions, PoolResource,
};
use emm_core::{DeviceId, Driver, HostAllocFlags, HostPtr, Location, StreamId};
use emm_sim::{CallKind, SimConfig, SimDriver, GIB, MIB};

fn gpu() -> Arc<SimDriver> {
    Arc::new(SimDriver::new(SimConfig::new(5).memory_per_device(4 * GIB)).expect("config"))
}

fn cuda(g: &Arc<SimDriver>) -> CudaResource<SimDriver> {
    CudaResource::new(Arc::clone(g))
}

const S: StreamId = StreamId::DEFAULT;

#[test]
fn async_resource_owns_its_pool_and_honours_the_release_threshold() {
    let g = gpu();
    let r = AsyncResource::<SimDriver>::new(Arc::clone(&g)).unwrap();
    let s = g.stream_create(true).unwrap();
    let x = r.allocate(8 << 20, s).unwrap();
    assert_eq!(r.usage().unwrap().used, 8 << 20);
    r.deallocate(x, 8 << 20, s).unwrap();
    g.stream_synchronize(s).unwrap();
    assert_eq!(
        r.usage().unwrap().reserved,
        8 << 20,
        "kept: threshold is the device"
    );
    r.trim_to(0).unwrap();
    assert_eq!(r.usage().unwrap().reserved, 0);
    r.set_release_threshold(0).unwrap();
    let y = r.allocate(4 << 20, s).unwrap();
    r.deallocate(y, 4 << 20, s).unwrap();
    g.stream_synchronize(s).unwrap();
    assert_eq!(
        r.usage().unwrap().reserved,
        0,
        "threshold 0 releases at sync"
    );
    let info = r.memory_info().unwrap();
    assert!(info.free <= info.total);
    drop(r);
    g.stream_destroy(s).unwrap();
    assert!(
        g.report().is_clean(),
        "the pool was destroyed:\n{}",
        g.report()
    );
    // Over the default pool, nothing is destroyed on drop.
    let d = AsyncResource::<SimDriver>::from_default_pool(Arc::clone(&g)).unwrap();
    assert_eq!(d.pool(), g.device_default_mem_pool(DeviceId(0)).unwrap());
    drop(d);
    assert!(g.device_default_mem_pool(DeviceId(0)).is_ok());
}

#[test]
fn managed_resource_memory_is_managed_and_host_visible() {
    let g = gpu();
    let r = ManagedResource::<SimDriver>::new(Arc::clone(&g));
    let x = r.allocate(1 << 20, S).unwrap();
    assert_eq!(g.residency(x), None, "unpopulated until touched");
    g.host_write(x.as_host(), &[3; 64]).unwrap();
    assert_eq!(g.residency(x), Some(Location::Host));
    g.device_access(x, 1 << 20, S, false).unwrap();
    assert_eq!(g.residency(x), Some(Location::Device(DeviceId(0))));
    r.deallocate(x, 1 << 20, S).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
    let by = g.device_allocations_by_caller();
    assert_eq!(by.get("ManagedResource"), Some(&1));
}

#[test]
fn pinned_host_resource_pins_maps_and_refuses_bad_frees() {
    let g = gpu();
    let r = PinnedHostResource::<SimDriver>::with_flags(
        Arc::clone(&g),
        HostAllocFlags {
            mapped: true,
            ..HostAllocFlags::default()
        },
    );
    assert_eq!(r.allocate_host(0).unwrap(), HostPtr(0));
    r.deallocate_host(HostPtr(0), 0).unwrap();
    let h = r.allocate_host(10_000).unwrap();
    assert_eq!(h.0 % 256, 0);
    g.host_write(h, b"pinned").unwrap();
    let d = g.host_device_pointer(h).unwrap();
    let mut back = [0u8; 6];
    g.memcpy_dtoh(&mut back, d, None).unwrap();
    assert_eq!(&back, b"pinned");
    assert!(matches!(
        r.deallocate_host(h.offset(256), 10_000),
        Err(MrError::InvalidFree { .. })
    ));
    let e = r.allocate_host(1 << 50).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    r.deallocate_host(h, 10_000).unwrap();
    assert!(matches!(
        r.deallocate_host(h, 10_000),
        Err(MrError::InvalidFree { .. })
    ));
    let clone = r.clone();
    assert_eq!(clone.flags(), r.flags());
    let report = g.report();
    assert!(report.nothing_held(), "{report}");
}

#[test]
fn fixed_size_blocks_are_reused_per_stream_and_oversize_is_refused() {
    let g = gpu();
    let r = FixedSizeResource::with_blocks_per_chunk(cuda(&g), 1000, 4).unwrap();
    assert_eq!(r.block_size(), 1024, "rounded up to 256");
    let e = r.allocate(1025, S).unwrap_err();
    assert!(matches!(e, MrError::InvalidArgument { .. }), "{e}");
    assert!(e.to_string().contains("BinningResource"), "{e}");
    let blocks: Vec<_> = (0..4).map(|_| r.allocate(1000, S).unwrap()).collect();
    assert_eq!(r.held_bytes(), 4096, "one chunk of four blocks");
    for w in blocks.windows(2) {
        assert_eq!(w[1].0 - w[0].0, 1024, "handed out in address order");
    }
    r.deallocate(blocks[2], 1000, S).unwrap();
    assert_eq!(
        r.allocate(10, S).unwrap(),
        blocks[2],
        "LIFO reuse on the stream"
    );
    let s2 = g.stream_create(true).unwrap();
    r.deallocate(blocks[0], 1000, s2).unwrap();
    // The default stream's stack is empty: it takes s2's block after an event wait.
    let x = r.allocate(1000, S).unwrap();
    assert_eq!(x, blocks[0]);
    assert_eq!(
        g.trace()
            .iter()
            .filter(|e| e.call == CallKind::EventRecord)
            .count(),
        1
    );
    for (p, n) in [(x, 1000), (blocks[1], 1000), (blocks[3], 1000)] {
        r.deallocate(p, n, S).unwrap();
    }
    let wrong = r.allocate(1000, S).unwrap();
    assert!(matches!(
        r.deallocate(wrong, 999, S),
        Err(MrError::InvalidFree { .. })
    ));
    r.deallocate(wrong, 1000, S).unwrap();
    assert!(FixedSizeResource::new(cuda(&g), 0).is_err());
    assert!(FixedSizeResource::with_blocks_per_chunk(cuda(&g), 256, 0).is_err());
    drop(r);
    g.stream_destroy(s2).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn binning_sends_small_requests_to_bins_and_large_ones_upstream() {
    let g = gpu();
    let r = BinningResource::with_range(PoolResource::new(cuda(&g)), 10, 16)
        .unwrap()
        .with_bin(3000)
        .unwrap();
    let sizes: Vec<u64> = r.bin_sizes().collect();
    assert_eq!(
        sizes,
        vec![1024, 2048, 3072, 4096, 8192, 16384, 32768, 65536]
    );
    let small: Vec<_> = (0..10).map(|_| r.allocate(100, S).unwrap()).collect();
    assert_eq!(
        r.upstream().live_allocations(),
        1,
        "ten small blocks come from one bin chunk"
    );
    let large = r.allocate(1 << 20, S).unwrap();
    assert_eq!(
        r.upstream().live_allocations(),
        2,
        "a large one goes upstream"
    );
    r.deallocate(large, 1 << 20, S).unwrap();
    assert_eq!(r.upstream().live_allocations(), 1);
    for p in small {
        r.deallocate(p, 100, S).unwrap();
    }
    assert!(BinningResource::with_range(PoolResource::new(cuda(&g)), 12, 10).is_err());
}

#[test]
fn arena_threads_share_the_global_arena_and_give_superblocks_back() {
    let g = gpu();
    let r = ArenaResource::with_arenas(cuda(&g), 4);
    assert_eq!(r.arenas(), 4);
    assert_eq!(r.small_max(), 256 << 10);
    // Small allocations on one thread take one superblock from the global arena.
    let xs: Vec<_> = (0..8).map(|_| r.allocate(64 << 10, S).unwrap()).collect();
    assert_eq!(r.global().live_allocations(), 1);
    // A large request goes to the global arena directly.
    let big = r.allocate(4 << 20, S).unwrap();
    assert_eq!(r.global().live_allocations(), 2);
    // Another thread frees this thread's blocks and allocates its own.
    std::thread::scope(|s| {
        s.spawn(|| {
            for x in &xs[4..] {
                r.deallocate(*x, 64 << 10, S).unwrap();
            }
            let y = r.allocate(1000, S).unwrap();
            r.deallocate(y, 1000, S).unwrap();
        });
    });
    // Filling past one superblock takes a second; freeing it wholly gives it back.
    let more: Vec<_> = (0..40).map(|_| r.allocate(64 << 10, S).unwrap()).collect();
    let superblocks = r.global().live_allocations() - 1;
    assert!(superblocks >= 2, "{superblocks}");
    for x in more {
        r.deallocate(x, 64 << 10, S).unwrap();
    }
    for x in &xs[..4] {
        r.deallocate(*x, 64 << 10, S).unwrap();
    }
    r.deallocate(big, 4 << 20, S).unwrap();
    assert!(
        r.global().live_allocations() <= 2,
        "wholly free superblocks went back, at most one kept per arena used"
    );
    assert!(matches!(
        r.deallocate(xs[0], 64 << 10, S),
        Err(MrError::InvalidFree { .. })
    ));
    drop(r);
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn every_resource_names_itself_in_driver_attribution() {
    let g = gpu();
    let chunks = PoolOptions::default().backing(Backing::Chunks);
    let p = PoolResource::with_options(cuda(&g), chunks).unwrap();
    let x = p.allocate(100, S).unwrap();
    p.deallocate(x, 100, S).unwrap();
    let by = g.device_allocations_by_caller();
    assert_eq!(by.get("CudaResource"), Some(&1), "{by:?}");
    // An expandable pool creates physical memory itself.
    let p = PoolResource::new(cuda(&g));
    let x = p.allocate(100, S).unwrap();
    p.deallocate(x, 100, S).unwrap();
    let by = g.device_allocations_by_caller();
    assert_eq!(by.get("PoolResource"), Some(&1), "{by:?}");
    let a = AsyncResource::<SimDriver>::new(Arc::clone(&g)).unwrap();
    let y = a.allocate(100, S).unwrap();
    a.deallocate(y, 100, S).unwrap();
    assert_eq!(
        g.device_allocations_by_caller().get("AsyncResource"),
        Some(&1)
    );
}

/// Twenty thousand streams, each taking the blocks the one before freed: the bins keep free
/// stacks for a bounded number of streams and find each in constant time.
#[test]
fn fixed_size_per_stream_state_is_bounded_over_many_streams() {
    let g = Arc::new(
        SimDriver::new(
            SimConfig::new(5)
                .memory_per_device(GIB)
                .track_races(false)
                .record_trace(false),
        )
        .unwrap(),
    );
    let r = FixedSizeResource::new(cuda(&g), 4096).unwrap();
    let mut most = 0;
    for _ in 0..20_000 {
        let s = g.stream_create(false).unwrap();
        let x = r.allocate(4000, s).unwrap();
        r.deallocate(x, 4000, s).unwrap();
        g.stream_destroy(s).unwrap();
        most = most.max(r.stream_lists());
    }
    assert!(most <= 128, "{most} streams' stacks kept at once");
    assert_eq!(r.held_bytes(), 2 * MIB, "one chunk reused throughout");
}

/// `held` is what the device lost to a resource: for every named chain that tracks it (the
/// pools and what sits on one), equal to the driver's used memory since the chain was made,
/// after each step of a walk whose sizes go up and down on two streams with work on them (the
/// tight pool moving memory, keeping unmapped handles, waiting for streams before it unmaps),
/// and after a release; `None` for the chains that take every request from the driver.
#[test]
fn held_is_what_the_driver_counts_used() {
    for &(name, _) in emm_core::mr::named::NAMED_RESOURCES {
        let tracked = !matches!(name, "cuda" | "async" | "managed");
        let g = gpu();
        let r = emm_core::mr::named::build(name, g.clone()).unwrap();
        let free0 = g.mem_get_info().unwrap().free;
        let used = || free0 - g.mem_get_info().unwrap().free;
        let expect = |what: &str| {
            let want = tracked.then(used);
            assert_eq!(r.held(), want, "{name}, {what}");
        };
        let streams = [S, g.stream_create(true).unwrap()];
        let mut live: Vec<(emm_core::DevicePtr, usize, StreamId)> = Vec::new();
        for k in 0..120usize {
            let s = streams[k % 2];
            let bytes = ((k * 7919) % 48 + 1) << 20;
            let p = r.allocate(bytes, s).unwrap();
            g.memset_d8(p, 1, bytes, Some(s)).unwrap();
            // The program's own work between requests (virtual time): the tight pool's moves
            // get their share of it.
            g.host_sleep(2_000_000);
            live.push((p, bytes, s));
            if live.len() > 6 {
                let (p, bytes, s) = live.remove((k * 31) % live.len());
                r.deallocate(p, bytes, s).unwrap();
            }
            expect(&format!("step {k}"));
        }
        if name == "pool-vmm-tight" {
            let unmaps = g
                .trace()
                .iter()
                .filter(|e| e.call == CallKind::MemUnmap)
                .count();
            assert!(
                unmaps > 0,
                "the tight pool moved nothing: the walk tests no move"
            );
        }
        for (p, bytes, s) in live.drain(..) {
            r.deallocate(p, bytes, s).unwrap();
        }
        expect("everything freed");
        g.context_synchronize().unwrap();
        r.release().unwrap();
        expect("released");
        drop(r);
        g.stream_destroy(streams[1]).unwrap();
    }
}
