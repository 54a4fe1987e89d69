//! Host memory: mapped and unmapped allocations, registering ranges.

use super::*;

#[test]
fn mapped_host_memory_has_a_device_pointer_and_unmapped_does_not() {
    let g = gpu();
    let mapped = crate::mapped_host(&g, 4096);
    let d = g.host_device_pointer(mapped).unwrap();
    g.host_write(mapped, b"abc").unwrap();
    let mut back = [0; 3];
    g.memcpy_dtoh(&mut back, d, None).unwrap();
    assert_eq!(&back, b"abc");
    g.device_access(d, 4096, StreamId::DEFAULT, true).unwrap();
    let plain = g.host_alloc(4096, HostAllocFlags::default()).unwrap();
    assert_eq!(code(g.host_device_pointer(plain)), CudaCode::INVALID_VALUE);
    assert_eq!(
        code(g.device_access(DevicePtr(plain.0), 16, StreamId::DEFAULT, false)),
        CudaCode::ILLEGAL_ADDRESS
    );
}

#[test]
fn registering_a_range_twice_is_an_error_and_unregister_allows_it_again() {
    let g = gpu();
    let h = g.pageable_alloc(1 << 20).unwrap();
    g.host_register(h, 4096, true).unwrap();
    assert_eq!(
        code(g.host_register(h, 4096, false)),
        CudaCode::HOST_MEMORY_ALREADY_REGISTERED
    );
    assert_eq!(
        code(g.host_register(h.offset(2048), 4096, false)),
        CudaCode::HOST_MEMORY_ALREADY_REGISTERED
    );
    g.host_register(h.offset(4096), 4096, false).unwrap();
    assert_eq!(g.host_device_pointer(h).unwrap(), DevicePtr(h.0));
    assert_eq!(
        code(g.host_device_pointer(h.offset(4096))),
        CudaCode::INVALID_VALUE
    );
    assert_eq!(
        code(g.pageable_free(h)),
        CudaCode::INVALID_VALUE,
        "still registered"
    );
    g.host_unregister(h).unwrap();
    assert_eq!(
        code(g.host_unregister(h)),
        CudaCode::HOST_MEMORY_NOT_REGISTERED
    );
    g.host_register(h, 4096, false).unwrap();
    g.host_unregister(h).unwrap();
    g.host_unregister(h.offset(4096)).unwrap();
    g.pageable_free(h).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
    let pinned = g.host_alloc(64, HostAllocFlags::default()).unwrap();
    assert_eq!(
        code(g.host_register(pinned, 64, false)),
        CudaCode::HOST_MEMORY_ALREADY_REGISTERED
    );
    assert_eq!(
        code(g.host_register(emm_core::HostPtr(0x1234), 64, false)),
        CudaCode::INVALID_VALUE
    );
}
