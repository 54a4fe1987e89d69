//! Regression tests for the simulator bugs the fuzzers (`fuzz/`) found.

use emm_core::{CudaCode, DeviceId, DevicePtr, Driver};
use emm_sim::{SimConfig, SimDriver, GIB, MIB};

fn gpu() -> SimDriver {
    SimDriver::new(SimConfig::new(1).memory_per_device(GIB)).unwrap()
}

/// Found by `sim_driver_ops`: a length near `u64::MAX` wrapped the bounds check, so a memset
/// of a 13 MiB allocation with it was accepted and filled memory until the process died.
#[test]
fn absurd_lengths_are_out_of_bounds_not_wrapped() {
    let g = gpu();
    let p = g.mem_alloc(13 * MIB as usize).unwrap();
    let huge = 18_446_582_620_600_190_148u64 as usize;
    let code = |r: Result<(), emm_core::DriverError>| r.unwrap_err().code;
    assert_eq!(code(g.memset_d8(p, 0, huge, None)), CudaCode::INVALID_VALUE);
    assert_eq!(
        code(g.memset_d8(p, 0, usize::MAX, None)),
        CudaCode::INVALID_VALUE
    );
    let q = g.mem_alloc(4096).unwrap();
    assert_eq!(
        code(g.memcpy_dtod(q, p, huge, None)),
        CudaCode::INVALID_VALUE
    );
    let e = g
        .memset_d8(p.offset(4096), 0, usize::MAX, None)
        .unwrap_err();
    assert!(e.detail.contains("past the end"), "{e}");
    // A pinned, mapped buffer: the same through the host-mapping check.
    let h = crate::mapped_host(&g, 4096);
    assert_eq!(
        code(g.memset_d8(DevicePtr(h.0), 1, huge, None)),
        CudaCode::INVALID_VALUE
    );
    let pageable = g.pageable_alloc(8192).unwrap();
    assert_eq!(
        code(g.host_register(pageable.offset(4096), huge, true)),
        CudaCode::INVALID_VALUE
    );
    // Nothing was written: the allocations still read as fresh memory, and all frees work.
    g.memset_d8(p, 7, 16, None).unwrap();
    let mut back = [0u8; 16];
    g.memcpy_dtoh(&mut back, p, None).unwrap();
    assert_eq!(back, [7; 16]);
    for d in [p, q] {
        g.mem_free(d).unwrap();
    }
    g.host_free(h).unwrap();
    g.pageable_free(pageable).unwrap();
    assert!(g.report().nothing_held(), "{}", g.report());
    assert_eq!(g.device_memory_used(DeviceId(0)), 0);
}
