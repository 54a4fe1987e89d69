//! [`ManagerBase`]: what every built-in manager shares, whatever gives it device memory: the
//! driver and context, initialization, `memhostalloc`, `mempin`, `memallocmanaged`, IPC
//! handles, the pending deallocations, and Numba's out-of-memory flush-and-retry. A manager
//! hands the [`MemoryManager`](crate::contract::MemoryManager) calls that only forward to it
//! over with [`forward_manager_calls!`](crate::forward_manager_calls).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::attribution::CallerScope;
use crate::contract::{
    get_ipc_handle_via_driver, Dealloc, DeallocSink, DeferCleanupGuard, EmmError, EmmResult,
    Finalizer, HostMemory, IpcHandle, ManagedMemory, MappedMemory, MemoryPointer, PendingDeallocs,
    PendingDeallocsConfig, PinOwner, PinnedMemory, SourceInfo,
};
use crate::driver::{ContextId, Driver, HostAllocFlags, HostPtr};
use crate::error::{DriverError, DriverResult};

/// The part of a manager that does not depend on where its device memory comes from (Numba's
/// `HostOnlyCUDAMemoryManager` without `memalloc`).
///
/// Invariants: `pending` runs its deallocations in `context`; `sink` is `pending` seen as a
/// [`DeallocSink`]; the byte threshold of `pending` is set once, by the first `initialize`.
pub(crate) struct ManagerBase<D: Driver + ?Sized> {
    pub(crate) driver: Arc<D>,
    pub(crate) context: ContextId,
    pub(crate) tag: &'static str,
    pub(crate) pending: Arc<PendingDeallocs<D>>,
    pub(crate) sink: Arc<dyn DeallocSink>,
    initialized: AtomicBool,
    source_info: OnceLock<SourceInfo>,
}

impl<D: Driver + ?Sized> ManagerBase<D> {
    pub(crate) fn new(
        driver: Arc<D>,
        context: ContextId,
        tag: &'static str,
        config: PendingDeallocsConfig,
    ) -> Self {
        let pending = Arc::new(PendingDeallocs::new(Arc::clone(&driver), tag, config));
        pending.set_context(context);
        let sink: Arc<dyn DeallocSink> = pending.clone();
        ManagerBase {
            driver,
            context,
            tag,
            pending,
            sink,
            initialized: AtomicBool::new(false),
            source_info: OnceLock::new(),
        }
    }

    /// Sets the byte threshold from the device's memory; later calls change nothing.
    pub(crate) fn initialize(&self) -> EmmResult<()> {
        if self.initialized.load(Ordering::Acquire) {
            return Ok(());
        }
        let _scope = CallerScope::enter(self.tag);
        let total = self.driver.mem_get_info()?.total;
        self.pending.set_capacity(total);
        self.initialized.store(true, Ordering::Release);
        Ok(())
    }

    pub(crate) fn require_initialized(&self, operation: &'static str) -> EmmResult<()> {
        if self.initialized.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(EmmError::NotInitialized {
                manager: self.tag.to_string(),
                operation,
            })
        }
    }

    /// Refuses size 0 and checks the manager is initialized.
    pub(crate) fn check_request(&self, operation: &'static str, size: usize) -> EmmResult<()> {
        if size == 0 {
            return Err(EmmError::invalid(
                operation,
                "size is 0 bytes; ask for at least 1 byte",
            ));
        }
        self.require_initialized(operation)
    }

    /// Numba's `_attempt_allocation`: on out of memory, flush pending deallocations (unless a
    /// `defer_cleanup` guard holds them) and try exactly once more.
    pub(crate) fn attempt<T>(&self, allocate: impl Fn() -> DriverResult<T>) -> DriverResult<T> {
        match allocate() {
            Err(e) if e.is_out_of_memory() => {
                self.pending.release_pending();
                allocate()
            }
            other => other,
        }
    }

    /// The error for a failed allocation: out of memory with what is free, or the driver's.
    pub(crate) fn alloc_error(&self, requested: usize, e: DriverError) -> EmmError {
        if !e.is_out_of_memory() {
            return EmmError::Driver(e);
        }
        let available = self.driver.mem_get_info().ok().map(|i| i.free);
        // With the bytes free, the driver's out of memory is about something else (address
        // space, a limit, an injected fault): keep its reason rather than say "out of memory:
        // requested 300 KiB, 8.0 GiB free" (found by the soak; core/tests/core/reliability.rs).
        if available.is_some_and(|free| free >= requested as u64) {
            return EmmError::Driver(e);
        }
        EmmError::OutOfMemory {
            manager: self.tag.to_string(),
            requested: requested as u64,
            available,
        }
    }

    /// A driver allocation of `size` bytes for `operation`: the request checked, the caller
    /// tagged, [`Self::attempt`]'s retry on out of memory, and the finalizer that frees it
    /// with `dealloc`'s item.
    pub(crate) fn driver_allocate<P: Copy>(
        &self,
        operation: &'static str,
        size: usize,
        allocate: impl Fn() -> DriverResult<P>,
        dealloc: impl FnOnce(P, u64) -> Dealloc,
    ) -> EmmResult<(P, Option<Finalizer>)> {
        self.check_request(operation, size)?;
        let _scope = CallerScope::enter(self.tag);
        let ptr = self
            .attempt(allocate)
            .map_err(|e| self.alloc_error(size, e))?;
        Ok((ptr, self.finalizer(dealloc(ptr, size as u64))))
    }

    pub(crate) fn finalizer(&self, item: Dealloc) -> Option<Finalizer> {
        Some(Finalizer::enqueue(Arc::clone(&self.sink), item))
    }

    pub(crate) fn memhostalloc(
        &self,
        size: usize,
        mapped: bool,
        portable: bool,
        wc: bool,
    ) -> EmmResult<HostMemory> {
        let flags = HostAllocFlags {
            mapped,
            portable,
            write_combined: wc,
        };
        let (host, finalizer) = self.driver_allocate(
            "memhostalloc",
            size,
            || self.driver.host_alloc(size, flags),
            |ptr, bytes| Dealloc::Host { ptr, bytes },
        )?;
        self.host_memory(host, size, None, mapped, finalizer, || {
            self.driver.host_free(host)
        })
    }

    pub(crate) fn mempin(
        &self,
        owner: Option<PinOwner>,
        ptr: HostPtr,
        size: usize,
        mapped: bool,
    ) -> EmmResult<HostMemory> {
        self.check_request("mempin", size)?;
        let _scope = CallerScope::enter(self.tag);
        // An earlier pin of this range may still wait for its unpin: run it first.
        self.pending.flush_unpins_overlapping(ptr, size as u64)?;
        self.attempt(|| self.driver.host_register(ptr, size, mapped))
            .map_err(|e| self.alloc_error(size, e))?;
        let finalizer = self.finalizer(Dealloc::Unpin {
            ptr,
            len: size as u64,
        });
        self.host_memory(ptr, size, owner, mapped, finalizer, || {
            self.driver.host_unregister(ptr)
        })
    }

    /// Pinned host memory at `host` as the contract hands it out: pinned only, or `mapped` to a
    /// device pointer too. Where the driver gives no device pointer, `undo` gives back the pinned
    /// memory and the driver's error is returned.
    fn host_memory(
        &self,
        host: HostPtr,
        size: usize,
        owner: Option<PinOwner>,
        mapped: bool,
        finalizer: Option<Finalizer>,
        undo: impl FnOnce() -> DriverResult<()>,
    ) -> EmmResult<HostMemory> {
        if !mapped {
            return Ok(HostMemory::Pinned(PinnedMemory::new(
                self.context,
                host,
                size,
                owner,
                finalizer,
            )));
        }
        let device = self.driver.host_device_pointer(host).map_err(|e| {
            // The undo's own failure would hide the cause; the cause is what the caller needs.
            let _ = undo();
            EmmError::Driver(e)
        })?;
        Ok(HostMemory::Mapped(MappedMemory::new(
            self.context,
            host,
            device,
            size,
            owner,
            finalizer,
        )))
    }

    pub(crate) fn memallocmanaged(
        &self,
        size: usize,
        attach_global: bool,
    ) -> EmmResult<ManagedMemory> {
        let (ptr, finalizer) = self.driver_allocate(
            "memallocmanaged",
            size,
            || self.driver.mem_alloc_managed(size, attach_global),
            |ptr, bytes| Dealloc::Managed { ptr, bytes },
        )?;
        Ok(ManagedMemory::new(self.context, ptr, size, finalizer))
    }

    pub(crate) fn get_ipc_handle(&self, memory: &MemoryPointer) -> EmmResult<IpcHandle> {
        if memory.context() != self.context {
            return Err(EmmError::invalid(
                "get_ipc_handle",
                format!(
                    "the pointer belongs to {}, not to this manager's {}; ask that context's \
                     manager",
                    memory.context(),
                    self.context
                ),
            ));
        }
        let _scope = CallerScope::enter(self.tag);
        let source = match self.source_info.get() {
            Some(s) => s.clone(),
            None => {
                let device = self.driver.context_device(self.context)?;
                let s = SourceInfo::of(&*self.driver, device)?;
                self.source_info.get_or_init(|| s).clone()
            }
        };
        get_ipc_handle_via_driver(&*self.driver, memory, source)
    }

    /// Flushes every pending deallocation, even under a guard.
    pub(crate) fn reset(&self) -> EmmResult<()> {
        self.pending.flush_all()
    }

    pub(crate) fn defer_cleanup(&self) -> DeferCleanupGuard {
        self.pending.disable()
    }
}

impl<D: Driver + ?Sized> Drop for ManagerBase<D> {
    fn drop(&mut self) {
        // Memory still held by users is freed by its finalizers, at once from now on.
        let _ = self.pending.close();
    }
}
