//! The enablement switch: off by default; on, a new context's device, host and managed
//! allocations come from the caching managed allocator with the RFC's hints; the environment
//! variable wins; a device without managed-memory support is a clear error.
//!
//! The switch is process-wide, so every test here holds one lock.

use std::sync::{Arc, Mutex, MutexGuard};

use emm_core::contract::{Context, EmmError, ManagerFactory};
use emm_core::managers::{DefaultManager, ResourceManagerFactory};
use emm_core::unified::{
    context_allocator, get_enabled_unified_memory, set_enabled_unified_memory,
    set_unified_memory_options, CachingManagedOptions, ManagedLimit, UNIFIED_MEMORY_ENV_VAR,
};
use emm_core::{DeviceId, Driver, Location, StreamId};
use emm_sim::{CallKind, SimConfig, SimDriver, GIB};

static SWITCH: Mutex<()> = Mutex::new(());

/// Holds the switch for one test and turns it off again when dropped.
struct Switch(#[expect(dead_code, reason = "held for its drop")] MutexGuard<'static, ()>);

impl Switch {
    fn on(on: bool) -> Switch {
        let guard = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
        std::env::remove_var(UNIFIED_MEMORY_ENV_VAR);
        set_enabled_unified_memory(on);
        Switch(guard)
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        set_enabled_unified_memory(false);
        std::env::remove_var(UNIFIED_MEMORY_ENV_VAR);
    }
}

fn gpu(config: SimConfig) -> Arc<SimDriver> {
    Arc::new(SimDriver::new(config).unwrap())
}

fn context(
    g: &Arc<SimDriver>,
    factory: &dyn ManagerFactory,
) -> Result<Context<SimDriver>, EmmError> {
    let ctx = Context::with_factory(Arc::clone(g), DeviceId(0), factory)?;
    ctx.prepare_for_use()?;
    Ok(ctx)
}

#[test]
fn off_by_default_contexts_keep_their_manager() {
    let _s = Switch::on(false);
    assert!(!get_enabled_unified_memory().unwrap());
    let g = gpu(SimConfig::new(1).memory_per_device(GIB));
    let ctx = context(&g, &*DefaultManager::factory()).unwrap();
    assert_eq!(ctx.manager().name(), "DefaultManager");
    assert!(context_allocator(&ctx).is_none());
    drop(ctx.memalloc(4096).unwrap());
    assert_eq!(
        g.device_allocations_by_caller().get("DefaultManager"),
        Some(&1)
    );
}

/// The RFC: "When UVM is enabled, we propose forgoing all traditional allocators and working
/// with a newly developed CachingManagedAllocator."
#[test]
fn on_every_allocation_of_a_new_context_comes_from_the_cache_with_the_rfcs_hints() {
    let _s = Switch::on(true);
    let g = gpu(SimConfig::new(2).memory_per_device(GIB));
    for factory in [
        DefaultManager::factory(),
        Arc::new(ResourceManagerFactory::new("pool")),
    ] {
        let ctx = context(&g, &*factory).unwrap();
        assert!(
            ctx.manager().name().starts_with("UnifiedManager over "),
            "{}",
            ctx.manager().name()
        );
        let caps = ctx.capabilities();
        assert!(caps.managed_memory && caps.stream_ordered && !caps.ipc);
        let dev = ctx.memalloc(10_000).unwrap();
        let host = ctx.memhostalloc(10_000, true, false, false).unwrap();
        let managed = ctx.memallocmanaged(10_000, true).unwrap();
        let a = g.managed_advice(dev.device_ptr()).unwrap();
        assert_eq!(
            (a.preferred_location, a.accessed_by),
            (Some(Location::Device(DeviceId(0))), vec![])
        );
        let host_ptr = host.device_ptr().unwrap();
        assert_eq!(
            host_ptr.0,
            host.host_ptr().0,
            "managed: one address for both"
        );
        let a = g.managed_advice(host_ptr).unwrap();
        assert_eq!(
            (a.preferred_location, a.accessed_by),
            (Some(Location::Host), vec![Location::Device(DeviceId(0))])
        );
        let a = g.managed_advice(managed.device_ptr()).unwrap();
        assert_eq!((a.preferred_location, a.accessed_by), (None, vec![]));
        let again = dev.device_ptr();
        drop(dev);
        let reused = ctx.memalloc(10_000).unwrap();
        assert_eq!(
            reused.device_ptr(),
            again,
            "freed to the cache, reused at once"
        );
        let cache = context_allocator(&ctx).unwrap();
        assert_eq!(cache.stats().live_blocks, 3);
        let e = ctx.get_ipc_handle(&reused).unwrap_err();
        assert!(e.to_string().contains("cuIpcGetMemHandle"), "{e}");
        // The stream-ordered extension too.
        let s = g.stream_create(true).unwrap();
        let p = ctx.memalloc_async(5000, s).unwrap();
        let at = p.device_ptr();
        ctx.memfree_async(p, s).unwrap();
        let q = ctx.memalloc_async(5000, s).unwrap();
        assert_eq!(q.device_ptr(), at, "freed on s, reused on s at once");
        ctx.memfree_async(q, s).unwrap();
        // memalloc memory freed through memfree_async takes its usual path.
        ctx.memfree_async(ctx.memalloc(100).unwrap(), s).unwrap();
        let view = ctx.memalloc(4096).unwrap();
        let e = ctx.memfree_async(view.view(256..).unwrap(), s).unwrap_err();
        assert!(e.to_string().contains("is a view"), "{e}");
        drop((reused, host, managed, view));
        ctx.reset().unwrap();
        assert_eq!(
            cache.stats().held_bytes,
            0,
            "reset gives the free segments back"
        );
        g.stream_destroy(s).unwrap();
    }
    let by = g.device_allocations_by_caller();
    assert_eq!(
        by.keys().copied().collect::<Vec<_>>(),
        ["CachingManagedAllocator"],
        "{by:?}"
    );
    assert!(g
        .trace()
        .iter()
        .all(|e| e.call != CallKind::MemAlloc && e.call != CallKind::HostAlloc));
}

#[test]
fn the_options_of_new_contexts_are_settable() {
    let _s = Switch::on(true);
    let bad = CachingManagedOptions::default().min_block(100);
    assert!(set_unified_memory_options(bad).is_err());
    let opts = CachingManagedOptions::default().limit(ManagedLimit::Oversubscribe);
    set_unified_memory_options(opts).unwrap();
    let g = gpu(SimConfig::new(3).memory_per_device(64 << 20));
    let ctx = context(&g, &*DefaultManager::factory()).unwrap();
    let big = ctx.memalloc(100 << 20).unwrap();
    assert_eq!(
        context_allocator(&ctx).unwrap().options().limit,
        ManagedLimit::Oversubscribe
    );
    drop(big);
    set_unified_memory_options(CachingManagedOptions::default()).unwrap();
    let ctx = context(&g, &*DefaultManager::factory()).unwrap();
    let e = ctx.memalloc(100 << 20).unwrap_err();
    assert!(
        e.is_out_of_memory() && e.to_string().contains("hang a real GPU"),
        "{e}"
    );
}

/// The RFC: "UVM will not successfully enable when CUDA/ROCm is not present."
#[test]
fn a_device_without_concurrent_managed_access_is_a_clear_error() {
    let _s = Switch::on(true);
    let mut config = SimConfig::new(4);
    config.concurrent_managed_access = false;
    let g = gpu(config);
    let e = context(&g, &*DefaultManager::factory()).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("concurrent managed access") && text.contains("EMM_ENABLE_UNIFIED_MEMORY"),
        "{text}"
    );
}

/// The RFC: "a check on the environment for the `PYTORCH_ENABLE_UNIFIED_MEMORY` variable.
/// When set, the same global context enablement flag will be set."
#[test]
fn the_environment_variable_wins() {
    let _s = Switch::on(false);
    let g = gpu(SimConfig::new(5).memory_per_device(GIB));
    std::env::set_var(UNIFIED_MEMORY_ENV_VAR, "1");
    let ctx = context(&g, &*DefaultManager::factory()).unwrap();
    assert!(context_allocator(&ctx).is_some());
    set_enabled_unified_memory(true);
    std::env::set_var(UNIFIED_MEMORY_ENV_VAR, "0");
    let ctx = context(&g, &*DefaultManager::factory()).unwrap();
    assert!(context_allocator(&ctx).is_none());
    std::env::set_var(UNIFIED_MEMORY_ENV_VAR, "sometimes");
    let e = context(&g, &*DefaultManager::factory()).unwrap_err();
    assert!(
        e.to_string()
            .contains("EMM_ENABLE_UNIFIED_MEMORY = \"sometimes\""),
        "{e}"
    );
    assert!(get_enabled_unified_memory().is_err());
}

#[test]
fn pointers_outlive_their_context_and_still_return_to_the_cache() {
    let _s = Switch::on(true);
    let g = gpu(SimConfig::new(6).memory_per_device(GIB));
    let ctx = context(&g, &*DefaultManager::factory()).unwrap();
    let cache = context_allocator(&ctx).unwrap();
    let p = ctx.memalloc(4096).unwrap();
    drop(ctx);
    assert_eq!(cache.stats().live_blocks, 1);
    drop(p);
    assert_eq!(cache.stats().live_blocks, 0);
    cache.take_failures().unwrap();
    drop(cache);
    assert_eq!(
        g.report().managed_memory.count,
        0,
        "the last owner gave the segments back"
    );
    let _ = StreamId::DEFAULT;
}
