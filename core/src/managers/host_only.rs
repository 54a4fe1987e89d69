//! [`HostOnlyManager`]: the host side of the contract composed with any device memory
//! resource, so that any resource chain (pools, arenas, adaptors) becomes an EMM plugin.
//!
//! Numba's "Providing device memory management only" (`HostOnlyCUDAMemoryManager`), in
//! Rust form: rather than a subclass that must remember to call `super()`, the device side is
//! a [`DeviceMemoryResource`] given to the manager, plus optional hooks for its own reset and
//! deferral. Numba's rules then hold by construction: "If `reset` is overridden, it must
//! also call `super().reset()`" — the host reset always runs, after the hook, even when the
//! hook fails; "If `defer_cleanup` is overridden, it must hold an active context manager from
//! `super().defer_cleanup()`" — the host guard is taken first and released last.
//!
//! - **What it does**: `memalloc` asks the resource (on the default stream); a pointer's
//!   finalizer returns it to the resource at once (the resource's own policy decides what a
//!   free costs). `memhostalloc`, `mempin` and `memallocmanaged` are the host side, with
//!   their own [`PendingDeallocs`]. `get_ipc_handle` is the default behaviour
//!   (`cuMemGetAddressRange` base plus offset), right for any suballocating resource.
//! - **What `defer_cleanup` defers**: the host side's pending frees and unpins, plus whatever
//!   the device-side hook defers. Device frees go to the resource at once.
//! - **Thread safety**: `Send + Sync` when the resource is.
//! - **Streams**: the stream-ordered extension passes streams to the resource, which keeps
//!   RMM's stream rules.
//! - **Clone and ownership**: owns the resource; one manager per context.
//! - **Use and cost**: wraps any resource; adds one `Arc` allocation per pointer.

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::attribution::CallerScope;
use crate::contract::{
    Capabilities, Dealloc, DeallocSink, DeferCleanupGuard, EmmError, EmmResult, IpcHandle,
    MemoryInfo, MemoryManager, MemoryPointer, PendingDeallocs, PendingDeallocsConfig,
    INTERFACE_VERSION,
};
use crate::driver::{ContextId, Driver, StreamId};
use crate::managers::manager_base::ManagerBase;
use crate::mr::{DeviceMemoryResource, MrError};

type ResetHook = Box<dyn Fn() -> EmmResult<()> + Send + Sync>;
type DeferHook = Box<dyn Fn() -> DeferCleanupGuard + Send + Sync>;

/// Returns device memory to the resource as soon as a finalizer hands it over.
struct ResourceSink<R> {
    resource: R,
    failures: Mutex<Vec<MrError>>,
}

impl<R: DeviceMemoryResource> DeallocSink for ResourceSink<R> {
    fn add(&self, item: Dealloc) {
        let result = match item {
            Dealloc::Device { ptr, bytes } => {
                self.resource
                    .deallocate(ptr, bytes as usize, StreamId::DEFAULT)
            }
            Dealloc::DeviceAsync { ptr, bytes, stream } => {
                self.resource.deallocate(ptr, bytes as usize, stream)
            }
            other => Err(MrError::InvalidArgument {
                resource: self.resource.name(),
                reason: format!("{other:?} is not device memory of this resource"),
            }),
        };
        if let Err(e) = result {
            let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            if f.len() < 16 {
                f.push(e);
            }
        }
    }
}

/// The host side of the contract over a device memory resource `R`.
pub struct HostOnlyManager<R: DeviceMemoryResource, D: Driver + ?Sized = dyn Driver> {
    base: ManagerBase<D>,
    device: Arc<ResourceSink<R>>,
    device_sink: Arc<dyn DeallocSink>,
    on_reset: Option<ResetHook>,
    on_defer_cleanup: Option<DeferHook>,
    /// Why the device memory cannot be exported over IPC, when it cannot.
    no_ipc: Option<&'static str>,
    /// The resource's allocations are stream-ordered: `memalloc` waits for its allocation.
    sync_memalloc: bool,
}

impl<R: DeviceMemoryResource + 'static, D: Driver + ?Sized> HostOnlyManager<R, D> {
    /// The caller tag of its own driver calls (the resource tags its own).
    pub const TAG: &'static str = "HostOnlyManager";

    /// A manager for `context` whose device memory comes from `resource`. Makes no driver
    /// call.
    pub fn new(driver: Arc<D>, context: ContextId, resource: R) -> Self {
        Self::with_config(driver, context, resource, PendingDeallocsConfig::default())
    }

    /// As [`HostOnlyManager::new`], with the host side's queue flushing as `config` says.
    pub fn with_config(
        driver: Arc<D>,
        context: ContextId,
        resource: R,
        config: PendingDeallocsConfig,
    ) -> Self {
        let device = Arc::new(ResourceSink {
            resource,
            failures: Mutex::new(Vec::new()),
        });
        let device_sink: Arc<dyn DeallocSink> = device.clone();
        HostOnlyManager {
            base: ManagerBase::new(driver, context, Self::TAG, config),
            device,
            device_sink,
            on_reset: None,
            on_defer_cleanup: None,
            no_ipc: None,
            sync_memalloc: false,
        }
    }

    /// Runs `hook` in `reset` for the device side, before the host side's reset (which runs
    /// even when the hook fails).
    pub fn with_reset_hook(
        mut self,
        hook: impl Fn() -> EmmResult<()> + Send + Sync + 'static,
    ) -> Self {
        self.on_reset = Some(Box::new(hook));
        self
    }

    /// Holds the guard `hook` returns inside the host side's guard in `defer_cleanup`.
    pub fn with_defer_cleanup_hook(
        mut self,
        hook: impl Fn() -> DeferCleanupGuard + Send + Sync + 'static,
    ) -> Self {
        self.on_defer_cleanup = Some(Box::new(hook));
        self
    }

    /// Declares that the resource's memory cannot be exported with `cuIpcGetMemHandle`
    /// (`why` says what to use instead): `get_ipc_handle` then says
    /// [`EmmError::Unsupported`] and `capabilities().ipc` is false.
    pub fn without_ipc(mut self, why: &'static str) -> Self {
        self.no_ipc = Some(why);
        self
    }

    /// Declares that the resource's allocations are stream-ordered (`cuMemAllocAsync`): the
    /// memory is ready only in the order of the stream it was allocated on. `memalloc`, whose
    /// memory every stream may use at once, then synchronizes the legacy default stream it
    /// allocated on before handing the memory out (one `cuStreamSynchronize` per call;
    /// `memalloc_async` is unaffected).
    pub fn with_synchronous_memalloc(mut self) -> Self {
        self.sync_memalloc = true;
        self
    }

    /// The device memory resource.
    pub fn resource(&self) -> &R {
        &self.device.resource
    }

    /// The host side's queue of pending deallocations.
    pub fn deallocations(&self) -> &Arc<PendingDeallocs<D>> {
        &self.base.pending
    }

    /// Reports device frees the resource refused since the last report.
    ///
    /// # Errors
    ///
    /// The first refusal, as [`EmmError::Resource`].
    pub fn take_device_failures(&self) -> EmmResult<()> {
        let first = {
            let mut f = self
                .device
                .failures
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let first = f.drain(..).next();
            first
        };
        first.map_or(Ok(()), |e| Err(e.into()))
    }

    fn resource_error(&self, requested: usize, e: MrError) -> EmmError {
        match e {
            MrError::OutOfMemory {
                resource,
                available,
                ..
            } => EmmError::OutOfMemory {
                manager: format!("{} over {resource}", Self::TAG),
                requested: requested as u64,
                available,
            },
            other => EmmError::Resource(other),
        }
    }

    fn allocate(
        &self,
        op: &'static str,
        size: usize,
        stream: StreamId,
        stream_ordered: bool,
    ) -> EmmResult<MemoryPointer> {
        let h = &self.base;
        h.check_request(op, size)?;
        let _scope = CallerScope::enter(Self::TAG);
        let ptr = self
            .device
            .resource
            .allocate(size, stream)
            .map_err(|e| self.resource_error(size, e))?;
        let bytes = size as u64;
        let item = if stream_ordered {
            Dealloc::DeviceAsync { ptr, bytes, stream }
        } else {
            Dealloc::Device { ptr, bytes }
        };
        let finalizer = crate::contract::Finalizer::enqueue(Arc::clone(&self.device_sink), item);
        Ok(MemoryPointer::new(h.context, ptr, size, Some(finalizer)))
    }
}

impl<R: DeviceMemoryResource + 'static, D: Driver + ?Sized> MemoryManager
    for HostOnlyManager<R, D>
{
    fn name(&self) -> &str {
        Self::TAG
    }

    crate::forward_manager_calls!(base: initialize, memhostalloc, mempin, memallocmanaged);

    fn memalloc(&self, size: usize) -> EmmResult<MemoryPointer> {
        let p = self.allocate("memalloc", size, StreamId::DEFAULT, false)?;
        if self.sync_memalloc {
            // Found by the concurrency stress (conformance/tests/conformance/stress.rs): without this, a
            // non-blocking stream using the memory raced with its cuMemAllocAsync on the
            // legacy default stream, which orders nothing with non-blocking streams. On
            // failure `p` is dropped, which frees it.
            let _scope = CallerScope::enter(Self::TAG);
            self.base.driver.stream_synchronize(StreamId::DEFAULT)?;
        }
        Ok(p)
    }

    fn held_bytes(&self) -> Option<u64> {
        self.device.resource.held()
    }

    fn get_memory_info(&self) -> EmmResult<MemoryInfo> {
        let r = &self.device.resource;
        if let Some(info) = r.memory_info() {
            return Ok(info.into());
        }
        // `None` is also what a driver-backed resource says when cuMemGetInfo fails: ask the
        // driver, so that its failure is reported as what it is and not as "unsupported"
        // (found by the fault sweep; regression test in core/tests/core/reliability.rs).
        r.driver().mem_get_info()?;
        r.memory_info().map(MemoryInfo::from).ok_or_else(|| {
            EmmError::unsupported(
                Self::TAG,
                "get_memory_info",
                format!(
                    "the device resource {} cannot tell free and total memory; ask the driver \
                     or the resource's statistics instead",
                    r.name()
                ),
            )
        })
    }

    fn get_ipc_handle(&self, memory: &MemoryPointer) -> EmmResult<IpcHandle> {
        if let Some(why) = self.no_ipc {
            return Err(EmmError::unsupported(Self::TAG, "get_ipc_handle", why));
        }
        self.base.get_ipc_handle(memory)
    }

    /// The device hook (if any), then the host side's reset, which always runs.
    fn reset(&self) -> EmmResult<()> {
        let device = self.on_reset.as_ref().map_or(Ok(()), |hook| hook());
        let host = self.base.reset();
        device.and(host)
    }

    /// The host side's guard, holding the device hook's guard (if any) inside it.
    fn defer_cleanup(&self) -> DeferCleanupGuard {
        let host = self.base.defer_cleanup();
        match &self.on_defer_cleanup {
            Some(hook) => host.and(hook()),
            None => host,
        }
    }

    fn interface_version(&self) -> u32 {
        INTERFACE_VERSION
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::V1
            .with_stream_ordered(true)
            .with_managed_memory(true)
            .with_memory_info(self.device.resource.memory_info().is_some())
            .with_ipc(self.no_ipc.is_none())
    }

    fn memalloc_async(&self, size: usize, stream: StreamId) -> EmmResult<MemoryPointer> {
        self.allocate("memalloc_async", size, stream, true)
    }

    fn memfree_async(&self, memory: MemoryPointer, stream: StreamId) -> EmmResult<()> {
        let Some(item) = memory.release_async(&self.device_sink, self.base.tag)? else {
            return Ok(());
        };
        let Dealloc::DeviceAsync { ptr, bytes, .. } = item else {
            return Ok(());
        };
        let _scope = CallerScope::enter(Self::TAG);
        self.device
            .resource
            .deallocate(ptr, bytes as usize, stream)
            .map_err(|e| {
                // Nothing is lost: return it on its own stream instead.
                self.device_sink.add(item);
                e.into()
            })
    }
}

impl<R: DeviceMemoryResource, D: Driver + ?Sized> fmt::Debug for HostOnlyManager<R, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostOnlyManager")
            .field("resource", &self.device.resource.name())
            .field("context", &self.base.context)
            .finish_non_exhaustive()
    }
}
