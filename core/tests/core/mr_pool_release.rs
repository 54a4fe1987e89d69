//! The pool gives back memory freed on any stream when the upstream runs out, and at release.

use emm_core::mr::{Backing, CudaResource, DeviceMemoryResource, PoolOptions, PoolResource};
use emm_core::{Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB, MIB};

#[test]
fn out_of_memory_gives_back_chunks_freed_on_other_streams() {
    let g = SimDriver::new(SimConfig::new(1).memory_per_device(GIB)).unwrap();
    // Chunks: an expandable segment fits the big request at once (mr_pool_expandable.rs).
    let pool = PoolResource::with_options(
        CudaResource::new(g.clone()),
        PoolOptions::default().backing(Backing::Chunks),
    )
    .unwrap();
    let s1 = g.stream_create(true).unwrap();
    let a = pool.allocate(1, s1).unwrap();
    let b = pool.allocate(1, StreamId::DEFAULT).unwrap();
    let big = (GIB - MIB) as usize;
    assert!(pool
        .allocate(big, StreamId::DEFAULT)
        .unwrap_err()
        .is_out_of_memory());
    pool.deallocate(a, 1, s1).unwrap();
    pool.deallocate(b, 1, StreamId::DEFAULT).unwrap();
    let p = pool.allocate(big, StreamId::DEFAULT).unwrap();
    pool.deallocate(p, big, StreamId::DEFAULT).unwrap();
    pool.release().unwrap();
    assert_eq!(g.device_memory_used(emm_core::DeviceId(0)), 0);
}

#[test]
fn release_gives_back_blocks_freed_on_another_stream_than_their_allocation() {
    let g = SimDriver::new(SimConfig::new(1).memory_per_device(GIB)).unwrap();
    let pool = PoolResource::new(CudaResource::new(g.clone()));
    let (a, b) = crate::common::two_streams(&g);
    let e = g.event_create().unwrap();
    let ptrs: Vec<_> = (0..8).map(|_| pool.allocate(8192, a).unwrap()).collect();
    g.event_record(e, a).unwrap();
    g.stream_wait_event(b, e).unwrap();
    for (i, p) in ptrs.into_iter().enumerate() {
        pool.deallocate(p, 8192, if i % 2 == 0 { b } else { a })
            .unwrap();
    }
    pool.release().unwrap();
    assert_eq!(
        g.device_memory_used(emm_core::DeviceId(0)),
        0,
        "{}",
        g.report()
    );
}
