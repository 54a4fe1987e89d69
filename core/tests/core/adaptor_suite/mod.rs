//! The rules of `core/src/mr/mod.rs`, ported from RMM's generic resource tests
//! (`mr_ref_tests.hpp`), for any resource on the simulated GPU: zero bytes, sizes from 4 B to
//! 1 GiB aligned and distinct, 1 PiB out of memory and usable afterwards, alignment requests,
//! mixed random allocation and free, a producer on one stream and a consumer on another, four
//! threads at once, shared ownership. Every allocation is filled with its own byte and checked
//! before it is freed, so contents that bleed between allocations fail the suite; at the end the
//! simulator must report no violation (no race) and nothing held.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the suite"
)]

use std::sync::Arc;

use emm_core::mr::{DeviceMemoryResource, MrError};
use emm_core::workloads::SplitMix64;
use emm_core::{DevicePtr, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB, MIB};

/// An H100-sized simulated GPU with contents tracking on.
pub fn gpu() -> SimDriver {
    SimDriver::new(SimConfig::new(7)).expect("a valid simulator configuration")
}

/// What a resource does with alignments above 256 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alignment {
    /// Refuses them with `UnsupportedAlignment`.
    UpTo256,
    /// Honours any power of two.
    Any,
}

/// Bytes checked at each end of an allocation (filling all of a 1 GiB block would be slow).
const EDGE: usize = 4096;

/// Writes `tag` into the first and last bytes of `[ptr, ptr + len)` on `stream`.
pub fn fill(g: &SimDriver, ptr: DevicePtr, len: usize, tag: u8, stream: StreamId) {
    let n = len.min(EDGE);
    g.memset_d8(ptr, tag, n, Some(stream)).expect("memset head");
    g.memset_d8(ptr.offset((len - n) as u64), tag, n, Some(stream))
        .expect("memset tail");
}

/// Checks that the bytes [`fill`] wrote are still `tag`.
pub fn verify(g: &SimDriver, ptr: DevicePtr, len: usize, tag: u8, stream: StreamId) {
    let n = len.min(EDGE);
    let mut buf = vec![0u8; n];
    for at in [0, len - n] {
        g.memcpy_dtoh(&mut buf, ptr.offset(at as u64), Some(stream))
            .expect("read back");
        assert!(
            buf.iter().all(|&b| b == tag),
            "contents of {ptr} (+{at}) changed: another allocation overlaps it"
        );
    }
}

/// Panics if any two `(ptr, len)` ranges overlap.
pub fn assert_distinct(blocks: &[(DevicePtr, usize)]) {
    let mut sorted: Vec<_> = blocks.to_vec();
    sorted.sort_unstable_by_key(|b| b.0);
    for w in sorted.windows(2) {
        assert!(
            w[0].0 .0 + w[0].1 as u64 <= w[1].0 .0,
            "{} ({} bytes) overlaps {}",
            w[0].0,
            w[0].1,
            w[1].0
        );
    }
}

/// Runs every rule against `r`, then checks that the simulator saw no violation (no race,
/// no bad access). Call [`assert_released`] once the resource is dropped.
pub fn check_all<R: DeviceMemoryResource + 'static>(r: Arc<R>, g: &SimDriver, align: Alignment) {
    zero_bytes(&*r);
    sizes_are_aligned_and_distinct(&*r, g);
    out_of_memory_is_typed_and_recoverable(&*r);
    alignment_requests(&*r, g, align);
    mixed_random_allocations(&*r, g, 0x5EED);
    producer_and_consumer_on_two_streams(&*r, g);
    four_threads_at_once(&*r, g);
    shared_ownership(r);
    let report = g.report();
    assert!(report.violations.is_empty(), "{report}");
}

/// Checks that nothing is left on the simulated GPU: no memory, stream or event.
pub fn assert_released(g: &SimDriver) {
    let report = g.report();
    assert!(report.nothing_held(), "{report}");
}

pub fn zero_bytes(r: &dyn DeviceMemoryResource) {
    assert_eq!(r.allocate(0, StreamId::DEFAULT).unwrap(), DevicePtr::NULL);
    r.deallocate(DevicePtr::NULL, 0, StreamId::DEFAULT).unwrap();
    assert_eq!(
        r.allocate_aligned(0, 256, StreamId::DEFAULT).unwrap(),
        DevicePtr::NULL
    );
    r.deallocate_aligned(DevicePtr::NULL, 0, 256, StreamId::DEFAULT)
        .unwrap();
}

pub fn sizes_are_aligned_and_distinct(r: &dyn DeviceMemoryResource, g: &SimDriver) {
    let sizes = [4usize, 1024, MIB as usize, GIB as usize, 4, 1024];
    let mut blocks = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let p = r.allocate(size, StreamId::DEFAULT).unwrap();
        assert_ne!(p, DevicePtr::NULL);
        assert_eq!(p.0 % 256, 0, "{p} of {size} bytes is not 256-byte aligned");
        fill(g, p, size, i as u8 + 1, StreamId::DEFAULT);
        blocks.push((p, size));
    }
    assert_distinct(&blocks);
    for (i, &(p, size)) in blocks.iter().enumerate() {
        verify(g, p, size, i as u8 + 1, StreamId::DEFAULT);
        r.deallocate(p, size, StreamId::DEFAULT).unwrap();
    }
}

pub fn out_of_memory_is_typed_and_recoverable(r: &dyn DeviceMemoryResource) {
    let e = r.allocate(1 << 50, StreamId::DEFAULT).unwrap_err();
    assert!(e.is_out_of_memory(), "1 PiB: {e}");
    assert!(e.to_string().contains("PiB"), "{e}");
    let p = r.allocate(1024, StreamId::DEFAULT).unwrap();
    r.deallocate(p, 1024, StreamId::DEFAULT).unwrap();
}

pub fn alignment_requests(r: &dyn DeviceMemoryResource, g: &SimDriver, align: Alignment) {
    let p = r.allocate_aligned(64, 128, StreamId::DEFAULT).unwrap();
    assert_eq!(p.0 % 256, 0);
    r.deallocate_aligned(p, 64, 128, StreamId::DEFAULT).unwrap();
    assert!(matches!(
        r.allocate_aligned(64, 3, StreamId::DEFAULT),
        Err(MrError::InvalidArgument { .. })
    ));
    match align {
        Alignment::UpTo256 => assert!(matches!(
            r.allocate_aligned(64, 4096, StreamId::DEFAULT),
            Err(MrError::UnsupportedAlignment {
                alignment: 4096,
                ..
            })
        )),
        Alignment::Any => {
            let mut live = Vec::new();
            for (i, a) in [512usize, 4096, 65536, 1 << 21, 512, 1 << 21]
                .into_iter()
                .enumerate()
            {
                let size = 3000 * (i + 1);
                let p = r.allocate_aligned(size, a, StreamId::DEFAULT).unwrap();
                assert_eq!(p.0 % a as u64, 0, "{p} not aligned to {a}");
                // The whole block must be inside the memory the upstream gave.
                g.memset_d8(p, i as u8 + 1, size, None).unwrap();
                live.push((p, size, a, i as u8 + 1));
            }
            let blocks: Vec<_> = live.iter().map(|&(p, s, _, _)| (p, s)).collect();
            assert_distinct(&blocks);
            for (p, size, a, tag) in live {
                verify(g, p, size, tag, StreamId::DEFAULT);
                r.deallocate_aligned(p, size, a, StreamId::DEFAULT).unwrap();
            }
        }
    }
}

/// RMM's `test_mixed_random_allocation_free`: 53 % allocations, 200 steps, sizes to 1 MiB.
pub fn mixed_random_allocations(r: &dyn DeviceMemoryResource, g: &SimDriver, seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let mut live: Vec<(DevicePtr, usize, u8)> = Vec::new();
    for step in 0..200u32 {
        if live.is_empty() || rng.below(100) < 53 {
            let size = rng.range(1, MIB) as usize;
            let p = r.allocate(size, StreamId::DEFAULT).unwrap();
            assert_eq!(p.0 % 256, 0);
            let tag = (step % 251) as u8 + 1;
            fill(g, p, size, tag, StreamId::DEFAULT);
            live.push((p, size, tag));
        } else {
            let j = rng.below(live.len() as u64) as usize;
            let (p, size, tag) = live.swap_remove(j);
            verify(g, p, size, tag, StreamId::DEFAULT);
            r.deallocate(p, size, StreamId::DEFAULT).unwrap();
        }
    }
    let blocks: Vec<_> = live.iter().map(|&(p, s, _)| (p, s)).collect();
    assert_distinct(&blocks);
    for (p, size, tag) in live {
        verify(g, p, size, tag, StreamId::DEFAULT);
        r.deallocate(p, size, StreamId::DEFAULT).unwrap();
    }
}

/// The producer allocates and writes on stream A; the consumer waits on A's event, reads on B
/// and frees on B.
pub fn producer_and_consumer_on_two_streams(r: &dyn DeviceMemoryResource, g: &SimDriver) {
    let (a, b) = crate::common::two_streams(g);
    let done = g.event_create().unwrap();
    let mut sent = Vec::new();
    for i in 0..8u8 {
        let size = 4096 * (usize::from(i) + 1);
        let p = r.allocate(size, a).unwrap();
        fill(g, p, size, 0xA0 + i, a);
        sent.push((p, size, 0xA0 + i));
    }
    g.event_record(done, a).unwrap();
    g.stream_wait_event(b, done).unwrap();
    for (p, size, tag) in sent {
        g.device_access(p, size, b, false).unwrap();
        verify(g, p, size, tag, b);
        r.deallocate(p, size, b).unwrap();
    }
    g.stream_synchronize(b).unwrap();
    g.event_destroy(done).unwrap();
    g.stream_destroy(a).unwrap();
    g.stream_destroy(b).unwrap();
    assert_eq!(g.report().races().count(), 0, "{}", g.report());
}

/// Four threads, each on its own stream, allocating, filling, checking and freeing at once.
pub fn four_threads_at_once(r: &dyn DeviceMemoryResource, g: &SimDriver) {
    std::thread::scope(|s| {
        for t in 0..4u8 {
            s.spawn(move || {
                let stream = g.stream_create(true).unwrap();
                let mut rng = SplitMix64::new(u64::from(t) + 100);
                let mut live = Vec::new();
                for i in 0..60u32 {
                    let size = rng.range(1, 256 * 1024) as usize;
                    let p = r.allocate(size, stream).unwrap();
                    let tag = 1 + t * 60 + (i % 60) as u8;
                    fill(g, p, size, tag, stream);
                    live.push((p, size, tag));
                    if i % 3 == 2 {
                        let (p, size, tag) = live.swap_remove(0);
                        verify(g, p, size, tag, stream);
                        r.deallocate(p, size, stream).unwrap();
                    }
                }
                for (p, size, tag) in live {
                    verify(g, p, size, tag, stream);
                    r.deallocate(p, size, stream).unwrap();
                }
                g.stream_synchronize(stream).unwrap();
                g.stream_destroy(stream).unwrap();
            });
        }
    });
}

/// Two handles on one resource: memory from one is freed through the other.
pub fn shared_ownership<R: DeviceMemoryResource + 'static>(r: Arc<R>) {
    let other = Arc::clone(&r);
    assert!(r.is_equal(&*other));
    let p = r.allocate(4096, StreamId::DEFAULT).unwrap();
    other.deallocate(p, 4096, StreamId::DEFAULT).unwrap();
    let shared: Arc<dyn DeviceMemoryResource> = r;
    assert!(shared.is_equal(&*other));
}
