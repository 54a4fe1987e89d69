//! `AlignedAdaptor`: any power-of-two alignment by over-allocating, the original pointer
//! remembered and given back, plain allocations aligned above a threshold, bad requests refused.

use emm_core::mr::{
    AlignedAdaptor, CudaResource, DeviceMemoryResource, MrError, StatisticsAdaptor,
};
use emm_core::{DevicePtr, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB, MIB};

const S: StreamId = StreamId::DEFAULT;

type Counted = StatisticsAdaptor<CudaResource<SimDriver>>;

fn aligned() -> (SimDriver, AlignedAdaptor<Counted>) {
    let g = SimDriver::new(SimConfig::new(8).memory_per_device(GIB)).unwrap();
    let r = AlignedAdaptor::new(StatisticsAdaptor::new(CudaResource::new(g.clone())));
    (g, r)
}

#[test]
fn large_alignments_over_allocate_and_give_the_original_back() {
    let (g, r) = aligned();
    let mut live = Vec::new();
    // A small block first, so that later upstream pointers are not all 2 MiB aligned.
    let small = r.allocate(256, S).unwrap();
    for a in [512usize, 4096, 1 << 16, 1 << 21, 1 << 24] {
        let p = r.allocate_aligned(10_000, a, S).unwrap();
        assert_eq!(p.0 % a as u64, 0, "{p} not aligned to {a}");
        // The whole block lies inside the upstream's allocation.
        let (base, size) = g.mem_get_address_range(p).unwrap();
        assert!(p.0 + 10_000 <= base.0 + size as u64);
        live.push((p, a));
    }
    // Upstream bytes: each asked for 10 000 + a - 256.
    let upstream_bytes: i64 = 256
        + [512i64, 4096, 1 << 16, 1 << 21, 1 << 24]
            .iter()
            .map(|a| 10_000 + a - 256)
            .sum::<i64>();
    assert_eq!(r.upstream().bytes_counter().value, upstream_bytes);
    assert!(r.shifted_count() > 0, "some pointers had to move");
    for (p, a) in live {
        r.deallocate_aligned(p, 10_000, a, S).unwrap();
    }
    r.deallocate(small, 256, S).unwrap();
    assert_eq!(r.shifted_count(), 0);
    assert_eq!(r.upstream().bytes_counter().value, 0);
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn alignments_up_to_256_go_straight_through() {
    let (_g, r) = aligned();
    for a in [1usize, 8, 64, 256] {
        let p = r.allocate_aligned(1000, a, S).unwrap();
        assert_eq!(p.0 % 256, 0);
        assert_eq!(r.upstream().bytes_counter().value, 1000, "no padding");
        r.deallocate_aligned(p, 1000, a, S).unwrap();
    }
}

#[test]
fn with_alignment_aligns_plain_allocations_from_the_threshold() {
    let g = SimDriver::new(SimConfig::new(8).memory_per_device(GIB)).unwrap();
    let r = AlignedAdaptor::with_alignment(
        StatisticsAdaptor::new(CudaResource::new(g.clone())),
        1 << 16,
        MIB as usize,
    )
    .unwrap();
    assert_eq!((r.alignment(), r.threshold()), (1 << 16, MIB as usize));
    let small = r.allocate(1000, S).unwrap();
    assert_eq!(
        r.upstream().bytes_counter().value,
        1000,
        "below the threshold"
    );
    let big: Vec<DevicePtr> = (0..4)
        .map(|_| r.allocate(MIB as usize, S).unwrap())
        .collect();
    for p in &big {
        assert_eq!(p.0 % (1 << 16), 0, "{p}");
    }
    for p in big {
        r.deallocate(p, MIB as usize, S).unwrap();
    }
    r.deallocate(small, 1000, S).unwrap();
    assert_eq!(r.upstream().bytes_counter().value, 0);
    assert_eq!(r.shifted_count(), 0);
    assert!(g.report().is_clean(), "{}", g.report());
    assert!(matches!(
        AlignedAdaptor::with_alignment(CudaResource::new(g), 3000, 0),
        Err(MrError::InvalidArgument { .. })
    ));
}

#[test]
fn bad_requests_are_refused_and_lose_nothing() {
    let (g, r) = aligned();
    assert!(matches!(
        r.allocate_aligned(64, 768, S),
        Err(MrError::InvalidArgument { .. })
    ));
    // The padded size does not fit: out of memory, not a panic or a wrap.
    assert!(r
        .allocate_aligned(usize::MAX - 100, 4096, S)
        .unwrap_err()
        .is_out_of_memory());
    assert!(r
        .allocate_aligned(1 << 50, 1 << 20, S)
        .unwrap_err()
        .is_out_of_memory());
    // Double free of a shifted pointer: refused by the upstream, the table unchanged.
    let pad = r.allocate(256, S).unwrap();
    let p = r.allocate_aligned(5000, 1 << 20, S).unwrap();
    let shifted = r.shifted_count();
    assert_eq!(shifted, 1);
    let e = r.deallocate_aligned(p, 5000, 1 << 21, S).unwrap_err();
    assert!(
        e.to_string().contains("allocated at alignment 1048576"),
        "{e}"
    );
    assert_eq!(r.shifted_count(), 1, "rolled back");
    r.deallocate_aligned(p, 5000, 1 << 20, S).unwrap();
    assert_eq!(r.shifted_count(), 0);
    assert!(matches!(
        r.deallocate_aligned(p, 5000, 1 << 20, S),
        Err(MrError::InvalidFree { .. })
    ));
    assert!(matches!(
        r.deallocate_aligned(p, usize::MAX, 1 << 20, S),
        Err(MrError::InvalidFree { .. })
    ));
    r.deallocate(pad, 256, S).unwrap();
    assert_eq!(g.report().device_memory.count, 0);
}
