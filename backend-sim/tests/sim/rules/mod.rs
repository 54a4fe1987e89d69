//! One test per rule of the simulated GPU.

use emm_core::attribution::CallerScope;
use emm_core::{Advice, CudaCode, DeviceId, DevicePtr, Driver, HostAllocFlags, Location, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, Violation, GIB, MIB, POISON};

fn gpu() -> SimDriver {
    SimDriver::new(SimConfig::new(1).memory_per_device(GIB)).unwrap()
}

fn code<T: std::fmt::Debug>(r: emm_core::DriverResult<T>) -> CudaCode {
    r.unwrap_err().code
}

// ---- device memory and contents -----------------------------------------------------------

#[test]
fn memory_holds_what_was_written() {
    let g = gpu();
    let a = g.mem_alloc(10_000).unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    g.memcpy_htod(a, &data, None).unwrap();
    let mut back = vec![0; 10_000];
    g.memcpy_dtoh(&mut back, a, None).unwrap();
    assert_eq!(back, data);
    let b = g.mem_alloc(10_000).unwrap();
    g.memcpy_dtod(b, a.offset(100), 5000, None).unwrap();
    let mut part = vec![0; 5000];
    g.memcpy_dtoh(&mut part, b, None).unwrap();
    assert_eq!(part, data[100..5100]);
    g.memset_d8(b.offset(10), 0x42, 20, None).unwrap();
    let mut set = [0u8; 40];
    g.memcpy_dtoh(&mut set, b, None).unwrap();
    assert_eq!(&set[..10], &data[100..110]);
    assert!(set[10..30].iter().all(|&x| x == 0x42));
    g.mem_free(a).unwrap();
    g.mem_free(b).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn allocations_are_aligned_and_never_overlap() {
    let g = gpu();
    let mut got: Vec<(u64, u64)> = Vec::new();
    for size in [1usize, 255, 256, 257, 4096, 1 << 20, 3] {
        let p = g.mem_alloc(size).unwrap();
        assert_eq!(p.0 % 256, 0, "{p} not 256-byte aligned");
        for (b, s) in &got {
            assert!(p.0 >= b + s || p.0 + size as u64 <= *b, "{p} overlaps");
        }
        got.push((p.0, size as u64));
    }
}

#[test]
fn zero_and_absurd_sizes_are_errors_not_panics() {
    let g = gpu();
    assert_eq!(code(g.mem_alloc(0)), CudaCode::INVALID_VALUE);
    let e = g.mem_alloc(1 << 50).unwrap_err();
    assert_eq!(e.code, CudaCode::OUT_OF_MEMORY);
    assert!(e.to_string().contains("1.0 PiB"), "{e}");
    assert_eq!(code(g.mem_alloc(usize::MAX)), CudaCode::OUT_OF_MEMORY);
    assert_eq!(code(g.mem_alloc_managed(0, true)), CudaCode::INVALID_VALUE);
    assert_eq!(
        code(g.mem_alloc_managed(usize::MAX, true)),
        CudaCode::OUT_OF_MEMORY
    );
    assert_eq!(
        code(g.host_alloc(0, HostAllocFlags::default())),
        CudaCode::INVALID_VALUE
    );
    assert_eq!(
        code(g.host_alloc(usize::MAX, HostAllocFlags::default())),
        CudaCode::OUT_OF_MEMORY
    );
    assert_eq!(
        code(g.mem_alloc_async(usize::MAX, StreamId::DEFAULT)),
        CudaCode::OUT_OF_MEMORY
    );
    // Still usable afterwards.
    let p = g.mem_alloc(100).unwrap();
    g.mem_free(p).unwrap();
}

#[test]
fn out_of_memory_leaves_the_device_usable_and_frees_make_room() {
    let g = gpu();
    let a = g.mem_alloc((GIB / 2) as usize).unwrap();
    let b = g.mem_alloc((GIB / 2) as usize).unwrap();
    let e = g.mem_alloc(1).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    g.mem_free(a).unwrap();
    let c = g.mem_alloc(1).unwrap();
    for p in [b, c] {
        g.mem_free(p).unwrap();
    }
    assert_eq!(g.mem_get_info().unwrap().free, GIB);
}

#[test]
fn freed_memory_is_poisoned_and_use_after_free_is_reported() {
    let g = gpu();
    let a = g.mem_alloc(64).unwrap();
    g.memcpy_htod(a, &[1; 64], None).unwrap();
    g.mem_free(a).unwrap();
    let mut buf = [0u8; 8];
    let e = g.memcpy_dtoh(&mut buf, a, None).unwrap_err();
    assert_eq!(e.code, CudaCode::ILLEGAL_ADDRESS);
    assert!(
        matches!(g.report().violations[0], Violation::UseAfterFree { addr, .. } if addr == a.0)
    );
    // Stream-ordered memory that is reused comes back poisoned, not with the old bytes.
    let s = g.stream_create(false).unwrap();
    let b = g.mem_alloc_async(64, s).unwrap();
    g.memcpy_htod(b, &[9; 64], Some(s)).unwrap();
    g.mem_free_async(b, s).unwrap();
    let c = g.mem_alloc_async(64, s).unwrap();
    assert_eq!(c, b, "the pool reuses the block on the same stream");
    g.memcpy_dtoh(&mut buf, c, Some(s)).unwrap();
    assert_eq!(buf, [POISON; 8]);
    g.mem_free_async(c, s).unwrap();
    g.stream_destroy(s).unwrap();
}

#[test]
fn double_free_and_interior_free_are_typed_errors_and_violations() {
    let g = gpu();
    let a = g.mem_alloc(1024).unwrap();
    assert_eq!(code(g.mem_free(a.offset(256))), CudaCode::INVALID_VALUE);
    g.mem_free(a).unwrap();
    let e = g.mem_free(a).unwrap_err();
    assert!(e.to_string().contains("double free"), "{e}");
    assert_eq!(
        code(g.mem_free(DevicePtr(0xdead_beef))),
        CudaCode::INVALID_VALUE
    );
    assert_eq!(code(g.mem_free(DevicePtr::NULL)), CudaCode::INVALID_VALUE);
    let v = g.report().violations;
    assert!(matches!(v[0], Violation::InvalidFree { .. }));
    assert!(matches!(v[1], Violation::DoubleFree { .. }));
    assert!(matches!(v[2], Violation::InvalidFree { .. }));
    // A host pointer is not device memory.
    let h = g.host_alloc(64, HostAllocFlags::default()).unwrap();
    assert_eq!(code(g.mem_free(DevicePtr(h.0))), CudaCode::INVALID_VALUE);
    assert_eq!(
        code(g.host_free(emm_core::HostPtr(h.0 + 1))),
        CudaCode::INVALID_VALUE
    );
    g.host_free(h).unwrap();
}

#[test]
fn out_of_bounds_copies_are_refused_and_change_nothing() {
    let g = gpu();
    let a = g.mem_alloc(100).unwrap();
    g.memcpy_htod(a, &[7; 100], None).unwrap();
    assert_eq!(
        code(g.memcpy_htod(a.offset(50), &[1; 51], None)),
        CudaCode::INVALID_VALUE
    );
    let b = g.mem_alloc(10).unwrap();
    assert_eq!(
        code(g.memcpy_dtod(b, a, 100, None)),
        CudaCode::INVALID_VALUE
    );
    let mut back = [0u8; 100];
    g.memcpy_dtoh(&mut back, a, None).unwrap();
    assert_eq!(back, [7; 100]);
    assert!(g
        .report()
        .violations
        .iter()
        .all(|v| matches!(v, Violation::OutOfBounds { .. })));
    assert_eq!(g.report().violations.len(), 2);
}

#[test]
fn the_host_cannot_load_device_memory() {
    let g = gpu();
    let a = g.mem_alloc(16).unwrap();
    let e = g.host_read(a.as_host(), &mut [0; 4]).unwrap_err();
    assert!(e.to_string().contains("copy it with memcpy"), "{e}");
}

// ---- streams, events, races ---------------------------------------------------------------

#[test]
fn unordered_use_across_streams_is_a_race() {
    let g = gpu();
    let (s1, s2) = (
        g.stream_create(true).unwrap(),
        g.stream_create(true).unwrap(),
    );
    let a = g.mem_alloc(4096).unwrap();
    g.memset_d8(a, 1, 4096, Some(s1)).unwrap();
    g.memset_d8(a, 2, 4096, Some(s2)).unwrap();
    let races: Vec<_> = g.report().races().cloned().collect();
    assert_eq!(races.len(), 1, "{:?}", g.report());
    let text = races[0].to_string();
    assert!(
        text.contains(&format!("stream:{}", s1.0)) && text.contains(&format!("stream:{}", s2.0)),
        "{text}"
    );
}

/// With happens-before tracking off, streams that wait on one another in a long chain cost
/// nothing per stream, and no race is reported (the replays' and benchmarks' setting); the
/// same unordered use is a race with it on (above).
#[test]
fn race_tracking_off_reports_no_race_and_keeps_no_clocks() {
    let g = SimDriver::new(SimConfig::new(1).track_races(false)).unwrap();
    let (s1, s2) = (
        g.stream_create(true).unwrap(),
        g.stream_create(true).unwrap(),
    );
    let a = g.mem_alloc(4096).unwrap();
    g.memset_d8(a, 1, 4096, Some(s1)).unwrap();
    g.memset_d8(a, 2, 4096, Some(s2)).unwrap();
    assert_eq!(g.report().races().count(), 0, "{}", g.report());
    // Twenty thousand streams, each ordered after the one before: with clocks this took
    // minutes and gigabytes (each stream's clock held every stream before it).
    let e = g.event_create().unwrap();
    let start = std::time::Instant::now();
    let mut prev = g.stream_create(false).unwrap();
    for _ in 0..20_000 {
        let next = g.stream_create(false).unwrap();
        g.event_record(e, prev).unwrap();
        g.stream_wait_event(next, e).unwrap();
        g.stream_destroy(prev).unwrap();
        prev = next;
    }
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
}

#[test]
fn an_event_wait_orders_streams() {
    let g = gpu();
    let (s1, s2) = (
        g.stream_create(true).unwrap(),
        g.stream_create(true).unwrap(),
    );
    let e = g.event_create().unwrap();
    let a = g.mem_alloc(4096).unwrap();
    g.memset_d8(a, 1, 4096, Some(s1)).unwrap();
    g.event_record(e, s1).unwrap();
    g.stream_wait_event(s2, e).unwrap();
    g.memset_d8(a, 2, 4096, Some(s2)).unwrap();
    assert_eq!(g.report().races().count(), 0, "{}", g.report());
    // A kernel on s1 reading what s2 wrote, without waiting on s2, is a race.
    g.device_access(a, 16, s1, false).unwrap();
    assert_eq!(g.report().races().count(), 1, "{}", g.report());
    // Reads on two streams never race with each other.
    let b = g.mem_alloc(64).unwrap();
    g.memset_d8(b, 7, 64, None).unwrap();
    // cuMemsetD8 is asynchronous with respect to the host: wait for it.
    g.stream_synchronize(StreamId::DEFAULT).unwrap();
    g.device_access(b, 64, s1, false).unwrap();
    g.device_access(b, 64, s2, false).unwrap();
    assert_eq!(g.report().races().count(), 1, "{}", g.report());
}

#[test]
fn a_synchronize_orders_streams() {
    let g = gpu();
    let (s1, s2) = (
        g.stream_create(true).unwrap(),
        g.stream_create(true).unwrap(),
    );
    let a = g.mem_alloc(4096).unwrap();
    g.memset_d8(a, 1, 4096, Some(s1)).unwrap();
    g.stream_synchronize(s1).unwrap();
    g.memset_d8(a, 2, 4096, Some(s2)).unwrap();
    assert_eq!(g.report().races().count(), 0);
}

#[test]
fn the_legacy_default_stream_orders_blocking_streams_but_not_non_blocking_ones() {
    let g = gpu();
    let blocking = g.stream_create(false).unwrap();
    let non_blocking = g.stream_create(true).unwrap();
    let a = g.mem_alloc(4096).unwrap();
    g.memset_d8(a, 1, 4096, Some(blocking)).unwrap();
    g.memset_d8(a, 2, 4096, Some(StreamId::DEFAULT)).unwrap();
    assert_eq!(g.report().races().count(), 0);
    g.memset_d8(a, 3, 4096, Some(non_blocking)).unwrap();
    assert_eq!(g.report().races().count(), 1);
}

#[test]
fn stream_ordered_free_is_reusable_at_once_on_the_same_stream_only() {
    let g = gpu();
    let (a, b) = (
        g.stream_create(true).unwrap(),
        g.stream_create(true).unwrap(),
    );
    let p = g.mem_alloc_async(1 << 20, a).unwrap();
    g.mem_free_async(p, a).unwrap();
    let q = g.mem_alloc_async(1 << 20, b).unwrap();
    assert_ne!(p, q, "stream b is not ordered after the free on a");
    let r = g.mem_alloc_async(1 << 20, a).unwrap();
    assert_eq!(p, r, "same stream reuses at once");
    g.mem_free_async(r, a).unwrap();
    let e = g.event_create().unwrap();
    g.event_record(e, a).unwrap();
    g.stream_wait_event(b, e).unwrap();
    let s = g.mem_alloc_async(1 << 20, b).unwrap();
    assert_eq!(
        p, s,
        "after waiting on an event recorded after the free, b reuses"
    );
    for (ptr, st) in [(q, b), (s, b)] {
        g.mem_free_async(ptr, st).unwrap();
    }
    assert_eq!(g.report().violations, vec![]);
}

#[test]
fn freeing_on_one_stream_while_another_uses_the_block_is_a_race() {
    let g = gpu();
    let (a, b) = (
        g.stream_create(true).unwrap(),
        g.stream_create(true).unwrap(),
    );
    let p = g.mem_alloc_async(4096, a).unwrap();
    g.memset_d8(p, 0, 4096, Some(b)).unwrap();
    g.mem_free_async(p, a).unwrap();
    // The memset on b is ordered neither after the allocation on a nor before the free on a.
    assert_eq!(g.report().races().count(), 2, "{}", g.report());
}

#[test]
fn virtual_time_advances_with_work_and_synchronize_waits_for_it() {
    let g = gpu();
    let s = g.stream_create(true).unwrap();
    let a = g.mem_alloc(64 << 20).unwrap();
    let before = g.now_ns();
    g.memset_d8(a, 0, 64 << 20, Some(s)).unwrap();
    assert!(
        !g.stream_query(s).unwrap(),
        "64 MiB of work is not done at once"
    );
    g.stream_synchronize(s).unwrap();
    assert!(g.stream_query(s).unwrap());
    assert!(g.now_ns() > before + 40_000, "{} ns", g.now_ns() - before);
}

#[test]
fn event_query_reports_progress() {
    let g = gpu();
    let s = g.stream_create(true).unwrap();
    let e = g.event_create().unwrap();
    assert!(g.event_query(e).unwrap(), "an unrecorded event is complete");
    let a = g.mem_alloc(256 << 20).unwrap();
    g.memset_d8(a, 0, 256 << 20, Some(s)).unwrap();
    g.event_record(e, s).unwrap();
    assert!(!g.event_query(e).unwrap());
    g.event_synchronize(e).unwrap();
    assert!(g.event_query(e).unwrap());
}

#[test]
fn bad_handles_are_invalid_handle_errors() {
    let g = gpu();
    let s = g.stream_create(false).unwrap();
    g.stream_destroy(s).unwrap();
    assert_eq!(code(g.stream_synchronize(s)), CudaCode::INVALID_HANDLE);
    assert_eq!(
        code(g.stream_destroy(StreamId::DEFAULT)),
        CudaCode::INVALID_HANDLE
    );
    assert_eq!(
        code(g.event_query(emm_core::EventId(12345))),
        CudaCode::INVALID_HANDLE
    );
    let e = g.event_create().unwrap();
    g.event_destroy(e).unwrap();
    assert_eq!(code(g.event_destroy(e)), CudaCode::INVALID_HANDLE);
    assert_eq!(
        code(g.memset_d8(DevicePtr(1), 0, 1, Some(s))),
        CudaCode::INVALID_HANDLE
    );
}

// ---- driver pools -------------------------------------------------------------------------

#[test]
fn driver_pools_release_above_the_threshold_at_synchronize() {
    let g = gpu();
    let pool = g.device_default_mem_pool(DeviceId(0)).unwrap();
    let s = g.stream_create(true).unwrap();
    let p = g.mem_alloc_async(8 << 20, s).unwrap();
    assert_eq!(g.mem_pool_usage(pool).unwrap().used, 8 << 20);
    g.mem_free_async(p, s).unwrap();
    assert_eq!(g.mem_pool_usage(pool).unwrap().reserved, 8 << 20);
    g.stream_synchronize(s).unwrap();
    assert_eq!(
        g.mem_pool_usage(pool).unwrap().reserved,
        0,
        "threshold 0 releases at sync"
    );
    g.mem_pool_set_release_threshold(pool, u64::MAX).unwrap();
    let p = g.mem_alloc_async(8 << 20, s).unwrap();
    g.mem_free_async(p, s).unwrap();
    g.stream_synchronize(s).unwrap();
    assert_eq!(
        g.mem_pool_usage(pool).unwrap().reserved,
        8 << 20,
        "kept under the threshold"
    );
    g.mem_pool_trim_to(pool, 0).unwrap();
    assert_eq!(g.mem_pool_usage(pool).unwrap().reserved, 0);
}

#[test]
fn created_pools_serve_their_device_and_outlive_destroy_until_freed() {
    let g = SimDriver::new(SimConfig::new(2).devices(2).memory_per_device(GIB)).unwrap();
    let pool = g.mem_pool_create(DeviceId(1)).unwrap();
    let s = g.stream_create(true).unwrap();
    assert_eq!(
        code(g.mem_alloc_from_pool_async(64, pool, s)),
        CudaCode::INVALID_VALUE,
        "stream on device 0"
    );
    g.set_current_context(g.primary_context(DeviceId(1)).unwrap())
        .unwrap();
    let s1 = g.stream_create(true).unwrap();
    let p = g.mem_alloc_from_pool_async(4096, pool, s1).unwrap();
    assert_eq!(g.device_memory_used(DeviceId(1)), 4096);
    g.mem_pool_destroy(pool).unwrap();
    g.memset_d8(p, 1, 4096, Some(s1)).unwrap();
    g.mem_free_async(p, s1).unwrap();
    assert_eq!(g.device_memory_used(DeviceId(1)), 0);
    assert_eq!(
        code(g.mem_pool_destroy(g.device_default_mem_pool(DeviceId(0)).unwrap())),
        CudaCode::INVALID_VALUE
    );
}

// ---- managed memory -----------------------------------------------------------------------

#[test]
fn managed_pages_migrate_on_access_and_prefetch() {
    let g = gpu();
    let m = g.mem_alloc_managed(1 << 20, true).unwrap();
    assert_eq!(g.residency(m), None, "unpopulated until touched");
    g.host_write(m.as_host(), &[5; 1 << 20]).unwrap();
    assert_eq!(g.residency(m), Some(Location::Host));
    g.device_access(m, 1 << 20, StreamId::DEFAULT, false)
        .unwrap();
    assert_eq!(g.residency(m), Some(Location::Device(DeviceId(0))));
    let st = g.managed_stats();
    assert_eq!(st.faults, 16, "16 pages of 64 KiB faulted over");
    assert_eq!(st.migrated_to_device, 1 << 20);
    g.mem_prefetch(m, 1 << 20, Location::Host, StreamId::DEFAULT)
        .unwrap();
    g.stream_synchronize(StreamId::DEFAULT).unwrap();
    assert_eq!(g.residency(m), Some(Location::Host));
    assert_eq!(g.managed_stats().prefetched, 1 << 20);
    let mut back = vec![0; 1 << 20];
    g.host_read(m.as_host(), &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 5));
    g.mem_free(m).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn advice_is_recorded_and_honoured() {
    let g = gpu();
    let m = g.mem_alloc_managed(256 << 10, true).unwrap();
    g.mem_advise(m, 256 << 10, Advice::SetPreferredLocation, Location::Host)
        .unwrap();
    g.mem_advise(
        m,
        256 << 10,
        Advice::SetAccessedBy,
        Location::Device(DeviceId(0)),
    )
    .unwrap();
    let adv = g.managed_advice(m).unwrap();
    assert_eq!(adv.preferred_location, Some(Location::Host));
    assert_eq!(adv.accessed_by, vec![Location::Device(DeviceId(0))]);
    g.host_write(m.as_host(), &[1; 256 << 10]).unwrap();
    g.device_access(m, 256 << 10, StreamId::DEFAULT, false)
        .unwrap();
    assert_eq!(g.residency(m), Some(Location::Host), "mapped, not migrated");
    assert_eq!(g.managed_stats().faults, 0);
    assert!(g.managed_stats().remote_accesses > 0);
    g.mem_advise(
        m,
        256 << 10,
        Advice::UnsetAccessedBy,
        Location::Device(DeviceId(0)),
    )
    .unwrap();
    g.mem_advise(m, 256 << 10, Advice::UnsetPreferredLocation, Location::Host)
        .unwrap();
    assert_eq!(
        g.managed_advice(m).unwrap(),
        emm_sim::ManagedAdvice {
            attach_global: true,
            ..Default::default()
        }
    );
    let plain = g.mem_alloc(64).unwrap();
    assert_eq!(
        code(g.mem_advise(plain, 64, Advice::SetReadMostly, Location::Host)),
        CudaCode::INVALID_VALUE
    );
    assert_eq!(
        code(g.mem_advise(m, 64, Advice::SetReadMostly, Location::Device(DeviceId(9)))),
        CudaCode::INVALID_DEVICE
    );
}

#[test]
fn managed_memory_oversubscribes_by_evicting_to_the_host() {
    let g = SimDriver::new(SimConfig::new(3).memory_per_device(4 * MIB)).unwrap();
    let m = g.mem_alloc_managed(8 << 20, true).unwrap();
    g.device_access(m, 8 << 20, StreamId::DEFAULT, true)
        .unwrap();
    let st = g.managed_stats();
    assert_eq!(st.evictions, 64, "half of 128 pages evicted");
    assert_eq!(g.managed_resident(DeviceId(0)), 4 * MIB);
    // Device allocations push managed pages out too.
    let d = g.mem_alloc(MIB as usize).unwrap();
    assert_eq!(g.managed_resident(DeviceId(0)), 3 * MIB);
    g.mem_free(d).unwrap();
    g.mem_free(m).unwrap();
    assert_eq!(g.device_memory_used(DeviceId(0)), 0);
}

#[test]
fn a_non_blocking_move_to_the_host_races_with_an_unsynchronized_host_read() {
    let g = gpu();
    let s = g.stream_create(true).unwrap();
    let m = g.mem_alloc_managed(64 << 10, true).unwrap();
    g.device_access(m, 64 << 10, s, true).unwrap();
    g.mem_prefetch(m, 64 << 10, Location::Host, s).unwrap();
    g.host_read(m.as_host(), &mut [0; 16]).unwrap();
    assert_eq!(g.report().races().count(), 1, "{}", g.report());
    g.stream_synchronize(s).unwrap();
    g.host_read(m.as_host(), &mut [0; 16]).unwrap();
    assert_eq!(g.report().races().count(), 1);
}

// ---- host memory --------------------------------------------------------------------------

#[test]
fn mapped_host_memory_has_a_device_pointer_and_unmapped_does_not() {
    let g = gpu();
    let mapped = g
        .host_alloc(
            4096,
            HostAllocFlags {
                mapped: true,
                ..Default::default()
            },
        )
        .unwrap();
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

// ---- IPC ----------------------------------------------------------------------------------

#[test]
fn an_ipc_handle_opened_in_another_process_addresses_the_same_bytes() {
    let exporter = gpu();
    let importer = exporter.process();
    let a = exporter.mem_alloc(1 << 20).unwrap();
    exporter
        .memcpy_htod(a.offset(4096), b"shared bytes", None)
        .unwrap();
    // A handle for a pointer inside the allocation names the whole allocation, as in CUDA.
    let h = exporter.ipc_get_mem_handle(a.offset(4096)).unwrap();
    let opened = importer.ipc_open_mem_handle(&h).unwrap();
    assert_ne!(opened, a, "another process maps it at its own address");
    let mut back = [0; 12];
    importer
        .memcpy_dtoh(&mut back, opened.offset(4096), None)
        .unwrap();
    assert_eq!(&back, b"shared bytes");
    assert_eq!(
        code(importer.ipc_open_mem_handle(&h)),
        CudaCode::ALREADY_MAPPED
    );
    assert_eq!(
        code(exporter.ipc_open_mem_handle(&h)),
        CudaCode::INVALID_CONTEXT
    );
    // The importer cannot use the exporter's address directly.
    assert_eq!(
        code(importer.memcpy_dtoh(&mut back, a, None)),
        CudaCode::INVALID_VALUE
    );
    importer.ipc_close_mem_handle(opened).unwrap();
    assert_eq!(
        code(importer.ipc_close_mem_handle(opened)),
        CudaCode::INVALID_VALUE
    );
    let mut corrupt = h;
    corrupt.0[20] ^= 1;
    assert_eq!(
        code(importer.ipc_open_mem_handle(&corrupt)),
        CudaCode::INVALID_VALUE
    );
    exporter.mem_free(a).unwrap();
    assert_eq!(
        code(importer.ipc_open_mem_handle(&h)),
        CudaCode::INVALID_VALUE,
        "freed"
    );
    let other_machine = gpu().process();
    assert_eq!(
        code(other_machine.ipc_open_mem_handle(&h)),
        CudaCode::INVALID_VALUE
    );
}

// ---- contexts, attribution, faults, costs -------------------------------------------------

#[test]
fn contexts_are_per_thread_and_allocations_land_on_the_current_device() {
    let g = SimDriver::new(SimConfig::new(4).devices(4).memory_per_device(GIB)).unwrap();
    assert_eq!(g.device_count().unwrap(), 4);
    let c2 = g.primary_context(DeviceId(2)).unwrap();
    g.set_current_context(c2).unwrap();
    assert_eq!(g.current_context().unwrap(), c2);
    g.mem_alloc(4096).unwrap();
    assert_eq!(g.device_memory_used(DeviceId(2)), 4096);
    let g2 = g.clone();
    let other =
        std::thread::spawn(move || g2.context_device(g2.current_context().unwrap()).unwrap())
            .join()
            .unwrap();
    assert_eq!(other, DeviceId(0), "a new thread starts on device 0");
    assert_eq!(
        code(g.primary_context(DeviceId(4))),
        CudaCode::INVALID_DEVICE
    );
    assert_eq!(
        code(g.set_current_context(emm_core::ContextId(99))),
        CudaCode::INVALID_CONTEXT
    );
    let other_process = g.process();
    assert_eq!(
        code(other_process.set_current_context(c2)),
        CudaCode::INVALID_CONTEXT
    );
}

#[test]
fn every_call_is_attributed_to_its_caller() {
    let g = gpu();
    {
        let _scope = CallerScope::enter("plugin");
        let p = g.mem_alloc(64).unwrap();
        g.mem_free(p).unwrap();
    }
    g.mem_alloc(64).unwrap();
    let by = g.device_allocations_by_caller();
    assert_eq!(by.get("plugin"), Some(&1));
    assert_eq!(by.get("user"), Some(&1));
    let t = g.trace();
    assert_eq!(t[1].call, CallKind::MemFree);
    assert_eq!(t[1].caller, "plugin");
    assert_eq!(g.report().leaks[0].caller, "user");
}

#[test]
fn the_nth_call_fails_as_injected_and_changes_nothing() {
    let g = SimDriver::new(
        SimConfig::new(5)
            .memory_per_device(GIB)
            .fault(Fault::FailNth {
                call: Some(CallKind::MemAlloc),
                nth: 2,
                code: CudaCode::LAUNCH_FAILED,
            }),
    )
    .unwrap();
    let a = g.mem_alloc(64).unwrap();
    let e = g.mem_alloc(64).unwrap_err();
    assert_eq!(e.code, CudaCode::LAUNCH_FAILED);
    assert!(e.to_string().contains("injected"), "{e}");
    assert_eq!(g.device_memory_used(DeviceId(0)), 256);
    g.mem_alloc(64).unwrap();
    g.inject(Fault::FailNth {
        call: None,
        nth: 1,
        code: CudaCode::INVALID_VALUE,
    });
    assert_eq!(code(g.mem_free(a)), CudaCode::INVALID_VALUE);
    g.mem_free(a).unwrap();
}

#[test]
fn out_of_memory_at_a_chosen_level() {
    let g = gpu();
    g.inject(Fault::OutOfMemoryAbove {
        device: None,
        bytes: MIB,
    });
    let a = g.mem_alloc(MIB as usize / 2).unwrap();
    assert!(g.mem_alloc(MIB as usize).unwrap_err().is_out_of_memory());
    assert_eq!(g.mem_get_info().unwrap().free, MIB / 2);
    g.clear_faults();
    g.mem_alloc(MIB as usize).unwrap();
    g.mem_free(a).unwrap();
}

#[test]
fn random_faults_follow_the_seed() {
    let run = || {
        let g = SimDriver::new(SimConfig::new(42).fault(Fault::Random {
            calls: vec![],
            per_million: 200_000,
            code: CudaCode::OUT_OF_MEMORY,
        }))
        .unwrap();
        (0..200)
            .map(|_| g.mem_alloc(64).is_ok())
            .collect::<Vec<_>>()
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    let failed = a.iter().filter(|ok| !**ok).count();
    assert!((20..70).contains(&failed), "{failed} of 200 failed at 20 %");
}

#[test]
fn cudamalloc_costs_what_the_h200_measured_and_peers_add_to_it() {
    let g = SimDriver::new(SimConfig::new(6).devices(4).memory_per_device(GIB)).unwrap();
    let t0 = g.now_ns();
    let p = g.mem_alloc(4096).unwrap();
    g.mem_free(p).unwrap();
    let small = g.now_ns() - t0;
    assert!(
        (8_000..=10_000).contains(&small),
        "alloc+free of 4 KiB: {small} ns"
    );
    let t1 = g.now_ns();
    let p = g.mem_alloc(64 << 20).unwrap();
    g.mem_free(p).unwrap();
    let large = g.now_ns() - t1;
    assert!(
        (104_000..=128_000).contains(&large),
        "alloc+free of 64 MiB: {large} ns"
    );
    let t2 = g.now_ns();
    let s = g.stream_create(true).unwrap();
    let pool = g.device_default_mem_pool(DeviceId(0)).unwrap();
    g.mem_pool_set_release_threshold(pool, u64::MAX).unwrap();
    let p = g.mem_alloc_async(4096, s).unwrap();
    g.mem_free_async(p, s).unwrap();
    let t3 = g.now_ns();
    let p = g.mem_alloc_async(4096, s).unwrap();
    g.mem_free_async(p, s).unwrap();
    let pooled = (g.now_ns() - t3) / 2;
    assert!(
        (900..=1_100).contains(&pooled),
        "pooled async op: {pooled} ns"
    );
    assert!(t3 > t2);
    // With three peers mapping device 0, every cuMemAlloc costs more.
    for d in 1..4 {
        g.set_current_context(g.primary_context(DeviceId(d)).unwrap())
            .unwrap();
        g.enable_peer_access(g.primary_context(DeviceId(0)).unwrap())
            .unwrap();
    }
    g.set_current_context(g.primary_context(DeviceId(0)).unwrap())
        .unwrap();
    let t4 = g.now_ns();
    let p = g.mem_alloc(4096).unwrap();
    g.mem_free(p).unwrap();
    assert!(g.now_ns() - t4 > small);
    assert_eq!(
        code(g.enable_peer_access(g.primary_context(DeviceId(0)).unwrap())),
        CudaCode::INVALID_DEVICE
    );
}

#[test]
fn memory_info_is_consistent() {
    let g = gpu();
    let i = g.mem_get_info().unwrap();
    assert_eq!((i.free, i.total), (GIB, GIB));
    let p = g.mem_alloc(1000).unwrap();
    assert_eq!(g.mem_get_info().unwrap().free, GIB - 1024);
    assert_eq!(g.mem_get_address_range(p.offset(999)).unwrap(), (p, 1000));
    assert_eq!(
        code(g.mem_get_address_range(p.offset(1000))),
        CudaCode::NOT_FOUND
    );
}

#[test]
fn leaks_are_reported_with_their_kind() {
    let g = gpu();
    g.mem_alloc(100).unwrap();
    g.host_alloc(200, HostAllocFlags::default()).unwrap();
    g.stream_create(false).unwrap();
    g.event_create().unwrap();
    let r = g.report();
    assert!(!r.is_clean());
    assert_eq!(r.device_memory.bytes, 100);
    assert_eq!(r.pinned_memory.bytes, 200);
    assert_eq!(r.leaked_bytes(), 300);
    assert_eq!((r.streams.count, r.events.count), (1, 1));
}

#[test]
fn bad_configs_are_refused_with_the_field_named() {
    let e = SimDriver::new(SimConfig::new(1).devices(0)).unwrap_err();
    assert!(e.contains("devices"), "{e}");
}

#[test]
fn opening_an_ipc_handle_happens_after_making_it() {
    let exporter = gpu();
    let importer = exporter.process();
    let a = exporter.mem_alloc(4096).unwrap();
    exporter.memcpy_htod(a, &[1; 4096], None).unwrap();
    // The copy may still be in flight when cuMemcpyHtoD returns: finish it before exporting.
    exporter.stream_synchronize(StreamId::DEFAULT).unwrap();
    let h = exporter.ipc_get_mem_handle(a).unwrap();
    let opened = importer.ipc_open_mem_handle(&h).unwrap();
    importer.memcpy_dtoh(&mut [0; 4096], opened, None).unwrap();
    assert_eq!(
        exporter.report().races().count(),
        0,
        "{}",
        exporter.report()
    );
    // A write by the exporter after the handle was sent is ordered with neither the importer's
    // earlier read nor its later write.
    exporter.memset_d8(a, 2, 4096, None).unwrap();
    importer.memset_d8(opened, 3, 4096, None).unwrap();
    assert_eq!(
        exporter.report().races().count(),
        2,
        "{}",
        exporter.report()
    );
}

#[test]
fn a_kernel_touches_a_peer_device_only_after_peer_access_is_enabled() {
    let g = SimDriver::new(SimConfig::new(8).devices(2).memory_per_device(GIB)).unwrap();
    let on_dev0 = g.mem_alloc(4096).unwrap();
    let (c0, c1) = (
        g.primary_context(DeviceId(0)).unwrap(),
        g.primary_context(DeviceId(1)).unwrap(),
    );
    g.set_current_context(c1).unwrap();
    let s1 = g.stream_create(true).unwrap();
    assert_eq!(
        code(g.device_access(on_dev0, 16, s1, false)),
        CudaCode::ILLEGAL_ADDRESS
    );
    assert!(matches!(
        g.report().violations[0],
        Violation::PeerAccess { .. }
    ));
    // Copies go through the copy engine and need no peer access.
    g.memcpy_dtoh(&mut [0; 16], on_dev0, Some(s1)).unwrap();
    assert!(g.can_access_peer(DeviceId(1), DeviceId(0)).unwrap());
    g.enable_peer_access(c0).unwrap();
    g.device_access(on_dev0, 16, s1, false).unwrap();
    assert_eq!(
        code(g.enable_peer_access(c0)),
        CudaCode::PEER_ACCESS_ALREADY_ENABLED
    );
    assert_eq!(g.report().violations.len(), 1);
}

#[test]
fn each_thread_has_its_own_per_thread_default_stream() {
    let g = gpu();
    let a = g.mem_alloc(4096).unwrap();
    g.memset_d8(a, 1, 4096, Some(StreamId::PER_THREAD)).unwrap();
    // The same thread's per-thread stream is ordered with itself.
    g.memset_d8(a, 2, 4096, Some(StreamId::PER_THREAD)).unwrap();
    assert_eq!(g.report().races().count(), 0);
    // Another thread's per-thread stream is a different stream: unordered, a race.
    let g2 = g.clone();
    std::thread::spawn(move || {
        g2.memset_d8(a, 3, 4096, Some(StreamId::PER_THREAD))
            .unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(g.report().races().count(), 1);
    assert_eq!(
        code(g.stream_destroy(StreamId::PER_THREAD)),
        CudaCode::INVALID_HANDLE
    );
    g.mem_free(a).unwrap();
    assert!(
        g.report().nothing_held(),
        "per-thread streams are not leaks: {}",
        g.report()
    );
}

#[test]
fn stream_ordered_memory_is_usable_elsewhere_only_after_its_allocation() {
    let g = gpu();
    let (a, b) = (
        g.stream_create(true).unwrap(),
        g.stream_create(true).unwrap(),
    );
    let p = g.mem_alloc_async(4096, a).unwrap();
    g.memset_d8(p, 1, 4096, Some(a)).unwrap();
    assert_eq!(g.report().races().count(), 0, "same stream: {}", g.report());
    let q = g.mem_alloc_async(4096, a).unwrap();
    g.memset_d8(q, 1, 4096, Some(b)).unwrap();
    let races: Vec<String> = g.report().races().map(ToString::to_string).collect();
    assert_eq!(races.len(), 1, "{races:?}");
    assert!(races[0].contains("cuMemAllocAsync"), "{races:?}");
    let e = g.event_create().unwrap();
    let r = g.mem_alloc_async(4096, a).unwrap();
    g.event_record(e, a).unwrap();
    g.stream_wait_event(b, e).unwrap();
    g.memset_d8(r, 1, 4096, Some(b)).unwrap();
    assert_eq!(
        g.report().races().count(),
        1,
        "ordered after the allocation: {}",
        g.report()
    );
}
