//! [`UnifiedManager`]: a context's memory manager with unified memory on — the RFC's "forgo
//! all traditional allocators", behind the EMM contract.
//!
//! - **What it does**: wraps the manager the context would have had. `memalloc` and
//!   `memalloc_async` are device allocations, `memhostalloc` a host allocation, and
//!   `memallocmanaged` plain managed memory, all from one [`CachingManagedAllocator`] with
//!   the RFC's hints for each kind; a pointer's finalizer hands the block back to the cache
//!   at once. `mempin` (user memory cannot become managed) and `get_memory_info` go to the
//!   wrapped manager. `get_ipc_handle` says unsupported: `cuIpcGetMemHandle` refuses managed
//!   memory.
//! - **What `defer_cleanup` defers**: what the wrapped manager defers (its unpins). Frees to
//!   the cache never reach the driver, so there is nothing of its own to defer.
//! - **Thread safety**: `Send + Sync`.
//! - **Streams**: `memalloc` memory is freed to the cache on the default stream;
//!   `memalloc_async` memory on its stream, with the pool's stream rules.
//! - **Clone and ownership**: one per context; pointers hold the allocator, so memory freed
//!   after the manager is gone still returns to it.
//! - **Use and cost**: made by the enablement switch when a context is created; an
//!   allocation is a cache hit (no driver call) once the cache is warm. `reset` gives the
//!   cache's wholly free segments back to the driver, then resets the wrapped manager.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::contract::{
    Capabilities, Dealloc, DeallocSink, EmmError, EmmResult, Finalizer, HostMemory, IpcHandle,
    ManagedMemory, MappedMemory, MemoryManager, MemoryPointer, PinnedMemory, INTERFACE_VERSION,
};
use crate::driver::{ContextId, DevicePtr, StreamId};
use crate::unified::caching::CachingManagedAllocator;
use crate::unified::error::UnifiedError;
use crate::unified::hints::Placement;

/// Returns blocks to the cache as soon as a finalizer hands them over.
struct CacheSink {
    alloc: Arc<CachingManagedAllocator>,
}

impl DeallocSink for CacheSink {
    fn add(&self, item: Dealloc) {
        let (ptr, bytes, stream) = match item {
            Dealloc::Device { ptr, bytes } | Dealloc::Managed { ptr, bytes } => {
                (ptr, bytes, StreamId::DEFAULT)
            }
            Dealloc::DeviceAsync { ptr, bytes, stream } => (ptr, bytes, stream),
            Dealloc::Host { ptr, bytes } => (DevicePtr(ptr.0), bytes, StreamId::DEFAULT),
            other => {
                self.alloc.record_failure(UnifiedError::invalid(
                    "UnifiedManager finalizer",
                    format!("{other:?} is not memory of the caching managed allocator"),
                ));
                return;
            }
        };
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        if let Err(e) = self.alloc.free(ptr, bytes, stream) {
            self.alloc.record_failure(e);
        }
    }
}

/// A manager whose device, host and managed allocations come from a caching managed
/// allocator; see the [module docs](self).
pub struct UnifiedManager {
    inner: Box<dyn MemoryManager>,
    alloc: Arc<CachingManagedAllocator>,
    sink: Arc<dyn DeallocSink>,
    context: ContextId,
    name: String,
    initialized: AtomicBool,
}

impl UnifiedManager {
    /// How its name starts: `UnifiedManager over DefaultManager`.
    pub const NAME_PREFIX: &'static str = "UnifiedManager over ";

    /// `inner`'s context served by `alloc` (which must serve that context's device).
    pub fn new(
        inner: Box<dyn MemoryManager>,
        alloc: Arc<CachingManagedAllocator>,
        context: ContextId,
    ) -> Self {
        let sink: Arc<dyn DeallocSink> = Arc::new(CacheSink {
            alloc: Arc::clone(&alloc),
        });
        let name = format!("{}{}", Self::NAME_PREFIX, inner.name());
        UnifiedManager {
            inner,
            alloc,
            sink,
            context,
            name,
            initialized: AtomicBool::new(false),
        }
    }

    /// The caching managed allocator.
    pub fn allocator(&self) -> &Arc<CachingManagedAllocator> {
        &self.alloc
    }

    /// The manager it wraps.
    pub fn inner(&self) -> &dyn MemoryManager {
        &*self.inner
    }

    fn allocate(
        &self,
        operation: &'static str,
        size: usize,
        placement: Placement,
        attach_global: bool,
        stream: StreamId,
    ) -> EmmResult<DevicePtr> {
        if size == 0 {
            return Err(EmmError::invalid(
                operation,
                "size is 0 bytes; ask for at least 1 byte",
            ));
        }
        if !self.initialized.load(Ordering::Acquire) {
            return Err(EmmError::NotInitialized {
                manager: self.name.clone(),
                operation,
            });
        }
        Ok(self
            .alloc
            .allocate_managed(size, placement, attach_global, stream)?)
    }

    fn finalizer(&self, item: Dealloc) -> Option<Finalizer> {
        Some(Finalizer::enqueue(Arc::clone(&self.sink), item))
    }

    fn device(&self) -> Placement {
        Placement::Device(self.alloc.device())
    }
}

impl MemoryManager for UnifiedManager {
    fn name(&self) -> &str {
        &self.name
    }

    fn initialize(&self) -> EmmResult<()> {
        self.inner.initialize()?;
        self.initialized.store(true, Ordering::Release);
        Ok(())
    }

    /// # Time complexity
    ///
    /// A cache hit: O(1), no driver call.
    fn memalloc(&self, size: usize) -> EmmResult<MemoryPointer> {
        let ptr = self.allocate("memalloc", size, self.device(), true, StreamId::DEFAULT)?;
        let bytes = size as u64;
        let finalizer = self.finalizer(Dealloc::Device { ptr, bytes });
        Ok(MemoryPointer::new(self.context, ptr, size, finalizer))
    }

    /// Managed memory with the RFC's host hints; `mapped` gives a [`MappedMemory`] whose
    /// device address is the host address. `portable` and `wc` have no managed counterpart
    /// and are ignored (managed memory is reachable from every context).
    fn memhostalloc(
        &self,
        size: usize,
        mapped: bool,
        _portable: bool,
        _wc: bool,
    ) -> EmmResult<HostMemory> {
        let placement = Placement::Host {
            accessed_by: self.alloc.device(),
        };
        let ptr = self.allocate("memhostalloc", size, placement, true, StreamId::DEFAULT)?;
        let host = ptr.as_host();
        let bytes = size as u64;
        let finalizer = self.finalizer(Dealloc::Host { ptr: host, bytes });
        Ok(if mapped {
            HostMemory::Mapped(MappedMemory::new(
                self.context,
                host,
                ptr,
                size,
                None,
                finalizer,
            ))
        } else {
            HostMemory::Pinned(PinnedMemory::new(self.context, host, size, None, finalizer))
        })
    }

    // User memory cannot become managed: pinning, the memory info and the deferral of cleanup
    // are the wrapped manager's.
    crate::forward_manager_calls!(inner: mempin, get_memory_info, defer_cleanup);

    /// Plain managed memory (no advice), from the cache.
    fn memallocmanaged(&self, size: usize, attach_global: bool) -> EmmResult<ManagedMemory> {
        let ptr = self.allocate(
            "memallocmanaged",
            size,
            Placement::Unadvised,
            attach_global,
            StreamId::DEFAULT,
        )?;
        let bytes = size as u64;
        let finalizer = self.finalizer(Dealloc::Managed { ptr, bytes });
        Ok(ManagedMemory::new(self.context, ptr, size, finalizer))
    }

    fn get_ipc_handle(&self, _memory: &MemoryPointer) -> EmmResult<IpcHandle> {
        Err(EmmError::unsupported(
            self.name.clone(),
            "get_ipc_handle",
            "with unified memory on, device memory is managed memory, which cuIpcGetMemHandle \
             cannot export; turn unified memory off for contexts that share memory between \
             processes",
        ))
    }

    /// Gives the cache's wholly free segments back, then resets the wrapped manager (which
    /// runs even when the first fails); reports frees that failed in finalizers.
    fn reset(&self) -> EmmResult<()> {
        let released = self.alloc.release().map(|_| ());
        let inner = self.inner.reset();
        let failures = self.alloc.take_failures();
        released
            .map_err(EmmError::from)
            .and(inner)
            .and(failures.map_err(EmmError::from))
    }

    fn interface_version(&self) -> u32 {
        INTERFACE_VERSION
    }

    fn capabilities(&self) -> Capabilities {
        self.inner
            .capabilities()
            .with_stream_ordered(true)
            .with_managed_memory(true)
            .with_ipc(false)
    }

    fn memalloc_async(&self, size: usize, stream: StreamId) -> EmmResult<MemoryPointer> {
        let ptr = self.allocate("memalloc_async", size, self.device(), true, stream)?;
        let bytes = size as u64;
        let finalizer = self.finalizer(Dealloc::DeviceAsync { ptr, bytes, stream });
        Ok(MemoryPointer::new(self.context, ptr, size, finalizer))
    }

    fn memfree_async(&self, memory: MemoryPointer, stream: StreamId) -> EmmResult<()> {
        let Some(item) = memory.release_async(&self.sink, &self.name)? else {
            return Ok(());
        };
        let Dealloc::DeviceAsync { ptr, bytes, .. } = item else {
            return Ok(());
        };
        let n = usize::try_from(bytes).unwrap_or(usize::MAX);
        self.alloc.free(ptr, n, stream).map_err(|e| {
            // Nothing is lost: it goes back on its own stream instead.
            self.sink.add(item);
            e.into()
        })
    }
}

impl std::fmt::Debug for UnifiedManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnifiedManager")
            .field("inner", &self.inner.name())
            .field("context", &self.context)
            .field("allocator", &self.alloc)
            .finish()
    }
}
