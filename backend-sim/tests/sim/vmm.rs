//! Virtual memory management on the simulated GPU: reservations use no memory, physical memory
//! counts from creation, mapped ranges get the checks ordinary allocations get (contents, use
//! after free, bounds, races), and misuse is a clear error and a reported violation.

use emm_core::{CudaCode, DeviceId, DevicePtr, Driver, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, Violation, GIB, MIB};

const G: usize = 2 << 20;
const D0: DeviceId = DeviceId(0);

fn sim() -> SimDriver {
    SimDriver::new(SimConfig::new(21).memory_per_device(GIB)).unwrap()
}

/// A reservation of `granules` granules with the first `mapped` mapped and accessible.
fn mapped(d: &SimDriver, granules: usize, mapped: usize) -> (DevicePtr, Vec<emm_core::PhysHandle>) {
    let base = d.mem_address_reserve(granules * G, 0).unwrap();
    let handles: Vec<_> = (0..mapped)
        .map(|i| {
            let h = d.mem_create(G, D0).unwrap();
            d.mem_map(base.offset((i * G) as u64), G, h).unwrap();
            h
        })
        .collect();
    if mapped > 0 {
        d.mem_set_access(base, mapped * G, D0).unwrap();
    }
    (base, handles)
}

fn teardown(d: &SimDriver, base: DevicePtr, granules: usize, handles: &[emm_core::PhysHandle]) {
    for (i, h) in handles.iter().enumerate() {
        d.mem_unmap(base.offset((i * G) as u64), G).unwrap();
        d.mem_release(*h).unwrap();
    }
    d.mem_address_free(base, granules * G).unwrap();
}

#[test]
fn memory_counts_from_creation_and_the_report_sees_every_piece() {
    let d = sim();
    assert_eq!(d.mem_get_allocation_granularity(D0).unwrap(), G);
    let base = d.mem_address_reserve(64 * G, 0).unwrap();
    assert_eq!(
        d.device_memory_used(D0),
        0,
        "a reservation is address space only"
    );
    let h = d.mem_create(3 * G, D0).unwrap();
    assert_eq!(d.device_memory_used(D0), 3 * G as u64);
    assert_eq!(d.mem_get_info().unwrap().free, GIB - 3 * G as u64);
    d.mem_map(base.offset(G as u64), 3 * G, h).unwrap();
    let r = d.report();
    assert_eq!(
        (r.reservations.count, r.reservations.bytes),
        (1, 64 * G as u64)
    );
    assert_eq!((r.mappings.count, r.mappings.bytes), (1, 3 * G as u64));
    assert_eq!(
        (r.physical_memory.count, r.leaked_bytes()),
        (1, 3 * G as u64)
    );
    assert!(
        r.leaks.iter().any(|l| l.kind.contains("cuMemCreate")),
        "{r}"
    );
    assert!(!r.nothing_held());
    // The mapping is the allocation cuMemGetAddressRange names.
    assert_eq!(
        d.mem_get_address_range(base.offset(G as u64 + 5)).unwrap(),
        (base.offset(G as u64), 3 * G)
    );
    assert_eq!(
        d.mem_get_address_range(base).unwrap_err().code,
        CudaCode::NOT_FOUND,
        "reserved but not mapped"
    );
    d.mem_unmap(base.offset(G as u64), 3 * G).unwrap();
    d.mem_release(h).unwrap();
    assert_eq!(d.device_memory_used(D0), 0);
    d.mem_address_free(base, 64 * G).unwrap();
    assert!(d.report().is_clean(), "{}", d.report());
}

#[test]
fn bytes_cross_mappings_and_follow_physical_memory_to_a_new_address() {
    let d = sim();
    let (base, hs) = mapped(&d, 4, 2);
    let data: Vec<u8> = (0..2 * G).map(|i| (i % 251) as u8).collect();
    d.memcpy_htod(base, &data, None).unwrap();
    d.memcpy_dtod(base.offset(G as u64 - 8), base, 16, None)
        .unwrap();
    let mut back = vec![0; 2 * G];
    d.memcpy_dtoh(&mut back, base, None).unwrap();
    assert_eq!(back[G - 8..G + 8], data[..16], "a copy across the boundary");
    // Unmap the first granule and map its memory at the end of the reservation.
    d.mem_unmap(base, G).unwrap();
    d.mem_map(base.offset(3 * G as u64), G, hs[0]).unwrap();
    d.mem_set_access(base.offset(3 * G as u64), G, D0).unwrap();
    let mut moved = vec![0; G];
    d.memcpy_dtoh(&mut moved, base.offset(3 * G as u64), None)
        .unwrap();
    assert_eq!(moved[..G - 8], data[..G - 8]);
    d.mem_unmap(base.offset(3 * G as u64), G).unwrap();
    d.mem_unmap(base.offset(G as u64), G).unwrap();
    for h in hs {
        d.mem_release(h).unwrap();
    }
    d.mem_address_free(base, 4 * G).unwrap();
    assert!(d.report().is_clean(), "{}", d.report());
}

#[test]
fn unmapped_unreachable_and_foreign_bytes_are_caught() {
    let d = sim();
    let (base, hs) = mapped(&d, 3, 1);
    d.memset_d8(base, 1, G, None).unwrap();
    // The host cannot load device memory, mapped or not.
    assert!(d.host_read(base.as_host(), &mut [0; 4]).is_err());
    // Reserved but never mapped: out of bounds. Mapped without access: refused.
    assert_eq!(
        d.memset_d8(base.offset(G as u64 - 4), 1, 8, None)
            .unwrap_err()
            .code,
        CudaCode::ILLEGAL_ADDRESS
    );
    let h = d.mem_create(G, D0).unwrap();
    d.mem_map(base.offset(2 * G as u64), G, h).unwrap();
    let e = d
        .memset_d8(base.offset(2 * G as u64), 1, 8, None)
        .unwrap_err();
    assert!(e.to_string().contains("cuMemSetAccess"), "{e}");
    d.mem_unmap(base.offset(2 * G as u64), G).unwrap();
    d.mem_release(h).unwrap();
    // Unmapped: a use after free.
    d.mem_unmap(base, G).unwrap();
    assert_eq!(
        d.memset_d8(base, 1, 8, None).unwrap_err().code,
        CudaCode::ILLEGAL_ADDRESS
    );
    d.mem_release(hs[0]).unwrap();
    // A freed reservation: a use after free too.
    d.mem_address_free(base, 3 * G).unwrap();
    assert!(d.memset_d8(base, 1, 8, None).is_err());
    let v = d.report().violations;
    assert_eq!(
        v.iter()
            .filter(|v| matches!(v, Violation::UseAfterFree { .. }))
            .count(),
        2,
        "{v:?}"
    );
    assert!(v.iter().any(|v| matches!(v, Violation::OutOfBounds { .. })));
}

#[test]
fn misuse_is_refused_with_the_code_and_reported() {
    let d = sim();
    let (base, hs) = mapped(&d, 4, 1);
    let h = hs[0];
    let code = |r: emm_core::DriverResult<()>| r.unwrap_err().code;
    assert_eq!(
        code(d.mem_map(base, G, h)),
        CudaCode::ALREADY_MAPPED,
        "a handle again where it is mapped"
    );
    let h2 = d.mem_create(2 * G, D0).unwrap();
    assert_eq!(
        code(d.mem_map(base, G, h2)),
        CudaCode::ALREADY_MAPPED,
        "double map"
    );
    let h3 = d.mem_create(G, D0).unwrap();
    d.mem_map(base.offset(2 * G as u64), G, h3).unwrap();
    assert_eq!(
        code(d.mem_map(base.offset(G as u64), 2 * G, h2)),
        CudaCode::ALREADY_MAPPED,
        "a mapping inside the range, after a gap"
    );
    d.mem_unmap(base.offset(2 * G as u64), G).unwrap();
    d.mem_release(h3).unwrap();
    assert_eq!(
        code(d.mem_map(base.offset(G as u64), 3 * G, h2)),
        CudaCode::INVALID_VALUE,
        "more than the handle has"
    );
    assert_eq!(
        code(d.mem_map(base.offset(4096), G, h2)),
        CudaCode::INVALID_VALUE,
        "unaligned"
    );
    assert_eq!(
        code(d.mem_map(base.offset(3 * G as u64), 2 * G, h2)),
        CudaCode::INVALID_VALUE,
        "past the reservation"
    );
    assert_eq!(
        code(d.mem_map(DevicePtr(0x1000), G, h2)),
        CudaCode::INVALID_VALUE,
        "no reservation"
    );
    assert_eq!(
        code(d.mem_unmap(base.offset(G as u64), G)),
        CudaCode::INVALID_VALUE,
        "unmap of an unmapped range"
    );
    d.mem_map(base.offset(2 * G as u64), 2 * G, h2).unwrap();
    assert_eq!(
        code(d.mem_unmap(base.offset(2 * G as u64), G)),
        CudaCode::INVALID_VALUE,
        "part of a mapping"
    );
    assert_eq!(
        code(d.mem_unmap(base, 4 * G)),
        CudaCode::INVALID_VALUE,
        "a gap between mappings"
    );
    assert_eq!(
        code(d.mem_set_access(base, 4 * G, D0)),
        CudaCode::INVALID_VALUE,
        "not wholly mapped"
    );
    assert_eq!(
        code(d.mem_release(h)),
        CudaCode::ILLEGAL_STATE,
        "release of mapped memory"
    );
    assert_eq!(
        code(d.mem_address_free(base, 4 * G)),
        CudaCode::ILLEGAL_STATE,
        "a reservation with mappings"
    );
    assert_eq!(
        code(d.mem_free(base)),
        CudaCode::INVALID_VALUE,
        "cuMemFree of a reservation"
    );
    assert!(
        d.ipc_get_mem_handle(base).is_err(),
        "IPC exports cuMemAlloc memory only"
    );
    d.mem_unmap(base.offset(2 * G as u64), 2 * G).unwrap();
    d.mem_release(h2).unwrap();
    assert_eq!(
        code(d.mem_release(h2)),
        CudaCode::INVALID_VALUE,
        "double release"
    );
    teardown(&d, base, 4, &hs);
    assert_eq!(
        code(d.mem_address_free(base, 4 * G)),
        CudaCode::INVALID_VALUE,
        "double free"
    );
    // Sizes.
    assert_eq!(
        d.mem_address_reserve(G + 1, 0).unwrap_err().code,
        CudaCode::INVALID_VALUE
    );
    assert_eq!(
        d.mem_address_reserve(G, 3).unwrap_err().code,
        CudaCode::INVALID_VALUE
    );
    assert_eq!(
        d.mem_create(0, D0).unwrap_err().code,
        CudaCode::INVALID_VALUE
    );
    assert_eq!(
        d.mem_create(G, DeviceId(3)).unwrap_err().code,
        CudaCode::INVALID_DEVICE
    );
    assert!(d
        .mem_create(2 * GIB as usize, D0)
        .unwrap_err()
        .is_out_of_memory());
    assert_eq!(d.device_memory_used(D0), 0, "refusals change nothing");
    let r = d.report();
    assert!(r.nothing_held(), "{r}");
    let refusals = r
        .violations
        .iter()
        .filter(|v| {
            matches!(
                v,
                Violation::InvalidFree { .. } | Violation::DoubleFree { .. }
            )
        })
        .count();
    assert_eq!(refusals, 8, "{r}");
}

#[test]
fn a_handle_mapped_twice_shows_its_bytes_at_both_and_goes_back_after_both() {
    let d = sim();
    let (base, hs) = mapped(&d, 4, 1);
    let data: Vec<u8> = (0..G).map(|i| (i % 241) as u8).collect();
    d.memcpy_htod(base, &data, None).unwrap();
    let alias = base.offset(2 * G as u64);
    d.mem_map(alias, G, hs[0]).unwrap();
    d.mem_set_access(alias, G, D0).unwrap();
    assert_eq!(
        d.device_memory_used(D0),
        G as u64,
        "one physical allocation"
    );
    let mut back = vec![0; G];
    d.memcpy_dtoh(&mut back, alias, None).unwrap();
    assert_eq!(back, data, "the second mapping shows the bytes");
    assert_eq!(
        d.mem_release(hs[0]).unwrap_err().code,
        CudaCode::ILLEGAL_STATE,
        "still mapped twice"
    );
    d.mem_unmap(base, G).unwrap();
    assert_eq!(
        d.mem_release(hs[0]).unwrap_err().code,
        CudaCode::ILLEGAL_STATE,
        "still mapped once"
    );
    d.memcpy_dtoh(&mut back, alias, None).unwrap();
    assert_eq!(back, data, "the first unmapped, the second keeps the bytes");
    assert!(
        d.memcpy_dtoh(&mut back[..8], base, None).is_err(),
        "unmapped"
    );
    d.mem_unmap(alias, G).unwrap();
    d.mem_map(base.offset(G as u64), G, hs[0]).unwrap();
    d.mem_set_access(base.offset(G as u64), G, D0).unwrap();
    d.memcpy_dtoh(&mut back, base.offset(G as u64), None)
        .unwrap();
    assert_eq!(
        back, data,
        "unmapped from both, the bytes wait in the store"
    );
    d.mem_unmap(base.offset(G as u64), G).unwrap();
    d.mem_release(hs[0]).unwrap();
    d.mem_address_free(base, 4 * G).unwrap();
    assert_eq!(d.device_memory_used(D0), 0);
    let r = d.report();
    assert_eq!(
        r.violations.len(),
        3,
        "the two refused releases and the read of the unmapped first: {r}"
    );
}

#[test]
fn a_second_mapping_s_user_must_be_ordered_after_the_first_s() {
    let d = sim();
    let (a, b) = crate::two_streams(&d);
    let (base, hs) = mapped(&d, 4, 1);
    let alias = base.offset(2 * G as u64);
    // Stream a still writes the first mapping when the handle is mapped again.
    d.device_access(base, 4096, a, true).unwrap();
    d.mem_map(alias, G, hs[0]).unwrap();
    d.mem_set_access(alias, G, D0).unwrap();
    d.device_access(alias.offset(1024), 64, b, true).unwrap();
    assert_eq!(d.report().races().count(), 1, "{}", d.report());
    // Ordered after a's write, b's use of the second mapping is no race.
    let e = d.event_create().unwrap();
    d.event_record(e, a).unwrap();
    d.stream_wait_event(b, e).unwrap();
    d.device_access(alias, 4096, b, true).unwrap();
    assert_eq!(d.report().races().count(), 1, "ordered: no new race");
    // The first mapping goes once the host has seen a's work done.
    d.event_synchronize(e).unwrap();
    d.mem_unmap(base, G).unwrap();
    assert_eq!(d.report().races().count(), 1, "waited for: no race");
    d.context_synchronize().unwrap();
    d.mem_unmap(alias, G).unwrap();
    d.mem_release(hs[0]).unwrap();
    d.mem_address_free(base, 4 * G).unwrap();
    d.event_destroy(e).unwrap();
    d.stream_destroy(a).unwrap();
    d.stream_destroy(b).unwrap();
}

#[test]
fn an_unmap_the_host_did_not_wait_for_races_with_the_stream() {
    let d = sim();
    let s = d.stream_create(true).unwrap();
    let (base, hs) = mapped(&d, 2, 2);
    d.memset_d8(base, 7, 4096, Some(s)).unwrap();
    d.device_access(base.offset(G as u64), 64, s, true).unwrap();
    d.mem_unmap(base.offset(G as u64), G).unwrap();
    assert_eq!(d.report().races().count(), 1, "{}", d.report());
    d.stream_synchronize(s).unwrap();
    d.mem_unmap(base, G).unwrap();
    assert_eq!(d.report().races().count(), 1, "waited for: no race");
    for h in hs {
        d.mem_release(h).unwrap();
    }
    d.mem_address_free(base, 2 * G).unwrap();
    d.stream_destroy(s).unwrap();
}

#[test]
fn streams_race_on_mapped_memory_as_on_any_other() {
    let d = sim();
    let (a, b) = crate::two_streams(&d);
    let (base, hs) = mapped(&d, 2, 2);
    d.device_access(base.offset(G as u64 - 64), 128, a, true)
        .unwrap();
    d.device_access(base.offset(G as u64), 64, b, false)
        .unwrap();
    assert_eq!(d.report().races().count(), 1, "across the mapping boundary");
    let e = d.event_create().unwrap();
    d.event_record(e, a).unwrap();
    d.stream_wait_event(b, e).unwrap();
    d.device_access(base.offset(G as u64 - 64), 128, b, true)
        .unwrap();
    assert_eq!(d.report().races().count(), 1, "ordered: no new race");
    d.context_synchronize().unwrap();
    teardown(&d, base, 2, &hs);
    d.event_destroy(e).unwrap();
    d.stream_destroy(a).unwrap();
    d.stream_destroy(b).unwrap();
}

#[test]
fn a_kernel_needs_access_for_its_own_device() {
    let d = SimDriver::new(SimConfig::new(5).devices(2).memory_per_device(GIB)).unwrap();
    let (base, hs) = mapped(&d, 1, 1);
    let ctx1 = d.primary_context(DeviceId(1)).unwrap();
    let ctx0 = d.current_context().unwrap();
    d.set_current_context(ctx1).unwrap();
    let s1 = d.stream_create(true).unwrap();
    let e = d.device_access(base, 64, s1, false).unwrap_err();
    assert!(e.to_string().contains("device 1"), "{e}");
    d.set_current_context(ctx0).unwrap();
    d.mem_set_access(base, G, DeviceId(1)).unwrap();
    d.device_access(base, 64, s1, false).unwrap();
    d.context_synchronize().unwrap();
    d.stream_synchronize(s1).unwrap();
    teardown(&d, base, 1, &hs);
    d.stream_destroy(s1).unwrap();
}

#[test]
fn injected_faults_and_a_machine_without_vmm() {
    let d = sim();
    d.inject(Fault::FailNth {
        call: Some(CallKind::MemCreate),
        nth: 1,
        code: CudaCode::OUT_OF_MEMORY,
    });
    assert!(d.mem_create(G, D0).unwrap_err().is_out_of_memory());
    let h = d.mem_create(G, D0).unwrap();
    d.mem_release(h).unwrap();
    d.inject(Fault::OutOfMemoryAbove {
        device: None,
        bytes: 4 * MIB,
    });
    let h = d.mem_create(2 * G, D0).unwrap();
    assert!(d.mem_create(G, D0).unwrap_err().is_out_of_memory());
    d.mem_release(h).unwrap();
    let no = SimDriver::new(SimConfig::new(5).virtual_memory_management(false)).unwrap();
    for e in [
        no.mem_get_allocation_granularity(D0).unwrap_err(),
        no.mem_address_reserve(G, 0).unwrap_err(),
        no.mem_create(G, D0).unwrap_err(),
    ] {
        assert_eq!(e.code, CudaCode::NOT_SUPPORTED, "{e}");
    }
    assert!(d.report().is_clean() && no.report().is_clean());
}

/// The driver's reserve is reported free but never handed out, through `cuMemAlloc` and
/// `cuMemCreate` alike; a reserve that leaves nothing is refused as a configuration.
#[test]
fn the_driver_s_reserve_counts_as_free_but_cannot_be_allocated() {
    let d = SimDriver::new(
        SimConfig::new(6)
            .memory_per_device(64 * MIB)
            .driver_reserve(3 * MIB),
    )
    .unwrap();
    assert_eq!(d.mem_get_info().unwrap().free, 64 * MIB);
    assert!(d.mem_alloc(63 << 20).unwrap_err().is_out_of_memory());
    let h = d.mem_create(60 << 20, D0).unwrap();
    assert!(d.mem_create(2 << 20, D0).unwrap_err().is_out_of_memory());
    d.mem_release(h).unwrap();
    let p = d.mem_alloc(61 << 20).unwrap();
    d.mem_free(p).unwrap();
    let e =
        SimDriver::new(SimConfig::new(6).memory_per_device(MIB).driver_reserve(MIB)).unwrap_err();
    assert!(e.contains("driver_reserve"), "{e}");
    assert!(d.report().is_clean());
}

#[test]
fn creation_is_device_memory_allocation_and_the_trace_is_deterministic() {
    let run = || {
        let d = SimDriver::new(SimConfig::new(9)).unwrap();
        let (base, hs) = {
            let _pool = emm_core::attribution::CallerScope::enter("pool");
            mapped(&d, 8, 3)
        };
        d.memset_d8(base, 3, 3 * G, None).unwrap();
        teardown(&d, base, 8, &hs);
        let by = d.device_allocations_by_caller();
        assert_eq!(by.get("pool"), Some(&3), "{by:?}");
        let t = d.now_ns();
        (d.trace_hash(), t, d.trace().len())
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    assert!(a.1 > 0, "virtual time advanced");
    let _ = StreamId::DEFAULT;
}
