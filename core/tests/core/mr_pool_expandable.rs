//! `PoolResource` over an expandable segment: one reserved range grown by mapping physical
//! memory at its end. Blocks coalesce across what chunks would have kept apart, wholly free
//! granules at the end go back on release, driver failures change nothing, streams stay
//! ordered, and the pool falls back to chunks where it cannot take a segment.

use std::sync::Arc;

use emm_core::mr::{
    Backing, CudaResource, DeviceMemoryResource, Growth, MrError, PoolOptions, PoolResource,
    StatisticsAdaptor,
};
use emm_core::workloads;
use emm_core::{CudaCode, DeviceId, DevicePtr, Driver, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, GIB, MIB};

use crate::common::{calls_of, large_untraced_gpu, pool};

const S: StreamId = StreamId::DEFAULT;
const D0: DeviceId = DeviceId(0);

fn gpu() -> Arc<SimDriver> {
    Arc::new(SimDriver::new(SimConfig::new(8).memory_per_device(GIB)).unwrap())
}

fn with(g: &Arc<SimDriver>, o: PoolOptions) -> PoolResource<CudaResource<SimDriver>> {
    PoolResource::with_options(CudaResource::new(Arc::clone(g)), o).unwrap()
}

#[test]
fn blocks_coalesce_across_growth_and_no_chunk_is_allocated() {
    let g = gpu();
    let p = pool(&g);
    assert_eq!(
        p.backing(),
        None,
        "decided when the pool first takes memory"
    );
    let a = p.allocate(MIB as usize, S).unwrap();
    assert_eq!(p.backing(), Some(Backing::Expandable));
    assert_eq!(p.held_bytes(), 2 * MIB);
    // 3 MiB after 1 MiB: the free MiB at the end merges with 2 MiB more (chunks: 2 + 4 MiB).
    let b = p.allocate(3 * MIB as usize, S).unwrap();
    assert_eq!(b, a.offset(MIB), "one contiguous range");
    assert_eq!(p.held_bytes(), 4 * MIB);
    assert_eq!(
        g.device_memory_used(D0),
        4 * MIB,
        "what the pool holds, and no more"
    );
    assert_eq!(calls_of(&g, CallKind::MemAlloc), 0);
    assert_eq!(
        calls_of(&g, CallKind::MemCreate),
        2,
        "one handle per granule"
    );
    assert_eq!(calls_of(&g, CallKind::MemSetAccess), 2, "one per growth");
    assert_eq!(calls_of(&g, CallKind::MemAddressReserve), 1);
    assert!(
        g.trace()
            .iter()
            .filter(|e| e.call == CallKind::MemCreate)
            .all(|e| e.caller == "PoolResource"),
        "physical memory is attributed to the pool"
    );
    // A block across the granule boundary holds its bytes.
    let data: Vec<u8> = (0..3 * MIB as usize).map(|i| (i * 7 % 253) as u8).collect();
    g.memcpy_htod(b, &data, None).unwrap();
    let mut back = vec![0; data.len()];
    g.memcpy_dtoh(&mut back, b, None).unwrap();
    assert_eq!(back, data);
    p.deallocate(a, MIB as usize, S).unwrap();
    p.deallocate(b, 3 * MIB as usize, S).unwrap();
    p.check().unwrap();
    drop(p);
    let r = g.report();
    assert!(r.is_clean(), "unmapped, released, reservation freed:\n{r}");
}

#[test]
fn release_unmaps_the_wholly_free_granules_at_the_end() {
    let g = gpu();
    let p = pool(&g);
    let low = p.allocate(3 * MIB as usize, S).unwrap();
    let high = p.allocate(6 * MIB as usize, S).unwrap();
    assert_eq!(p.held_bytes(), 10 * MIB, "3 + 6 MiB rounded to the granule");
    assert_eq!(
        p.release().unwrap(),
        0,
        "the free MiB at the end is half a granule"
    );
    p.deallocate(high, 6 * MIB as usize, S).unwrap();
    assert_eq!(
        p.release().unwrap(),
        6 * MIB,
        "granules wholly above the live block go back"
    );
    assert_eq!(p.held_bytes(), 4 * MIB);
    assert_eq!(g.device_memory_used(D0), 4 * MIB);
    // The pool still grows from where it was cut.
    let again = p.allocate(5 * MIB as usize, S).unwrap();
    assert_eq!(again, low.offset(3 * MIB));
    p.deallocate(again, 5 * MIB as usize, S).unwrap();
    p.deallocate(low, 3 * MIB as usize, S).unwrap();
    assert_eq!(p.release().unwrap(), 8 * MIB);
    assert_eq!((p.held_bytes(), g.device_memory_used(D0)), (0, 0));
    let r = g.report();
    assert_eq!((r.mappings.count, r.physical_memory.count), (0, 0), "{r}");
    assert_eq!(r.reservations.count, 1, "the address range stays reserved");
    p.check().unwrap();
    let x = p.allocate(1000, S).unwrap();
    p.deallocate(x, 1000, S).unwrap();
    drop(p);
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn the_end_of_the_segment_is_kept_for_what_nothing_below_fits() {
    let g = gpu();
    let p = pool(&g);
    let a = p.allocate(4 * MIB as usize, S).unwrap();
    let hole = p.allocate(MIB as usize, S).unwrap();
    let b = p.allocate(MIB as usize, S).unwrap();
    p.deallocate(hole, MIB as usize, S).unwrap();
    p.deallocate(b, MIB as usize, S).unwrap();
    // The hole (now merged with b) is used first; the segment does not grow.
    let c = p.allocate(2 * MIB as usize, S).unwrap();
    assert_eq!(c, hole);
    assert_eq!(p.held_bytes(), 6 * MIB);
    for (x, n) in [(a, 4 * MIB), (c, 2 * MIB)] {
        p.deallocate(x, n as usize, S).unwrap();
    }
    p.check().unwrap();
}

#[test]
fn frees_on_other_streams_are_ordered_and_the_release_waits_for_them() {
    let g = gpu();
    let p = pool(&g);
    let (a, b) = crate::common::two_streams(&g);
    let x = p.allocate(3 * MIB as usize, a).unwrap();
    g.memset_d8(x, 1, 3 * MIB as usize, Some(a)).unwrap();
    p.deallocate(x, 3 * MIB as usize, a).unwrap();
    // B takes A's memory (the end of the segment), after waiting on A.
    let y = p.allocate(4 * MIB as usize, b).unwrap();
    assert_eq!(y, x, "A's free end merged with the growth");
    assert_eq!(calls_of(&g, CallKind::StreamWaitEvent), 1);
    g.memset_d8(y, 2, 4 * MIB as usize, Some(b)).unwrap();
    let z = p.allocate(MIB as usize, a).unwrap();
    g.device_access(z, 4096, a, true).unwrap();
    p.deallocate(y, 4 * MIB as usize, b).unwrap();
    p.deallocate(z, MIB as usize, a).unwrap();
    // Free memory on two streams: release synchronizes, coalesces, and unmaps it all.
    assert_eq!(p.release().unwrap(), 6 * MIB, "{p:?}");
    let r = g.report();
    assert_eq!(r.races().count(), 0, "{r}");
    assert!(r.violations.is_empty(), "{r}");
    drop(p);
    g.stream_destroy(a).unwrap();
    g.stream_destroy(b).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn out_of_memory_takes_other_streams_blocks_and_grows_by_exactly_what_is_lacking() {
    let g = gpu();
    let p = with(
        &g,
        PoolOptions::default().growth(Growth::Fixed { bytes: 64 * MIB }),
    );
    let s1 = g.stream_create(true).unwrap();
    let a = p.allocate(MIB as usize, s1).unwrap();
    let b = p.allocate(MIB as usize, S).unwrap();
    assert_eq!(p.held_bytes(), 64 * MIB, "at least 64 MiB per growth");
    // The free end (62 MiB) counts: only a request past the device's last byte fails.
    let big = (GIB - MIB) as usize;
    let e = p.allocate(big, S).unwrap_err();
    assert!(
        matches!(
            e,
            MrError::OutOfMemory {
                available: Some(_),
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("PoolResource"), "{e}");
    assert_eq!(p.held_bytes(), 64 * MIB, "a failed growth maps nothing");
    p.deallocate(a, MIB as usize, s1).unwrap();
    p.deallocate(b, MIB as usize, S).unwrap();
    // Every byte of the device: the 64 MiB held (freed on two streams) plus what it lacks.
    let all = p.allocate(GIB as usize, S).unwrap();
    assert_eq!(p.held_bytes(), GIB);
    p.deallocate(all, GIB as usize, S).unwrap();
    p.check().unwrap();
    drop(p);
    g.stream_destroy(s1).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn a_driver_failure_mid_growth_is_returned_and_changes_nothing() {
    for (call, nth) in [
        (CallKind::MemCreate, 2),
        (CallKind::MemMap, 2),
        (CallKind::MemSetAccess, 1),
    ] {
        let g = gpu();
        let p = pool(&g);
        let x = p.allocate(1000, S).unwrap();
        g.inject(Fault::FailNth {
            call: Some(call),
            nth,
            code: CudaCode::LAUNCH_FAILED,
        });
        let e = p.allocate(5 * MIB as usize, S).unwrap_err();
        assert!(
            matches!(e, MrError::Driver(ref d) if d.code == CudaCode::LAUNCH_FAILED),
            "{call:?}: {e}"
        );
        assert_eq!(p.held_bytes(), 2 * MIB, "{call:?}");
        assert_eq!(g.device_memory_used(D0), 2 * MIB, "{call:?}: rolled back");
        let y = p.allocate(5 * MIB as usize, S).unwrap();
        p.deallocate(y, 5 * MIB as usize, S).unwrap();
        p.deallocate(x, 1000, S).unwrap();
        p.check().unwrap();
        drop(p);
        assert!(g.report().is_clean(), "{call:?}: {}", g.report());
    }
}

#[test]
fn the_maximum_and_the_initial_size_bound_the_segment() {
    let g = gpu();
    let p = with(&g, PoolOptions::default().maximum_size(8 * MIB));
    let a = p.allocate(5 * MIB as usize, S).unwrap();
    let e = p.allocate(4 * MIB as usize, S).unwrap_err();
    assert!(
        matches!(e, MrError::OutOfMemory { requested, available: Some(av), .. }
            if requested == 4 * MIB && av == 2 * MIB),
        "{e}"
    );
    let b = p.allocate(3 * MIB as usize, S).unwrap();
    assert_eq!(p.held_bytes(), 8 * MIB, "the free MiB at the end merged");
    p.deallocate(a, 5 * MIB as usize, S).unwrap();
    p.deallocate(b, 3 * MIB as usize, S).unwrap();
    let q = with(&g, PoolOptions::default().initial_size(10 * MIB));
    assert_eq!(q.backing(), Some(Backing::Expandable));
    assert_eq!(q.held_bytes(), 10 * MIB);
    let before = g.call_count();
    let c = q.allocate(10 * MIB as usize, S).unwrap();
    assert_eq!(
        g.call_count(),
        before,
        "served from what was mapped at once"
    );
    q.deallocate(c, 10 * MIB as usize, S).unwrap();
    assert_eq!(q.release().unwrap(), 10 * MIB);
}

#[test]
fn absurd_sizes_are_out_of_memory_and_change_nothing() {
    let g = gpu();
    let p = pool(&g);
    let x = p.allocate(1000, S).unwrap();
    for n in [usize::MAX, usize::MAX - 1000, 1 << 50, (GIB + 1) as usize] {
        let e = p.allocate(n, S).unwrap_err();
        assert!(e.is_out_of_memory(), "{n}: {e}");
    }
    assert_eq!(
        (p.held_bytes(), g.device_memory_used(D0)),
        (2 * MIB, 2 * MIB)
    );
    p.deallocate(x, 1000, S).unwrap();
    p.check().unwrap();
}

#[test]
fn chunks_where_a_segment_cannot_be_had() {
    // The options ask for chunks.
    let g = gpu();
    let p = with(&g, PoolOptions::default().backing(Backing::Chunks));
    let x = p.allocate(1000, S).unwrap();
    assert_eq!(p.backing(), Some(Backing::Chunks));
    assert_eq!(calls_of(&g, CallKind::MemAlloc), 1);
    p.deallocate(x, 1000, S).unwrap();
    // The device has no virtual memory management.
    let no_vmm =
        Arc::new(SimDriver::new(SimConfig::new(8).virtual_memory_management(false)).unwrap());
    let p = pool(&no_vmm);
    let x = p.allocate(1000, S).unwrap();
    assert_eq!(p.backing(), Some(Backing::Chunks));
    p.deallocate(x, 1000, S).unwrap();
    // An upstream that counts what it hands out: the pool must go through it.
    let stats = PoolResource::new(StatisticsAdaptor::new(CudaResource::<SimDriver>::new(
        Arc::clone(&g),
    )));
    let x = stats.allocate(1000, S).unwrap();
    assert_eq!(stats.backing(), Some(Backing::Chunks));
    assert_eq!(stats.upstream().bytes_counter().value, 2 * MIB as i64);
    stats.deallocate(x, 1000, S).unwrap();
    // A failed reservation: chunks too.
    let g2 = gpu();
    g2.inject(Fault::FailNth {
        call: Some(CallKind::MemAddressReserve),
        nth: 1,
        code: CudaCode::OUT_OF_MEMORY,
    });
    let p = pool(&g2);
    let x = p.allocate(1000, S).unwrap();
    assert_eq!(p.backing(), Some(Backing::Chunks));
    p.deallocate(x, 1000, S).unwrap();
}

#[test]
fn the_standard_workloads_hold_at_most_ten_percent_over_peak_live() {
    let g = large_untraced_gpu();
    for w in [workloads::w1(), workloads::w2(), workloads::w3()] {
        let p = pool(&g);
        let peak = w.summary().peak_live_bytes;
        let mut max_held = 0;
        for _ in 0..2 {
            workloads::replay(
                &w,
                |n| {
                    let x = p.allocate(n as usize, S)?;
                    max_held = max_held.max(g.device_memory_used(D0));
                    Ok::<_, MrError>((x, n))
                },
                |(x, n): (DevicePtr, u64), _| p.deallocate(x, n as usize, S).unwrap(),
            )
            .unwrap();
            p.check().unwrap();
        }
        assert_eq!(p.backing(), Some(Backing::Expandable));
        // Measured 1.064 (W1), 1.083 (W2), 1.080 (W3): the target is 1.10.
        let ratio = max_held as f64 / peak as f64;
        assert!(
            ratio <= 1.10,
            "{}: held {max_held} for peak live {peak}: {ratio:.3}",
            w.name
        );
        assert_eq!(p.live_allocations(), 0);
    }
}

#[test]
fn a_large_growth_maps_at_most_64_handles_and_goes_back_a_handle_at_a_time() {
    let g = gpu();
    let p = pool(&g);
    // 512 MiB: 64 handles of 8 MiB, not 256 granules.
    let big = p.allocate(512 * MIB as usize, S).unwrap();
    assert_eq!(calls_of(&g, CallKind::MemCreate), 64);
    assert_eq!(calls_of(&g, CallKind::MemMap), 64);
    assert_eq!(g.device_memory_used(D0), 512 * MIB);
    // The bytes hold across handles.
    let data: Vec<u8> = (0..16 * MIB as usize)
        .map(|i| (i * 13 % 251) as u8)
        .collect();
    let across = big.offset(7 * MIB);
    g.memcpy_htod(across, &data, None).unwrap();
    let mut back = vec![0; data.len()];
    g.memcpy_dtoh(&mut back, across, None).unwrap();
    assert_eq!(back, data);
    // 100 MiB live at the start: the 8 MiB handles wholly above it go back, the 13th (which
    // it ends in) stays.
    p.deallocate(big, 512 * MIB as usize, S).unwrap();
    let low = p.allocate(100 * MIB as usize, S).unwrap();
    assert_eq!(low, big);
    assert_eq!(p.release().unwrap(), 51 * 8 * MIB);
    assert_eq!(g.device_memory_used(D0), 13 * 8 * MIB);
    p.deallocate(low, 100 * MIB as usize, S).unwrap();
    assert_eq!(p.release().unwrap(), 13 * 8 * MIB);
    let r = g.report();
    assert_eq!((r.mappings.count, r.physical_memory.count), (0, 0), "{r}");
    p.check().unwrap();
}

#[test]
fn a_request_beyond_free_memory_maps_nothing() {
    let g = gpu();
    let p = pool(&g);
    // Another user of the device holds 300 MiB of its 1 GiB.
    let other = g.mem_alloc(300 * MIB as usize).unwrap();
    let before = calls_of(&g, CallKind::MemCreate);
    let e = p.allocate(800 * MIB as usize, S).unwrap_err();
    assert!(
        matches!(e, MrError::OutOfMemory { requested, available: Some(free), .. }
            if requested == 800 * MIB && free == GIB - 300 * MIB),
        "{e}"
    );
    assert_eq!(
        calls_of(&g, CallKind::MemCreate),
        before,
        "refused before mapping a handle"
    );
    // What fits still does, and growth beyond the request stops at what is free.
    let a = p.allocate(700 * MIB as usize, S).unwrap();
    assert_eq!(g.device_memory_used(D0), 1000 * MIB);
    p.deallocate(a, 700 * MIB as usize, S).unwrap();
    g.mem_free(other).unwrap();
    p.check().unwrap();
}
