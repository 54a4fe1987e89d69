//! Contexts: one manager per context, always current, their own deallocations, attribution.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use emm_core::contract::{
    Context, EmmError, EmmResult, HostMemory, MemoryManager, MemoryPointer, PinOwner,
    INTERFACE_VERSION,
};
use emm_core::managers::{DefaultManager, HostOnlyManager};
use emm_core::mr::CudaResource;
use emm_core::{ContextId, DeviceId, Driver, HostPtr, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

fn gpus(n: u32) -> Arc<SimDriver> {
    Arc::new(SimDriver::new(SimConfig::new(5).devices(n).memory_per_device(GIB)).unwrap())
}

/// A v1-only manager that records, for every call, which context was current, and reports
/// the interface version it is given. It implements only the required methods.
struct Spy {
    inner: DefaultManager<SimDriver>,
    driver: Arc<SimDriver>,
    version: u32,
    log: Log,
}

/// What a spy saw: the current context at each call, and the number of `initialize` calls.
#[derive(Clone, Default)]
struct Log {
    current: Arc<Mutex<Vec<ContextId>>>,
    initialized: Arc<AtomicUsize>,
}

impl Spy {
    fn new(g: &Arc<SimDriver>, device: u32, version: u32) -> (Box<Spy>, Log) {
        let ctx = g.primary_context(DeviceId(device)).unwrap();
        let log = Log::default();
        let spy = Box::new(Spy {
            inner: DefaultManager::new(g.clone(), ctx),
            driver: g.clone(),
            version,
            log: log.clone(),
        });
        (spy, log)
    }
    fn saw(&self) {
        let c = self.driver.current_context().unwrap();
        self.log.current.lock().unwrap().push(c);
    }
}

impl MemoryManager for Spy {
    fn name(&self) -> &str {
        "Spy"
    }
    fn initialize(&self) -> EmmResult<()> {
        self.log.initialized.fetch_add(1, Ordering::SeqCst);
        self.saw();
        self.inner.initialize()
    }
    fn memalloc(&self, size: usize) -> EmmResult<MemoryPointer> {
        self.saw();
        self.inner.memalloc(size)
    }
    fn memhostalloc(&self, size: usize, m: bool, p: bool, wc: bool) -> EmmResult<HostMemory> {
        self.saw();
        self.inner.memhostalloc(size, m, p, wc)
    }
    fn mempin(
        &self,
        o: Option<PinOwner>,
        ptr: HostPtr,
        size: usize,
        m: bool,
    ) -> EmmResult<HostMemory> {
        self.saw();
        self.inner.mempin(o, ptr, size, m)
    }
    emm_core::forward_manager_calls!(inner: get_memory_info, get_ipc_handle, reset, defer_cleanup);
    fn interface_version(&self) -> u32 {
        self.version
    }
}

/// Numba's reference: "These methods are always called when the current CUDA context is the context
/// that owns the EMM Plugin instance." The caller's context is restored afterwards.
#[test]
fn allocation_methods_run_with_the_owning_context_current() {
    let g = gpus(2);
    let (spy, log) = Spy::new(&g, 1, INTERFACE_VERSION);
    let ctx = Arc::new(Context::with_manager(g.clone(), DeviceId(1), spy).unwrap());
    let caller = g.current_context().unwrap();
    assert_ne!(caller, ctx.id(), "this thread starts on device 0");
    let p = ctx.memalloc(4096).unwrap();
    let h = ctx.memhostalloc(64, false, false, false).unwrap();
    let pinned = g.pageable_alloc(4096).unwrap();
    let pin = ctx.mempin(None, pinned, 4096, false).unwrap();
    assert_eq!(g.current_context().unwrap(), caller, "restored");
    assert_eq!(
        g.device_memory_used(DeviceId(1)),
        4096,
        "landed on the context's device"
    );
    assert_eq!(g.device_memory_used(DeviceId(0)), 0);
    // From another thread too.
    let c = Arc::clone(&ctx);
    let q = std::thread::spawn(move || c.memalloc(256).unwrap())
        .join()
        .unwrap();
    assert_eq!(g.device_memory_used(DeviceId(1)), 4096 + 256);
    let seen = log.current.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        5,
        "initialize, memalloc, memhostalloc, mempin, memalloc"
    );
    assert!(seen.iter().all(|&c| c == ctx.id()), "{seen:?}");
    drop((p, h, pin, q));
    ctx.reset().unwrap();
    g.pageable_free(pinned).unwrap();
}

/// NBEP 7: "prepare_for_use … calls initialize"; Numba's reference: "This method may be called
/// multiple times". The context calls it before the first allocation, and again on request.
#[test]
fn prepare_for_use_calls_initialize_and_first_use_prepares() {
    let g = gpus(1);
    let (spy, log) = Spy::new(&g, 0, 1);
    let ctx = Context::with_manager(g.clone(), DeviceId(0), spy).unwrap();
    assert_eq!(
        log.initialized.load(Ordering::SeqCst),
        0,
        "making a context allocates nothing"
    );
    let p = ctx.memalloc(64).unwrap();
    assert_eq!(log.initialized.load(Ordering::SeqCst), 1);
    drop(ctx.memalloc(64).unwrap());
    assert_eq!(
        log.initialized.load(Ordering::SeqCst),
        1,
        "once prepared, not again"
    );
    ctx.prepare_for_use().unwrap();
    ctx.prepare_for_use().unwrap();
    assert_eq!(log.initialized.load(Ordering::SeqCst), 3);
    drop(p);

    // Numba's reference: reset "may be called even prior to initialize".
    let (spy, log) = Spy::new(&g, 0, 1);
    let ctx2 = Context::with_manager(g.clone(), DeviceId(0), spy).unwrap();
    ctx2.reset().unwrap();
    assert_eq!(log.initialized.load(Ordering::SeqCst), 0);
    drop(ctx2.memalloc(64).unwrap());
}

/// NBEP 7: "interface_version is called by Numba when the memory manager is set, to
/// ensure that the version of the interface implemented by the plugin is compatible".
#[test]
fn a_version_mismatch_is_an_error_naming_both_versions() {
    let g = gpus(1);
    let e = Context::with_manager(g.clone(), DeviceId(0), Spy::new(&g, 0, 2).0).unwrap_err();
    assert_eq!(
        e,
        EmmError::VersionMismatch {
            expected: 1,
            found: 2,
            manager: "Spy".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "memory manager interface version mismatch: emm implements version 1, the manager Spy \
         reports 2; rebuild the plugin against emm's contract v1"
    );
}

/// A v1-only manager keeps working: the extension's defaults say "unsupported".
#[test]
fn a_v1_only_manager_says_the_extensions_are_unsupported() {
    let g = gpus(1);
    let ctx = Context::with_manager(g.clone(), DeviceId(0), Spy::new(&g, 0, 1).0).unwrap();
    assert!(!ctx.capabilities().stream_ordered);
    let e = ctx.memalloc_async(64, StreamId::DEFAULT).unwrap_err();
    assert!(matches!(e, EmmError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("use memalloc"), "{e}");
    let p = ctx.memalloc(64).unwrap();
    assert!(ctx.memfree_async(p, StreamId::DEFAULT).is_err());
    assert!(matches!(
        ctx.memallocmanaged(64, true),
        Err(EmmError::Unsupported { .. })
    ));
    assert!(ctx.memalloc(64).is_ok(), "v1 calls still work");
}

/// NBEP 7: "these will still be used by the context to manage the allocations and
/// deallocations of events, streams, and modules".
#[test]
fn the_context_defers_streams_events_and_modules_itself() {
    let g = gpus(1);
    let ctx = Context::with_factory(g.clone(), DeviceId(0), &*DefaultManager::factory()).unwrap();
    let unloaded = Arc::new(AtomicUsize::new(0));
    {
        let _hold = ctx.defer_cleanup();
        let s = ctx.create_stream(true).unwrap();
        let e = ctx.create_event().unwrap();
        g.event_record(e.id(), s.id()).unwrap();
        drop((s, e));
        let u = Arc::clone(&unloaded);
        ctx.defer_unload("module kernels", 0, move || {
            u.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        assert_eq!(ctx.deallocations().len(), 3);
        assert_eq!(g.report().streams.count, 1, "held by defer_cleanup");
    }
    assert_eq!(
        ctx.deallocations().len(),
        3,
        "under the thresholds: still pending"
    );
    ctx.reset().unwrap();
    assert_eq!((g.report().streams.count, g.report().events.count), (0, 0));
    assert_eq!(unloaded.load(Ordering::SeqCst), 1);
    let s = ctx.create_stream(false).unwrap();
    drop(s);
    drop(ctx);
    assert_eq!(g.report().streams.count, 0, "dropping the context flushes");
}

/// DESIGN: "With a plugin in use, nothing else allocates device memory from the driver."
#[test]
fn the_driver_call_log_shows_no_device_allocation_outside_the_manager() {
    let g = gpus(1);
    let ctx = Context::with_factory(g.clone(), DeviceId(0), &*DefaultManager::factory()).unwrap();
    let s = ctx.create_stream(true).unwrap();
    let mut keep = Vec::new();
    for size in [1usize, 255, 4096, 1 << 20, 3 << 20] {
        keep.push(ctx.memalloc(size).unwrap());
        keep.push(ctx.memalloc_async(size, s.id()).unwrap());
    }
    let managed = ctx.memallocmanaged(1 << 16, true).unwrap();
    let mapped = ctx.memhostalloc(4096, true, false, false).unwrap();
    let h = ctx.get_ipc_handle(&keep[0]).unwrap();
    drop((keep, managed, mapped, h, s));
    ctx.reset().unwrap();
    let by = g.device_allocations_by_caller();
    assert_eq!(
        by.keys().copied().collect::<Vec<_>>(),
        ["DefaultManager"],
        "{by:?}"
    );
    assert_eq!(by["DefaultManager"], 11);

    // A resource chain in HostOnlyManager: only the manager and its resource allocate.
    let g = gpus(1);
    let id = g.primary_context(DeviceId(0)).unwrap();
    let m = HostOnlyManager::new(g.clone(), id, CudaResource::<SimDriver>::new(g.clone()));
    let ctx = Context::with_manager(g.clone(), DeviceId(0), Box::new(m)).unwrap();
    let ptrs: Vec<_> = (1..20).map(|i| ctx.memalloc(i * 1000).unwrap()).collect();
    let managed = ctx.memallocmanaged(4096, false).unwrap();
    drop((ptrs, managed));
    ctx.reset().unwrap();
    let by = g.device_allocations_by_caller();
    assert!(
        by.keys()
            .all(|k| ["CudaResource", "HostOnlyManager"].contains(k)),
        "{by:?}"
    );
    assert_eq!(by.values().sum::<u64>(), 20);
    drop(ctx);
    assert!(g.report().is_clean(), "{}", g.report());
}
