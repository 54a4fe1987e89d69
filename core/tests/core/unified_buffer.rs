//! `ManagedBuffer` on the simulated GPU: the RFC's move-instead-of-copy, its sync rule for
//! device-to-host moves, its hints, and `manage` / `unmanage`.

use std::sync::Arc;

use emm_core::containers::DeviceBuffer;
use emm_core::mr::{CudaResource, DeviceMemoryResource};
use emm_core::unified::{
    CachingManagedAllocator, CachingManagedOptions, ManagedBuffer, ManagedLimit, Placement,
    ToOptions, UnifiedError,
};
use emm_core::{DeviceId, DevicePtr, Driver, Location, StreamId};
use emm_sim::{CallKind, ManagedAdvice, SimConfig, SimDriver, GIB};

const D0: Location = Location::Device(DeviceId(0));
const S0: StreamId = StreamId::DEFAULT;

fn setup(config: SimConfig) -> (SimDriver, Arc<CachingManagedAllocator>) {
    let g = SimDriver::new(config).unwrap();
    let driver: Arc<dyn Driver> = Arc::new(g.clone());
    let options = CachingManagedOptions::default().limit(ManagedLimit::Oversubscribe);
    let cache = CachingManagedAllocator::new(driver, DeviceId(0), options).unwrap();
    (g, Arc::new(cache))
}

fn gpu() -> (SimDriver, Arc<CachingManagedAllocator>) {
    setup(SimConfig::new(11).memory_per_device(GIB))
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

/// The kinds of driver call made since trace position `from`.
fn calls_since(g: &SimDriver, from: usize) -> Vec<CallKind> {
    g.trace()[from..].iter().map(|e| e.call).collect()
}

fn ptr(b: &ManagedBuffer) -> DevicePtr {
    b.device_ptr().unwrap()
}

/// The RFC: "`.to(device)` … only creates a new Storage object and DataPtr with the current
/// tensor's memory address"; "No explicit cudaMemcpy in either direction; Set
/// cudaMemPrefetchAsync()".
#[test]
fn to_device_moves_the_same_memory_with_a_prefetch_and_no_copy() {
    let (g, cache) = gpu();
    let data = pattern(256 << 10);
    let host = ManagedBuffer::new(&cache, data.len(), Location::Host, S0).unwrap();
    host.write(0, &data, S0).unwrap();
    assert_eq!(g.residency(ptr(&host)), Some(Location::Host));
    let mark = g.trace().len();
    let dev = host.to(D0, S0, false).unwrap();
    let calls = calls_since(&g, mark);
    assert!(calls.contains(&CallKind::MemPrefetch), "{calls:?}");
    assert!(calls.contains(&CallKind::MemAdvise), "{calls:?}");
    for copy_or_alloc in [
        CallKind::MemcpyHtoD,
        CallKind::MemcpyDtoH,
        CallKind::MemcpyDtoD,
        CallKind::MemAllocManaged,
        CallKind::MemAlloc,
    ] {
        assert!(!calls.contains(&copy_or_alloc), "{calls:?}");
    }
    assert_eq!(dev.device_ptr(), host.device_ptr(), "same pointer");
    assert!(dev.shares_storage(&host) && dev.is_managed());
    assert_eq!(dev.location(), D0);
    g.stream_synchronize(S0).unwrap();
    for off in [0, (128 << 10) + 3, (256 << 10) - 1] {
        assert_eq!(g.residency(ptr(&dev).offset(off)), Some(D0), "byte {off}");
    }
    let stats = g.managed_stats();
    assert_eq!((stats.prefetched, stats.faults), (256 << 10, 0));
    assert_eq!(
        g.managed_advice(ptr(&dev)).unwrap().preferred_location,
        Some(D0)
    );
    assert_eq!(dev.read(S0).unwrap(), data, "contents intact");
    assert!(g.report().violations.is_empty(), "{}", g.report());
}

/// The RFC: "In the case where the tensor is sent from a cuda device to a cpu, a device level
/// sync will also be sent."
#[test]
fn a_blocking_move_to_the_host_synchronizes_and_the_host_reads_without_a_race() {
    let (g, cache) = gpu();
    let s = g.stream_create(true).unwrap();
    let dev = ManagedBuffer::new(&cache, 64 << 10, D0, s).unwrap();
    g.device_access(ptr(&dev), 64 << 10, s, true).unwrap();
    let mark = g.trace().len();
    let host = dev.to(Location::Host, s, false).unwrap();
    let calls = calls_since(&g, mark);
    let prefetch = calls.iter().position(|c| *c == CallKind::MemPrefetch);
    let sync = calls
        .iter()
        .position(|c| *c == CallKind::ContextSynchronize);
    assert!(prefetch.is_some() && sync > prefetch, "{calls:?}");
    host.read(s).unwrap();
    assert_eq!(g.report().races().count(), 0, "{}", g.report());
    assert_eq!(g.residency(ptr(&host)), Some(Location::Host));
    assert_eq!(
        g.managed_advice(ptr(&host)).unwrap(),
        ManagedAdvice {
            preferred_location: Some(Location::Host),
            accessed_by: vec![D0],
            read_mostly: false,
            attach_global: true,
        }
    );
    assert_eq!(
        g.managed_stats().faults,
        0,
        "the prefetch moved it, not faults"
    );
}

/// The RFC: "This sync can be disabled by using the non_blocking=true parameter … In this
/// case, explicit synchronization responsibility falls to the user."
#[test]
fn a_non_blocking_move_leaves_synchronization_to_the_caller() {
    let (g, cache) = gpu();
    let s = g.stream_create(true).unwrap();
    let dev = ManagedBuffer::new(&cache, 64 << 10, D0, s).unwrap();
    g.device_access(ptr(&dev), 64 << 10, s, true).unwrap();
    let mark = g.trace().len();
    let host = dev.to(Location::Host, s, true).unwrap();
    assert!(!calls_since(&g, mark).contains(&CallKind::ContextSynchronize));
    host.read(s).unwrap();
    assert_eq!(g.report().races().count(), 1, "{}", g.report());
    g.stream_synchronize(s).unwrap();
    host.read(s).unwrap();
    assert_eq!(
        g.report().races().count(),
        1,
        "after the sync the read is ordered"
    );
}

/// The RFC's hints: device allocations prefer the device with no accessed-by; host ones
/// prefer the host and are accessed by the current device; plain managed memory has none.
#[test]
fn each_kind_of_allocation_carries_the_rfcs_hints_without_an_advice_per_allocation() {
    let (g, cache) = gpu();
    let dev = ManagedBuffer::new(&cache, 1000, D0, S0).unwrap();
    let host = ManagedBuffer::new(&cache, 1000, Location::Host, S0).unwrap();
    let plain = cache
        .allocate_managed(1000, Placement::Unadvised, true, S0)
        .unwrap();
    let a = g.managed_advice(ptr(&dev)).unwrap();
    assert_eq!((a.preferred_location, a.accessed_by), (Some(D0), vec![]));
    let a = g.managed_advice(ptr(&host)).unwrap();
    assert_eq!(
        (a.preferred_location, a.accessed_by),
        (Some(Location::Host), vec![D0])
    );
    let a = g.managed_advice(plain).unwrap();
    assert_eq!((a.preferred_location, a.accessed_by), (None, vec![]));
    assert_eq!(dev.advised(), Some(Placement::Device(DeviceId(0))));
    // A second allocation of each kind comes from the advised segment: no cuMemAdvise (a
    // host block from the cache only waits for its stream, as the host may touch it at once).
    let mark = g.trace().len();
    let more: Vec<_> = (0..8)
        .map(|_| ManagedBuffer::new(&cache, 4096, Location::Host, S0).unwrap())
        .collect();
    let calls = calls_since(&g, mark);
    assert!(
        calls.iter().all(|c| *c == CallKind::StreamSynchronize),
        "{calls:?}"
    );
    let a = g.managed_advice(ptr(&more[7])).unwrap();
    assert_eq!(a.preferred_location, Some(Location::Host));
    cache.free(plain, 1000, S0).unwrap();
}

#[test]
fn a_moved_block_gets_its_pools_hints_back_when_freed() {
    let (g, cache) = gpu();
    let dev = ManagedBuffer::new(&cache, 4096, D0, S0).unwrap();
    // A neighbour keeps the segment in use, so the block stays cached (GiveBack::Displaced
    // would give back a segment the moved block emptied).
    let _neighbour = ManagedBuffer::new(&cache, 4096, D0, S0).unwrap();
    let p = ptr(&dev);
    let host = dev.to(Location::Host, S0, false).unwrap();
    assert_eq!(
        g.managed_advice(p).unwrap().preferred_location,
        Some(Location::Host)
    );
    drop((dev, host));
    let again = ManagedBuffer::new(&cache, 4096, D0, S0).unwrap();
    assert_eq!(ptr(&again), p, "the cache gives the block back");
    let a = g.managed_advice(p).unwrap();
    assert_eq!((a.preferred_location, a.accessed_by), (Some(D0), vec![]));
    cache.take_failures().unwrap();
}

#[test]
fn device_to_device_changes_the_preferred_device() {
    let (g, cache) = setup(SimConfig::new(3).devices(2).memory_per_device(GIB));
    let d1 = Location::Device(DeviceId(1));
    let data = pattern(128 << 10);
    let a = ManagedBuffer::new(&cache, data.len(), D0, S0).unwrap();
    a.write(0, &data, S0).unwrap();
    let b = a.to(d1, S0, false).unwrap();
    g.stream_synchronize(S0).unwrap();
    assert_eq!(g.residency(ptr(&b)), Some(d1));
    assert_eq!(
        g.managed_advice(ptr(&b)).unwrap().preferred_location,
        Some(d1)
    );
    assert_eq!(b.read(S0).unwrap(), data);
}

#[test]
fn a_move_to_where_it_is_makes_no_driver_call() {
    let (g, cache) = gpu();
    let a = ManagedBuffer::new(&cache, 4096, D0, S0).unwrap();
    let mark = g.trace().len();
    let b = a.to(D0, S0, false).unwrap();
    assert!(b.shares_storage(&a));
    assert!(calls_since(&g, mark).is_empty());
}

/// The RFC: `manage_memory()` copies a standard tensor into a managed one,
/// `unmanage_memory()` the reverse.
#[test]
fn manage_and_unmanage_round_trip_the_contents_on_the_host_and_on_the_device() {
    let (g, cache) = gpu();
    let data = pattern(100_000);
    {
        let standard = ManagedBuffer::from_host(&cache, &data);
        assert!(!standard.is_managed() && standard.device_ptr().is_none());
        let managed = standard.manage(S0).unwrap();
        assert!(managed.is_managed() && !managed.shares_storage(&standard));
        assert_eq!(managed.location(), Location::Host);
        assert_eq!(g.residency(ptr(&managed)), Some(Location::Host));
        assert_eq!(managed.read(S0).unwrap(), data);
        let back = managed.unmanage(S0).unwrap();
        assert!(!back.is_managed());
        assert_eq!(back.read(S0).unwrap(), data);
    }

    let mr: Arc<dyn DeviceMemoryResource> = Arc::new(CudaResource::new(g.clone()));
    let dbuf = DeviceBuffer::from_host_in(&data, S0, Arc::clone(&mr)).unwrap();
    let standard = ManagedBuffer::from_device_buffer(&cache, dbuf);
    let managed = standard.manage(S0).unwrap();
    assert!(managed.is_managed());
    assert_eq!(managed.location(), D0);
    g.stream_synchronize(S0).unwrap();
    assert_eq!(g.residency(ptr(&managed)), Some(D0));
    assert_eq!(managed.read(S0).unwrap(), data);
    let back = managed.unmanage_in(mr, S0).unwrap();
    assert!(!back.is_managed() && back.location() == D0);
    assert_eq!(back.read(S0).unwrap(), data);
    assert!(managed.manage(S0).unwrap().shares_storage(&managed));
    drop((standard, managed, back, cache));
    assert!(
        g.report().is_clean(),
        "nothing held once the cache goes: {}",
        g.report()
    );
}

/// The RFC: "if a conversion of a tensor under UVM changes any other attribute … the tensor
/// will need to make decisions … This will require a traditional call to the `_to_copy`".
#[test]
fn anything_besides_the_location_copies() {
    let (g, cache) = gpu();
    let data = pattern(70_000);
    let a = ManagedBuffer::new(&cache, data.len(), D0, S0).unwrap();
    a.write(0, &data, S0).unwrap();
    let mark = g.trace().len();
    let forced = a.to_with(ToOptions::new(D0).copy(true), S0).unwrap();
    assert!(calls_since(&g, mark).contains(&CallKind::MemcpyDtoD));
    assert!(forced.is_managed() && !forced.shares_storage(&a));
    assert_ne!(forced.device_ptr(), a.device_ptr());
    assert_eq!(forced.read(S0).unwrap(), data);

    let standard = a
        .to_with(ToOptions::new(Location::Host).managed(false), S0)
        .unwrap();
    assert!(!standard.is_managed() && standard.location() == Location::Host);
    assert_eq!(standard.read(S0).unwrap(), data);
    // A standard buffer copies on a change of location.
    let mark = g.trace().len();
    let again = standard.to(Location::Host, S0, false).unwrap();
    assert!(again.shares_storage(&standard) && calls_since(&g, mark).is_empty());
}

#[test]
fn bad_requests_are_errors_that_change_nothing() {
    let (_g, cache) = gpu();
    let e = ManagedBuffer::new(&cache, 0, D0, S0).unwrap_err();
    assert!(matches!(e, UnifiedError::InvalidArgument { .. }), "{e}");
    assert!(e.to_string().contains("at least 1 byte"), "{e}");
    let a = ManagedBuffer::new(&cache, 16, Location::Host, S0).unwrap();
    a.write(0, &[7; 16], S0).unwrap();
    let e = a.write(8, &[1; 9], S0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ManagedBuffer::write: 9 bytes at offset 8 do not fit the buffer's 16 bytes; give offset \
         + len <= 16"
    );
    assert!(a.write(usize::MAX, &[1], S0).is_err());
    assert_eq!(a.read(S0).unwrap(), [7; 16]);
    drop(a);
    assert_eq!(cache.stats().live_blocks, 0);
    cache.take_failures().unwrap();
    cache.check().unwrap();
}

/// Host memory from the cache is touched by the host at once, with no stream to order it: a
/// block the device may still be using must not be handed to the host.
#[test]
fn a_reused_host_block_is_idle_before_the_host_touches_it() {
    let (g, cache) = gpu();
    let s = g.stream_create(true).unwrap();
    let a = ManagedBuffer::new(&cache, 1 << 20, Location::Host, s).unwrap();
    let p = ptr(&a);
    g.device_access(p, 1 << 20, s, true).unwrap();
    drop(a);
    let b = ManagedBuffer::new(&cache, 1 << 20, Location::Host, s).unwrap();
    assert_eq!(ptr(&b), p, "the cache reuses the block");
    b.write(0, &[1; 4096], s).unwrap();
    assert_eq!(g.report().races().count(), 0, "{}", g.report());
}
