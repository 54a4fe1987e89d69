//! `PrefetchAdaptor`: new managed allocations are prefetched to the device on their stream;
//! a failed prefetch gives the memory back (rollback). The upstream is `ManagedResource`.

use crate::adaptor_suite;

use std::sync::Arc;

use adaptor_suite::{assert_released, check_all, Alignment};
use emm_core::mr::{CudaResource, DeviceMemoryResource, ManagedResource, MrError, PrefetchAdaptor};
use emm_core::{CudaCode, DeviceId, Driver, Location, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, GIB};

fn gpu() -> SimDriver {
    SimDriver::new(SimConfig::new(12).memory_per_device(4 * GIB)).unwrap()
}

#[test]
fn keeps_the_rules() {
    let g = gpu();
    let r = Arc::new(PrefetchAdaptor::new(ManagedResource::new(g.clone())));
    check_all(Arc::clone(&r), &g, Alignment::UpTo256);
    drop(r);
    assert_released(&g);
}

#[test]
fn a_new_allocation_is_resident_on_the_device_after_its_stream() {
    let g = gpu();
    let r = PrefetchAdaptor::new(ManagedResource::new(g.clone()));
    let s = g.stream_create(true).unwrap();
    let size = 1 << 20;
    let p = r.allocate(size, s).unwrap();
    g.stream_synchronize(s).unwrap();
    assert_eq!(g.residency(p), Some(Location::Device(DeviceId(0))));
    assert_eq!(
        g.residency(p.offset(size as u64 - 1)),
        Some(Location::Device(DeviceId(0)))
    );
    // The first kernel finds every page there: no fault.
    g.device_access(p, size, s, true).unwrap();
    assert_eq!(g.managed_stats().faults, 0);
    let prefetches = g
        .trace()
        .iter()
        .filter(|e| e.call == CallKind::MemPrefetch)
        .map(|e| (e.caller, e.args))
        .collect::<Vec<_>>();
    assert_eq!(prefetches, [("PrefetchAdaptor", [p.0, size as u64, 0])]);
    r.deallocate(p, size, s).unwrap();
    g.stream_destroy(s).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn a_failed_prefetch_gives_the_memory_back() {
    let g = gpu();
    let r = PrefetchAdaptor::new(ManagedResource::new(g.clone()));
    g.inject(Fault::FailNth {
        call: Some(CallKind::MemPrefetch),
        nth: 1,
        code: CudaCode::UNKNOWN,
    });
    let e = r.allocate(4096, StreamId::DEFAULT).unwrap_err();
    assert!(
        matches!(&e, MrError::Driver(d) if d.code == CudaCode::UNKNOWN),
        "{e}"
    );
    assert_eq!(g.report().managed_memory.count, 0, "rolled back");
    let p = r.allocate(4096, StreamId::DEFAULT).unwrap();
    r.deallocate(p, 4096, StreamId::DEFAULT).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn device_memory_cannot_be_prefetched_and_is_given_back() {
    let g = gpu();
    let r = PrefetchAdaptor::new(CudaResource::new(g.clone()));
    let e = r.allocate(4096, StreamId::DEFAULT).unwrap_err();
    assert!(
        matches!(&e, MrError::Driver(d) if d.call == "cuMemPrefetchAsync"),
        "{e}"
    );
    assert_eq!(g.report().device_memory.count, 0);
    assert!(matches!(
        r.allocate_aligned(4096, 256, StreamId::DEFAULT),
        Err(MrError::Driver(_))
    ));
    assert_eq!(g.report().device_memory.count, 0);
}
