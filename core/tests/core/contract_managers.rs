//! The built-in managers on the simulated GPU: one test per rule of the EMM contract.

use std::sync::Arc;

use emm_core::contract::{
    Dealloc, DeallocSink, EmmError, HostMemory, MemoryManager, PendingDeallocsConfig,
};
use emm_core::managers::DefaultManager;
use emm_core::{ContextId, DeviceId, DevicePtr, Driver, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, GIB, MIB};

fn gpu() -> Arc<SimDriver> {
    Arc::new(SimDriver::new(SimConfig::new(3).memory_per_device(GIB)).unwrap())
}

fn ctx(g: &SimDriver) -> ContextId {
    g.primary_context(DeviceId(0)).unwrap()
}

fn manager(g: &Arc<SimDriver>, config: PendingDeallocsConfig) -> DefaultManager<SimDriver> {
    let m = DefaultManager::with_config(g.clone(), ctx(g), config);
    m.initialize().unwrap();
    m
}

fn config(max_count: usize, max_ratio: f64) -> PendingDeallocsConfig {
    PendingDeallocsConfig {
        max_count,
        max_ratio,
    }
}

fn used(g: &SimDriver) -> u64 {
    g.device_memory_used(DeviceId(0))
}

fn write_read(g: &SimDriver, p: DevicePtr, bytes: &[u8]) -> Vec<u8> {
    g.memcpy_htod(p, bytes, None).unwrap();
    let mut back = vec![0; bytes.len()];
    g.memcpy_dtoh(&mut back, p, None).unwrap();
    back
}

/// Numba's reference: "This method may be called multiple times, and must not invalidate previous
/// state when it is called."
#[test]
fn initialize_is_idempotent() {
    let g = gpu();
    let m = manager(&g, config(10, 0.2));
    let p = m.memalloc(4096).unwrap();
    drop(m.memalloc(4096).unwrap());
    let threshold = m.deallocations().max_pending_bytes();
    for _ in 0..3 {
        m.initialize().unwrap();
    }
    assert_eq!(
        m.deallocations().len(),
        1,
        "pending frees survive initialize"
    );
    assert_eq!(m.deallocations().max_pending_bytes(), threshold);
    assert_eq!(write_read(&g, p.device_ptr(), b"still mine"), b"still mine");
}

/// Numba's reference: "It may be called even prior to initialize, and an EMM Plugin implementation
/// needs to guard against this."
#[test]
fn reset_may_come_before_initialize() {
    let g = gpu();
    let m = DefaultManager::new(g.clone(), ctx(&g));
    let calls = g.call_count();
    m.reset().unwrap();
    assert_eq!(g.call_count(), calls, "nothing to clean, nothing called");
    let e = m.memalloc(64).unwrap_err();
    assert!(matches!(e, EmmError::NotInitialized { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "DefaultManager: memalloc before initialize; call initialize \
         (Context::prepare_for_use) first"
    );
    m.initialize().unwrap();
    drop(m.memalloc(64).unwrap());
    m.reset().unwrap();
    assert!(m.deallocations().is_empty(), "reset flushes");
    assert_eq!(used(&g), 0);
}

/// NBEP 7: "a mechanism for preventing deallocations entirely during critical sections,
/// using the defer_cleanup() context manager" — nested, and an error inside re-enables it.
#[test]
fn defer_cleanup_nests_and_an_error_inside_it_re_enables_cleanup() {
    let g = gpu();
    let m = manager(&g, config(0, 1.0)); // every free flushes unless deferred
    let outer = m.defer_cleanup();
    let inner = m.defer_cleanup();
    drop(m.memalloc(4096).unwrap());
    drop(inner);
    assert_eq!(used(&g), 4096, "the outer guard still defers");
    assert!(m.deallocations().is_disabled());
    drop(outer);
    assert_eq!(used(&g), 0, "the last guard going flushes what it held");

    fn critical(m: &DefaultManager<SimDriver>) -> Result<(), EmmError> {
        let _cleanup = m.defer_cleanup();
        drop(m.memalloc(4096)?);
        m.memalloc(0)?; // fails: the `?` leaves the scope
        Ok(())
    }
    let e = critical(&m).unwrap_err();
    assert!(matches!(e, EmmError::InvalidArgument { .. }), "{e}");
    assert!(!m.deallocations().is_disabled());
    assert_eq!(used(&g), 0);

    let m = std::panic::AssertUnwindSafe(&m);
    let r = std::panic::catch_unwind(|| {
        let _cleanup = m.defer_cleanup();
        panic!("a panic inside the scope");
    });
    assert!(r.is_err());
    assert!(
        !m.deallocations().is_disabled(),
        "unwinding drops the guard"
    );
}

/// NBEP 7: "When the addition of a new cleanup function to the deallocation list causes
/// the number or size of pending deallocations to exceed a configured ratio … runs
/// deallocators for all items". Count: more than `max_count`; bytes: more than the ratio of
/// device memory.
#[test]
fn pending_deallocs_flush_past_the_count_and_byte_thresholds() {
    let g = gpu();
    let m = manager(&g, config(3, 1.0));
    let ptrs: Vec<_> = (0..4).map(|_| m.memalloc(MIB as usize).unwrap()).collect();
    let mut ptrs = ptrs.into_iter();
    for _ in 0..3 {
        drop(ptrs.next());
    }
    assert_eq!((m.deallocations().len(), used(&g)), (3, 4 * MIB));
    drop(ptrs.next());
    assert_eq!(
        (m.deallocations().len(), used(&g)),
        (0, 0),
        "the 4th free is past 3"
    );

    let m = manager(&g, config(10, 0.2)); // 20 % of 1 GiB = 204.8 MiB
    assert_eq!(m.deallocations().max_pending_bytes(), Some(GIB / 5));
    let a = m.memalloc((100 * MIB) as usize).unwrap();
    let b = m.memalloc((100 * MIB) as usize).unwrap();
    let c = m.memalloc((100 * MIB) as usize).unwrap();
    drop((a, b));
    assert_eq!(m.deallocations().pending_bytes(), 200 * MIB);
    assert_eq!(used(&g), 300 * MIB, "200 MiB pending is under 204.8 MiB");
    drop(c);
    assert_eq!(used(&g), 0, "300 MiB pending is over: all flushed");
}

#[test]
fn thresholds_come_from_the_environment_variables() {
    let c = PendingDeallocsConfig::from_env_values(Some("25"), Some("0.5")).unwrap();
    assert_eq!(c, config(25, 0.5));
    assert_eq!(
        PendingDeallocsConfig::from_env_values(None, None).unwrap(),
        config(10, 0.2)
    );
    let e = PendingDeallocsConfig::from_env_values(Some("ten"), None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "EMM_MAX_PENDING_DEALLOCS_COUNT = \"ten\": give a whole number of deallocations, e.g. 10"
    );
    let e = PendingDeallocsConfig::from_env_values(None, Some("1.5")).unwrap_err();
    assert!(e.to_string().contains("from 0 to 1"), "{e}");
}

/// Numba's `_attempt_allocation`: on out of memory, clear the pending deallocations and try
/// once more.
#[test]
fn out_of_memory_flushes_pending_frees_and_retries_once() {
    let g = gpu();
    let m = manager(&g, config(10, 1.0));
    drop(m.memalloc((600 * MIB) as usize).unwrap());
    assert_eq!(m.deallocations().len(), 1);
    let start = g.trace().len();
    let p = m.memalloc((600 * MIB) as usize).unwrap();
    let calls: Vec<_> = g.trace()[start..]
        .iter()
        .map(|e| (e.call, e.result.is_ok()))
        .filter(|(c, _)| matches!(c, CallKind::MemAlloc | CallKind::MemFree))
        .collect();
    assert_eq!(
        calls,
        [
            (CallKind::MemAlloc, false),
            (CallKind::MemFree, true),
            (CallKind::MemAlloc, true)
        ]
    );
    // Out of memory that no flush can fix is an error that leaves the manager usable.
    let e = m.memalloc((600 * MIB) as usize).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    assert!(e.to_string().contains("requested 600.0 MiB"), "{e}");
    let e = m.memalloc(usize::MAX).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    drop(p);
    m.reset().unwrap();
    drop(m.memalloc((600 * MIB) as usize).unwrap());
}

/// The injected level of the simulator counts as the device running out.
#[test]
fn out_of_memory_at_a_chosen_level_is_typed() {
    let g = gpu();
    g.inject(Fault::OutOfMemoryAbove {
        device: None,
        bytes: MIB,
    });
    let m = manager(&g, config(10, 0.2));
    let e = m.memalloc((2 * MIB) as usize).unwrap_err();
    assert!(matches!(e, EmmError::OutOfMemory { requested, .. } if requested == 2 * MIB));
    drop(m.memalloc(4096).unwrap());
}

/// Numba's reference: "MappedMemory: returned from memhostalloc or mempin when the host memory is
/// mapped into the device memory space."
#[test]
fn mapped_memory_has_a_device_pointer() {
    let g = gpu();
    let m = manager(&g, config(10, 0.2));
    let HostMemory::Mapped(mapped) = m.memhostalloc(4096, true, false, false).unwrap() else {
        panic!("mapped = true gives MappedMemory");
    };
    g.host_write(mapped.host_ptr(), b"written by the host")
        .unwrap();
    let mut back = [0u8; 19];
    g.memcpy_dtoh(&mut back, mapped.device_ptr(), None).unwrap();
    assert_eq!(&back, b"written by the host");
    let pinned = m.memhostalloc(4096, false, true, true).unwrap();
    assert!(!pinned.is_mapped() && pinned.device_ptr().is_none());

    let h = g.pageable_alloc(8192).unwrap();
    let owner: emm_core::contract::PinOwner = Arc::new("the host array");
    let pinned = m.mempin(Some(owner), h, 8192, true).unwrap();
    let mapped_pin = pinned.into_mapped().unwrap();
    assert_eq!(
        mapped_pin.device_ptr(),
        g.host_device_pointer(h).unwrap(),
        "mempin(mapped) gives the driver's device alias"
    );
    assert!(mapped_pin.pin_owner().is_some());
    drop((mapped, mapped_pin));
    m.reset().unwrap();
    g.pageable_free(h).unwrap();
}

/// NBEP 7: "pinned memory is immediately unpinned by its finalizer" — and pinning the same
/// range again after that works, although the unpin was deferred.
#[test]
fn pinning_the_same_range_twice_after_an_unpin_works() {
    let g = gpu();
    let m = manager(&g, config(10, 0.2));
    let h = g.pageable_alloc(1 << 16).unwrap();
    let first = m.mempin(None, h, 4096, false).unwrap();
    let e = m.mempin(None, h, 4096, false).unwrap_err();
    assert!(
        e.to_string().contains("HOST_MEMORY_ALREADY_REGISTERED"),
        "{e}"
    );
    drop(first);
    let second = m.mempin(None, h, 4096, false).unwrap();
    drop(second);
    let _guard = m.defer_cleanup();
    let third = m.mempin(None, h.offset(1024), 4096, true).unwrap();
    drop(third);
    drop(_guard);
    m.reset().unwrap();
    g.pageable_free(h).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn managed_memory_comes_from_memallocmanaged_and_is_freed_once() {
    let g = gpu();
    let m = manager(&g, config(0, 1.0));
    assert!(m.capabilities().managed_memory);
    let a = m.memallocmanaged(1 << 20, true).unwrap();
    g.host_write(a.host_ptr(), b"unified").unwrap();
    let v = a.view(0..7).unwrap();
    assert_eq!(write_read(&g, v.device_ptr(), b"unified"), b"unified");
    drop((a, v));
    assert_eq!(g.report().managed_memory.count, 0);
}

#[test]
fn bad_sizes_are_errors_and_lose_nothing() {
    let g = gpu();
    let m = manager(&g, config(10, 0.2));
    let keep = m.memalloc(64).unwrap();
    for e in [
        m.memalloc(0).unwrap_err(),
        m.memhostalloc(0, true, false, false).unwrap_err(),
        m.mempin(None, emm_core::HostPtr(0x1000), 0, false)
            .unwrap_err(),
        m.memallocmanaged(0, true).unwrap_err(),
        m.memalloc_async(0, StreamId::DEFAULT).unwrap_err(),
    ] {
        assert!(matches!(e, EmmError::InvalidArgument { .. }), "{e}");
        assert!(e.to_string().contains("ask for at least 1 byte"), "{e}");
    }
    for e in [
        m.memhostalloc(usize::MAX, false, false, false).unwrap_err(),
        m.memallocmanaged(usize::MAX, true).unwrap_err(),
        m.memalloc_async(usize::MAX, StreamId::DEFAULT).unwrap_err(),
    ] {
        assert!(e.is_out_of_memory(), "{e}");
    }
    let e = m
        .mempin(None, emm_core::HostPtr(0x1234), 64, false)
        .unwrap_err();
    assert!(matches!(e, EmmError::Driver(_)), "not host memory: {e}");
    assert_eq!(write_read(&g, keep.device_ptr(), b"intact"), b"intact");
    assert_eq!(
        m.get_memory_info().unwrap(),
        g.mem_get_info().unwrap().into()
    );
}

/// The stream-ordered extension: memory freed on a stream is reusable at once on it.
#[test]
fn stream_ordered_memory_is_freed_on_the_stream_it_is_given() {
    let g = gpu();
    let m = manager(&g, config(10, 0.2));
    assert!(m.capabilities().stream_ordered);
    let (s1, s2) = crate::common::two_streams(&g);
    let a = m.memalloc_async(4096, s1).unwrap();
    g.memset_d8(a.device_ptr(), 1, 4096, Some(s1)).unwrap();
    let addr = a.device_ptr();
    m.memfree_async(a, s1).unwrap();
    let b = m.memalloc_async(4096, s1).unwrap();
    assert_eq!(b.device_ptr(), addr, "reused at once on the same stream");
    drop(b); // the finalizer frees on s1, where it was allocated: not deferred
    assert!(m.deallocations().is_empty());
    let c = m.memalloc_async(4096, s2).unwrap();
    g.memset_d8(c.device_ptr(), 2, 4096, Some(s2)).unwrap();
    m.memfree_async(c, s2).unwrap();
    assert_eq!(g.report().races().count(), 0, "{}", g.report());

    // A view, or a pointer with other owners, is refused and freed as usual later.
    let d = m.memalloc_async(4096, s1).unwrap();
    let e = m.memfree_async(d.view(16..).unwrap(), s1).unwrap_err();
    assert!(e.to_string().contains("view"), "{e}");
    drop(d);
    // A pointer of another manager is refused and released by its own finalizer.
    let other = manager(&g, config(0, 1.0));
    let foreign = other.memalloc(4096).unwrap();
    let e = m.memfree_async(foreign, s1).unwrap_err();
    assert!(
        e.to_string().contains("not allocated by DefaultManager"),
        "{e}"
    );
    // Memory from memalloc takes its usual path.
    m.memfree_async(m.memalloc(4096).unwrap(), s1).unwrap();
    m.reset().unwrap();
    for s in [s1, s2] {
        g.stream_destroy(s).unwrap();
    }
    g.context_synchronize().unwrap();
    assert_eq!(used(&g), 0, "{}", g.report());
}

/// A finalizer can hand a deallocation to any sink; the pending queue never loses one when
/// the manager is gone first.
#[test]
fn memory_freed_after_its_manager_is_gone_is_released_at_once() {
    let g = gpu();
    let m = manager(&g, config(10, 0.2));
    let p = m.memalloc(4096).unwrap();
    drop(m);
    assert_eq!(used(&g), 4096);
    drop(p);
    assert_eq!(used(&g), 0);
    // A sink is just a trait: the queue accepts any deallocation kind.
    let m = manager(&g, config(10, 0.2));
    let s = g.stream_create(false).unwrap();
    m.deallocations().add(Dealloc::Stream(s));
    m.reset().unwrap();
    assert_eq!(g.report().streams.count, 0);
}

/// DESIGN: "Concurrent use from many threads never hands out overlapping memory." Each thread
/// writes its own pattern and reads it back; an overlap would change another thread's bytes.
#[test]
fn concurrent_allocations_never_overlap() {
    let g = gpu();
    let m = Arc::new(manager(&g, config(10, 0.2)));
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let (g, m) = (g.clone(), Arc::clone(&m));
            std::thread::spawn(move || {
                let mut live = Vec::new();
                for i in 0..50usize {
                    let size = 256 * (1 + (i * 7 + t as usize) % 9);
                    let p = m.memalloc(size).unwrap();
                    g.memset_d8(p.device_ptr(), t, size, None).unwrap();
                    live.push(p);
                    if i % 3 == 0 {
                        drop(live.swap_remove(i % live.len()));
                    }
                }
                for p in &live {
                    let mut back = vec![0u8; p.size()];
                    g.memcpy_dtoh(&mut back, p.device_ptr(), None).unwrap();
                    assert!(back.iter().all(|&b| b == t), "another thread wrote here");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    m.reset().unwrap();
    assert_eq!(used(&g), 0);
    assert!(g.report().violations.is_empty(), "{}", g.report());
}
