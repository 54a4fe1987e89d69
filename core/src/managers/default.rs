//! [`DefaultManager`]: Numba's own memory management (`NumbaCUDAMemoryManager`) as an EMM
//! plugin — direct driver allocation with deferred, batched deallocation.
//!
//! - **What it does**: `memalloc` is one `cuMemAlloc`; a pointer's finalizer queues its
//!   `cuMemFree` in a [`PendingDeallocs`], flushed when more than 10 frees or more than 20 % of
//!   device memory are pending (configurable, see [`PendingDeallocsConfig`]). Host memory,
//!   pinning and managed memory work the same way and share the queue. On out of memory it
//!   flushes the queue and retries exactly once; `reset` flushes it.
//! - **What `defer_cleanup` defers**: every queued deallocation (device, host and managed
//!   frees, unpins) until the last guard goes. Stream-ordered frees (`memalloc_async` memory)
//!   are never deferred: they do not synchronize. While a guard lives, the out-of-memory retry
//!   happens without a flush, as in Numba. Re-pinning a range whose unpin is queued runs that
//!   unpin even under a guard.
//! - **Thread safety**: `Send + Sync`; the queue has one lock, not held across driver calls.
//! - **Streams**: `memalloc` memory is usable on every stream and its free synchronizes the
//!   device; the stream-ordered extension uses the device's default pool (`cuMemAllocAsync`).
//! - **Clone and ownership**: one per context, owned by the context; pointers hold the queue,
//!   so memory freed after the manager is gone is released at once.
//! - **Use and cost**: the default. Each allocation is a driver round trip (≈ 7 µs on an
//!   H100); batching frees keeps the device synchronizations of `cuMemFree` out of the way.

use std::sync::Arc;

use crate::attribution::CallerScope;
use crate::contract::{
    Capabilities, Dealloc, EmmResult, ManagerFactory, ManagerTarget, MemoryInfo, MemoryManager,
    MemoryPointer, PendingDeallocs, PendingDeallocsConfig, INTERFACE_VERSION,
};
use crate::driver::{ContextId, Driver, StreamId};
use crate::managers::manager_base::ManagerBase;

/// The name `DefaultManager` goes by in the registry and in `EMM_MEMORY_MANAGER`.
pub const DEFAULT_MANAGER_NAME: &str = "default";

/// Numba's default memory manager: direct driver allocation, deferred deallocation.
pub struct DefaultManager<D: Driver + ?Sized = dyn Driver> {
    base: ManagerBase<D>,
}

impl<D: Driver + ?Sized> DefaultManager<D> {
    /// The caller tag of its driver calls.
    pub const TAG: &'static str = "DefaultManager";

    /// A manager for `context`, with the default thresholds. Makes no driver call (creating a
    /// manager never touches the GPU, so import order does not matter).
    pub fn new(driver: Arc<D>, context: ContextId) -> Self {
        Self::with_config(driver, context, PendingDeallocsConfig::default())
    }

    /// A manager for `context` whose queue flushes as `config` says.
    pub fn with_config(driver: Arc<D>, context: ContextId, config: PendingDeallocsConfig) -> Self {
        DefaultManager {
            base: ManagerBase::new(driver, context, Self::TAG, config),
        }
    }

    /// The queue of pending deallocations.
    pub fn deallocations(&self) -> &Arc<PendingDeallocs<D>> {
        &self.base.pending
    }
}

impl DefaultManager<dyn Driver> {
    /// The factory the registry knows as [`DEFAULT_MANAGER_NAME`]: thresholds from the
    /// environment (`EMM_MAX_PENDING_DEALLOCS_COUNT`, `EMM_MAX_PENDING_DEALLOCS_RATIO`).
    pub fn factory() -> Arc<dyn ManagerFactory> {
        Arc::new(DefaultFactory)
    }
}

struct DefaultFactory;

impl ManagerFactory for DefaultFactory {
    fn name(&self) -> &str {
        DEFAULT_MANAGER_NAME
    }
    fn interface_version(&self) -> u32 {
        INTERFACE_VERSION
    }
    fn create(&self, target: &ManagerTarget) -> EmmResult<Box<dyn MemoryManager>> {
        let config = PendingDeallocsConfig::from_env()?;
        Ok(Box::new(DefaultManager::with_config(
            Arc::clone(&target.driver),
            target.context,
            config,
        )))
    }
}

impl<D: Driver + ?Sized> MemoryManager for DefaultManager<D> {
    fn name(&self) -> &str {
        Self::TAG
    }

    crate::forward_manager_calls!(
        base: initialize,
        memhostalloc,
        mempin,
        memallocmanaged,
        get_ipc_handle,
        defer_cleanup,
    );

    /// # Time complexity
    ///
    /// One driver call; on out of memory, a flush and one more.
    fn memalloc(&self, size: usize) -> EmmResult<MemoryPointer> {
        let h = &self.base;
        let (ptr, finalizer) = h.driver_allocate(
            "memalloc",
            size,
            || h.driver.mem_alloc(size),
            |ptr, bytes| Dealloc::Device { ptr, bytes },
        )?;
        Ok(MemoryPointer::new(h.context, ptr, size, finalizer))
    }

    fn get_memory_info(&self) -> EmmResult<MemoryInfo> {
        let _scope = CallerScope::enter(Self::TAG);
        Ok(self.base.driver.mem_get_info()?.into())
    }

    /// Runs every pending deallocation, even under a `defer_cleanup` guard (a reset is an
    /// explicit request to clean up). Memory still held by pointers stays valid.
    fn reset(&self) -> EmmResult<()> {
        self.base.reset()
    }

    fn interface_version(&self) -> u32 {
        INTERFACE_VERSION
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::V1
            .with_stream_ordered(true)
            .with_managed_memory(true)
    }

    fn memalloc_async(&self, size: usize, stream: StreamId) -> EmmResult<MemoryPointer> {
        let h = &self.base;
        let (ptr, finalizer) = h.driver_allocate(
            "memalloc_async",
            size,
            || h.driver.mem_alloc_async(size, stream),
            |ptr, bytes| Dealloc::DeviceAsync { ptr, bytes, stream },
        )?;
        Ok(MemoryPointer::new(h.context, ptr, size, finalizer))
    }

    fn memfree_async(&self, memory: MemoryPointer, stream: StreamId) -> EmmResult<()> {
        let h = &self.base;
        let Some(item) = memory.release_async(&h.sink, h.tag)? else {
            return Ok(());
        };
        let Dealloc::DeviceAsync { ptr, .. } = item else {
            return Ok(());
        };
        let _scope = CallerScope::enter(Self::TAG);
        h.driver.mem_free_async(ptr, stream).map_err(|e| {
            // Nothing is lost: free it on its own stream instead.
            h.sink.add(item);
            e.into()
        })
    }
}
