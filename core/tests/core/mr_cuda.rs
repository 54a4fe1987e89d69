//! `CudaResource` on the simulated GPU.

use emm_core::mr::{CudaResource, DeviceMemoryResource, MrError};
use emm_core::{DevicePtr, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

#[test]
fn allocates_frees_and_refuses_bad_frees() {
    let g = SimDriver::new(SimConfig::new(1).memory_per_device(GIB)).unwrap();
    let r = CudaResource::new(g.clone());
    assert_eq!(r.allocate(0, StreamId::DEFAULT).unwrap(), DevicePtr::NULL);
    r.deallocate(DevicePtr::NULL, 0, StreamId::DEFAULT).unwrap();
    let p = r.allocate(1000, StreamId::DEFAULT).unwrap();
    assert_eq!(p.0 % 256, 0);
    let e = r.allocate(1 << 50, StreamId::DEFAULT).unwrap_err();
    assert!(
        matches!(e, MrError::OutOfMemory { requested, available: Some(_), .. } if requested == 1 << 50),
        "{e}"
    );
    assert!(e.to_string().contains("1.0 PiB"), "{e}");
    assert!(matches!(
        r.allocate_aligned(64, 4096, StreamId::DEFAULT),
        Err(MrError::UnsupportedAlignment { .. })
    ));
    assert!(matches!(
        r.allocate_aligned(64, 3, StreamId::DEFAULT),
        Err(MrError::InvalidArgument { .. })
    ));
    r.deallocate(p, 1000, StreamId::DEFAULT).unwrap();
    assert!(matches!(
        r.deallocate(p, 1000, StreamId::DEFAULT),
        Err(MrError::InvalidFree { .. })
    ));
    assert!(r.is_equal(&r.clone()), "clones share the driver");
    let other = SimDriver::new(SimConfig::new(2)).unwrap();
    assert!(!r.is_equal(&CudaResource::new(other)));
    assert_eq!(
        g.device_allocations_by_caller().get("CudaResource"),
        Some(&1)
    );
}
