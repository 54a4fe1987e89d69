//! `LimitingAdaptor`: the limit holds exactly, out of memory is typed with what is left,
//! frees make room, and failed upstream calls change nothing (rollback).

use emm_core::mr::{
    CudaResource, DeviceMemoryResource, LimitingAdaptor, MrError, StatisticsAdaptor,
};
use emm_core::{CudaCode, DevicePtr, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, GIB, MIB};

const S: StreamId = StreamId::DEFAULT;

fn gpu() -> SimDriver {
    SimDriver::new(SimConfig::new(5).memory_per_device(GIB)).unwrap()
}

#[test]
fn the_limit_holds_and_frees_make_room() {
    let g = gpu();
    let r = LimitingAdaptor::new(CudaResource::new(g.clone()), MIB);
    let a = r.allocate((MIB / 2) as usize, S).unwrap();
    let b = r.allocate((MIB / 2) as usize, S).unwrap();
    assert_eq!(r.allocated_bytes(), MIB);
    let e = r.allocate(1, S).unwrap_err();
    assert_eq!(
        e,
        MrError::OutOfMemory {
            resource: "LimitingAdaptor",
            requested: 1,
            available: Some(0)
        }
    );
    assert!(e.to_string().contains("0 B available"), "{e}");
    r.deallocate(a, (MIB / 2) as usize, S).unwrap();
    assert_eq!(r.available_bytes(), MIB / 2);
    let c = r.allocate(1000, S).unwrap();
    for (p, n) in [(b, MIB / 2), (c, 1000)] {
        r.deallocate(p, n as usize, S).unwrap();
    }
    assert_eq!(r.allocated_bytes(), 0);
    assert_eq!(g.report().device_memory.count, 0);
}

#[test]
fn sizes_count_rounded_to_256_bytes() {
    let g = gpu();
    let r = LimitingAdaptor::new(CudaResource::new(g.clone()), 1024);
    let ptrs: Vec<DevicePtr> = (0..4).map(|_| r.allocate(1, S).unwrap()).collect();
    assert_eq!(r.allocated_bytes(), 1024);
    assert!(r.allocate(1, S).unwrap_err().is_out_of_memory());
    for p in ptrs {
        r.deallocate(p, 1, S).unwrap();
    }
    assert!(r.allocate(usize::MAX, S).unwrap_err().is_out_of_memory());
    assert_eq!(r.allocated_bytes(), 0);
}

#[test]
fn an_upstream_failure_releases_the_reservation() {
    let g = gpu();
    let r = LimitingAdaptor::new(CudaResource::new(g.clone()), 512 * MIB);
    // The device runs out below the limit: the upstream fails, the count comes back.
    g.inject(Fault::OutOfMemoryAbove {
        device: None,
        bytes: 64 * MIB,
    });
    let e = r.allocate((100 * MIB) as usize, S).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    assert_eq!(r.allocated_bytes(), 0);
    g.inject(Fault::FailNth {
        call: Some(CallKind::MemAlloc),
        nth: 1,
        code: CudaCode::UNKNOWN,
    });
    assert!(matches!(r.allocate(4096, S), Err(MrError::Driver(_))));
    assert_eq!(r.allocated_bytes(), 0);
    g.clear_faults();
    let p = r.allocate((100 * MIB) as usize, S).unwrap();
    r.deallocate(p, (100 * MIB) as usize, S).unwrap();
}

#[test]
fn a_refused_free_changes_nothing() {
    let g = gpu();
    let r = LimitingAdaptor::new(CudaResource::new(g.clone()), MIB);
    let p = r.allocate(4096, S).unwrap();
    r.deallocate(p, 4096, S).unwrap();
    assert!(matches!(
        r.deallocate(p, 4096, S),
        Err(MrError::InvalidFree { .. })
    ));
    assert_eq!(
        r.allocated_bytes(),
        0,
        "a double free does not go below zero"
    );
    let q = r.allocate(4096, S).unwrap();
    g.inject(Fault::FailNth {
        call: Some(CallKind::MemFree),
        nth: 1,
        code: CudaCode::UNKNOWN,
    });
    assert!(r.deallocate(q, 4096, S).is_err());
    assert_eq!(r.allocated_bytes(), 4096, "still allocated");
    r.deallocate(q, 4096, S).unwrap();
    assert_eq!(r.allocated_bytes(), 0);
}

#[test]
fn memory_info_reports_the_limit() {
    let g = gpu();
    let r = LimitingAdaptor::new(CudaResource::new(g.clone()), 10 * MIB);
    let p = r.allocate(MIB as usize, S).unwrap();
    let info = r.memory_info().unwrap();
    assert_eq!((info.free, info.total), (9 * MIB, 10 * MIB));
    r.deallocate(p, MIB as usize, S).unwrap();
    // A limit above the device: the device's own figures cap it.
    let big = LimitingAdaptor::new(CudaResource::new(g.clone()), 100 * GIB);
    assert_eq!(big.memory_info().unwrap().total, GIB);
}

#[test]
fn four_threads_never_exceed_the_limit() {
    let g = gpu();
    let limit = 3 * MIB;
    // Statistics below the limit see what really reached the device.
    let r = LimitingAdaptor::new(StatisticsAdaptor::new(CudaResource::new(g.clone())), limit);
    let refused = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (r, refused) = (&r, &refused);
            s.spawn(move || {
                let mut live = Vec::new();
                for i in 0..200u64 {
                    let size = (256 * 1024 * (1 + (i * 7 + t) % 5)) as usize;
                    match r.allocate(size, S) {
                        Ok(p) => live.push((p, size)),
                        Err(e) => {
                            assert!(e.is_out_of_memory(), "{e}");
                            refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    if live.len() > 3 {
                        let (p, n) = live.remove(0);
                        r.deallocate(p, n, S).unwrap();
                    }
                }
                for (p, n) in live {
                    r.deallocate(p, n, S).unwrap();
                }
            });
        }
    });
    let peak = r.upstream().bytes_counter().peak;
    assert!(peak as u64 <= limit, "peak {peak} above the limit {limit}");
    assert!(refused.into_inner() > 0, "the workload must hit the limit");
    assert_eq!(r.allocated_bytes(), 0);
}
