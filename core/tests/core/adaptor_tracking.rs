//! `TrackingAdaptor`: outstanding allocations, the leak report, backtraces, and bad frees
//! (wrong size, wrong alignment, foreign, double) refused before they reach the upstream.

use emm_core::mr::{AlignedAdaptor, CudaResource, DeviceMemoryResource, MrError, TrackingAdaptor};
use emm_core::{CudaCode, DevicePtr, Driver, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, GIB};

const S: StreamId = StreamId::DEFAULT;

fn tracking(backtraces: bool) -> (SimDriver, TrackingAdaptor<CudaResource<SimDriver>>) {
    let g = SimDriver::new(SimConfig::new(9).memory_per_device(GIB)).unwrap();
    let r = TrackingAdaptor::new(CudaResource::new(g.clone()), backtraces);
    (g, r)
}

#[test]
fn outstanding_allocations_are_listed_oldest_first() {
    let (g, r) = tracking(false);
    let s = g.stream_create(true).unwrap();
    let a = r.allocate(1024, S).unwrap();
    let b = r.allocate(3 << 20, s).unwrap();
    let c = r.allocate(100, S).unwrap();
    r.deallocate(a, 1024, S).unwrap();
    assert_eq!(r.outstanding_count(), 2);
    assert_eq!(r.allocated_bytes(), (3 << 20) + 100);
    let out = r.outstanding();
    assert_eq!(
        out.iter()
            .map(|o| (o.ptr, o.bytes, o.stream, o.sequence))
            .collect::<Vec<_>>(),
        [(b, 3 << 20, s, 2), (c, 100, S, 3)]
    );
    assert!(out.iter().all(|o| o.backtrace.is_none()));
    insta::assert_snapshot!(r.leak_report().to_string());
    r.deallocate(b, 3 << 20, s).unwrap();
    r.deallocate(c, 100, S).unwrap();
    let empty = r.leak_report();
    assert!(empty.is_empty());
    assert_eq!(
        empty.to_string(),
        "TrackingAdaptor: no outstanding allocations"
    );
    g.stream_destroy(s).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn a_wrong_size_free_is_an_error_and_changes_nothing() {
    let (g, r) = tracking(false);
    let p = r.allocate(1024, S).unwrap();
    let calls = g.call_count();
    let e = r.deallocate(p, 1000, S).unwrap_err();
    let MrError::InvalidFree { reason, bytes, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(*bytes, 1000);
    assert!(
        reason.contains("wrong size") && reason.contains("1024"),
        "{e}"
    );
    assert_eq!(g.call_count(), calls, "the upstream never saw it");
    assert_eq!(r.outstanding_count(), 1);
    assert_eq!(r.allocated_bytes(), 1024);
    r.deallocate(p, 1024, S).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn foreign_pointers_and_double_frees_never_reach_the_upstream() {
    let (g, r) = tracking(false);
    let p = r.allocate(4096, S).unwrap();
    let foreign = g.mem_alloc(4096).unwrap();
    for bad in [foreign, p.offset(256), DevicePtr(0x1234_5600)] {
        let e = r.deallocate(bad, 4096, S).unwrap_err();
        assert!(e.to_string().contains("not outstanding"), "{e}");
    }
    r.deallocate(p, 4096, S).unwrap();
    let e = r.deallocate(p, 4096, S).unwrap_err();
    assert!(e.to_string().contains("double free"), "{e}");
    g.mem_free(foreign).unwrap();
    // The simulator saw no bad free at all: the adaptor stopped every one.
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn aligned_memory_must_be_freed_with_its_alignment() {
    let g = SimDriver::new(SimConfig::new(9).memory_per_device(GIB)).unwrap();
    let r = TrackingAdaptor::new(AlignedAdaptor::new(CudaResource::new(g.clone())), false);
    let p = r.allocate_aligned(1000, 4096, S).unwrap();
    let e = r.deallocate(p, 1000, S).unwrap_err();
    assert!(e.to_string().contains("wrong alignment"), "{e}");
    let e = r.deallocate_aligned(p, 1000, 8192, S).unwrap_err();
    assert!(e.to_string().contains("4096"), "{e}");
    r.deallocate_aligned(p, 1000, 4096, S).unwrap();
    // 256 and plain are the same alignment.
    let q = r.allocate_aligned(64, 256, S).unwrap();
    r.deallocate(q, 64, S).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn a_refused_upstream_free_keeps_the_allocation_tracked() {
    let (g, r) = tracking(false);
    let p = r.allocate(4096, S).unwrap();
    g.inject(Fault::FailNth {
        call: Some(CallKind::MemFree),
        nth: 1,
        code: CudaCode::UNKNOWN,
    });
    assert!(matches!(r.deallocate(p, 4096, S), Err(MrError::Driver(_))));
    assert_eq!(r.outstanding_count(), 1, "rolled back");
    assert_eq!(r.allocated_bytes(), 4096);
    r.deallocate(p, 4096, S).unwrap();
    assert_eq!(r.outstanding_count(), 0);
}

#[test]
fn a_failed_allocation_is_not_tracked() {
    let (_g, r) = tracking(false);
    assert!(r.allocate(1 << 50, S).unwrap_err().is_out_of_memory());
    assert_eq!(r.outstanding_count(), 0);
    assert_eq!(r.allocate(0, S).unwrap(), DevicePtr::NULL);
    assert_eq!(r.outstanding_count(), 0, "zero bytes is not an allocation");
}

#[inline(never)]
fn allocate_somewhere_recognisable(r: &dyn DeviceMemoryResource) -> DevicePtr {
    r.allocate(2048, S).unwrap()
}

#[test]
fn backtraces_show_where_a_leak_was_allocated() {
    let (_g, r) = tracking(true);
    let p = allocate_somewhere_recognisable(&r);
    let out = r.outstanding();
    assert!(out[0].backtrace.is_some());
    let report = r.leak_report().to_string();
    assert!(report.contains("allocated at:"), "{report}");
    assert!(
        report.contains("allocate_somewhere_recognisable"),
        "the backtrace names the allocating function: {report}"
    );
    r.deallocate(p, 2048, S).unwrap();
}

#[test]
fn tracking_is_exact_under_four_threads() {
    let (g, r) = tracking(false);
    std::thread::scope(|s| {
        for t in 0..4usize {
            let r = &r;
            s.spawn(move || {
                let mut keep = Vec::new();
                for i in 0..100usize {
                    let size = 512 + t * 100 + i;
                    let p = r.allocate(size, S).unwrap();
                    if i % 10 == 0 {
                        keep.push((p, size));
                    } else {
                        r.deallocate(p, size, S).unwrap();
                    }
                }
                keep
            });
        }
    });
    assert_eq!(r.outstanding_count(), 40);
    let report = r.leak_report();
    assert_eq!(report.allocations.len(), 40);
    assert!(report
        .allocations
        .windows(2)
        .all(|w| w[0].sequence < w[1].sequence));
    for o in report.allocations {
        r.deallocate(o.ptr, o.bytes as usize, o.stream).unwrap();
    }
    assert!(g.report().is_clean(), "{}", g.report());
}
