//! `HostOnlyManager`: Numba's "Providing device memory management only" rules, with a
//! resource as the device side.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::BumpResource;
use emm_core::contract::{DeferCleanupGuard, EmmError, MemoryManager, PendingDeallocsConfig};
use emm_core::managers::HostOnlyManager;
use emm_core::mr::CudaResource;
use emm_core::{DeviceId, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB, MIB};

fn gpu() -> Arc<SimDriver> {
    Arc::new(SimDriver::new(SimConfig::new(11).memory_per_device(GIB)).unwrap())
}

type Bumped = HostOnlyManager<BumpResource, SimDriver>;

fn bumped(g: &Arc<SimDriver>, capacity: u64) -> Bumped {
    let ctx = g.primary_context(DeviceId(0)).unwrap();
    let config = PendingDeallocsConfig {
        max_count: 10,
        max_ratio: 0.2,
    };
    let m = HostOnlyManager::with_config(
        g.clone(),
        ctx,
        BumpResource::new(g.clone(), capacity),
        config,
    );
    m.initialize().unwrap();
    m
}

/// Numba's reference: "The host-only memory manager implements memhostalloc and mempin - the EMM
/// Plugin should still implement memalloc" — here the resource is the memalloc.
#[test]
fn device_memory_comes_from_the_resource_and_goes_back_at_once() {
    let g = gpu();
    let m = bumped(&g, MIB);
    let a = m.memalloc(1000).unwrap();
    let b = m.memalloc(1000).unwrap();
    assert_eq!(b.device_ptr().0 - a.device_ptr().0, 1024, "suballocated");
    assert_eq!(m.resource().live(), 2);
    drop(a);
    assert_eq!(m.resource().live(), 1, "device frees are not deferred");
    let e = m.memalloc((2 * MIB) as usize).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    assert!(
        e.to_string()
            .starts_with("HostOnlyManager over BumpResource: out of memory"),
        "{e}"
    );
    let host = m.memhostalloc(4096, true, false, false).unwrap();
    assert!(host.is_mapped());
    drop(host);
    assert_eq!(m.deallocations().len(), 1, "host frees are deferred");
    m.take_device_failures().unwrap();
    drop(b);
}

/// Numba's reference: "If reset is overridden, it must also call super().reset() to allow the host
/// allocations to be cleaned up." Here the host reset always runs, even when the device
/// side's reset fails.
#[test]
fn its_reset_always_runs_even_when_the_device_side_fails() {
    let g = gpu();
    let device_resets = Arc::new(AtomicUsize::new(0));
    let d = Arc::clone(&device_resets);
    let m = bumped(&g, MIB).with_reset_hook(move || {
        d.fetch_add(1, Ordering::SeqCst);
        Err(EmmError::invalid("reset", "the device side failed"))
    });
    drop(m.memhostalloc(4096, false, false, false).unwrap());
    assert_eq!(g.report().pinned_memory.count, 1, "pending");
    let e = m.reset().unwrap_err();
    assert_eq!(e.to_string(), "reset: the device side failed");
    assert_eq!(device_resets.load(Ordering::SeqCst), 1);
    assert_eq!(
        g.report().pinned_memory.count,
        0,
        "the host side was reset anyway"
    );
}

/// Numba's reference: "If defer_cleanup is overridden, it must hold an active context manager from
/// super().defer_cleanup() to ensure that host-side cleanup is also deferred."
#[test]
fn its_defer_cleanup_always_holds_the_host_side_around_the_device_side() {
    let g = gpu();
    let order = Arc::new(Mutex::new(Vec::new()));
    let host_was_held = Arc::new(AtomicBool::new(false));
    let m = bumped(&g, MIB);
    let (o, held) = (Arc::clone(&order), Arc::clone(&host_was_held));
    let pending = Arc::clone(m.deallocations());
    let m = m.with_defer_cleanup_hook(move || {
        held.store(pending.is_disabled(), Ordering::SeqCst);
        o.lock().unwrap().push("device held");
        let o = Arc::clone(&o);
        DeferCleanupGuard::new(move || o.lock().unwrap().push("device released"))
    });
    let guard = m.defer_cleanup();
    assert!(
        host_was_held.load(Ordering::SeqCst),
        "host held before the device side"
    );
    drop(m.memhostalloc(64, false, false, false).unwrap());
    assert_eq!(guard.holds(), 2);
    drop(guard);
    assert_eq!(*order.lock().unwrap(), ["device held", "device released"]);
    assert!(!m.deallocations().is_disabled());
}

/// Numba's reference: "It is optional to provide memory info from the get_memory_info method".
#[test]
fn memory_info_is_the_resources_or_unsupported() {
    let g = gpu();
    let m = bumped(&g, MIB);
    assert!(!m.capabilities().memory_info);
    let e = m.get_memory_info().unwrap_err();
    assert!(matches!(e, EmmError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("BumpResource cannot tell"), "{e}");
    let ctx = g.primary_context(DeviceId(0)).unwrap();
    let c = HostOnlyManager::new(g.clone(), ctx, CudaResource::<SimDriver>::new(g.clone()));
    assert!(c.capabilities().memory_info);
    assert_eq!(c.get_memory_info().unwrap().total, GIB);
}

#[test]
fn stream_ordered_requests_pass_their_stream_to_the_resource() {
    let g = gpu();
    let ctx = g.primary_context(DeviceId(0)).unwrap();
    let m = HostOnlyManager::new(g.clone(), ctx, CudaResource::<SimDriver>::new(g.clone()));
    m.initialize().unwrap();
    let s = g.stream_create(true).unwrap();
    let p = m.memalloc_async(4096, s).unwrap();
    m.memfree_async(p, s).unwrap();
    let p = m.memalloc_async(4096, StreamId::DEFAULT).unwrap();
    drop(p);
    g.stream_destroy(s).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}
