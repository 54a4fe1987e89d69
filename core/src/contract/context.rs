//! [`Context`]: one device context and the one memory manager instance bound to it.
//!
//! Numba's reference: "Numba instantiates one instance of the EMM Plugin class per context" and
//! the allocation methods "are always called when the current CUDA context is the context
//! that owns the EMM Plugin instance". The context forwards to its manager, as Numba's
//! `Context.memalloc` does, and keeps its own pending deallocations for streams, events and
//! modules, which the manager never sees.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::contract::error::{EmmError, EmmResult};
use crate::contract::finalizer::{Dealloc, DeallocSink};
use crate::contract::guard::DeferCleanupGuard;
use crate::contract::host_memory::HostMemory;
use crate::contract::ipc::IpcHandle;
use crate::contract::managed::ManagedMemory;
use crate::contract::manager::{check_interface_version, Capabilities, MemoryInfo, MemoryManager};
use crate::contract::pending::{PendingDeallocs, PendingDeallocsConfig};
use crate::contract::pointer::{MemoryPointer, PinOwner};
use crate::contract::selection::{self, ManagerFactory, ManagerTarget};
use crate::contract::stream::{Event, Stream};
use crate::driver::{ContextId, DeviceId, DeviceProperties, Driver, HostPtr, StreamId};
use crate::error::DriverError;

/// The caller tag of the context's own driver calls (streams, events).
const TAG: &str = "Context";

/// A device's primary context, its memory manager and its own pending deallocations.
///
/// - **Thread safety**: `Send + Sync`; every method makes the context current on the calling
///   thread for its duration and restores the previous one.
/// - **Lifetime**: pointers may outlive the context; their memory is then released at once.
///   Dropping the context flushes its pending deallocations.
pub struct Context<D: Driver> {
    driver: Arc<D>,
    id: ContextId,
    device: DeviceId,
    properties: DeviceProperties,
    manager: Box<dyn MemoryManager>,
    prepared: AtomicBool,
    deallocations: Arc<PendingDeallocs<D>>,
    sink: Arc<dyn DeallocSink>,
}

impl<D: Driver> Context<D> {
    /// The primary context of `device`, with a manager from the process-wide selection
    /// ([`selection::set_memory_manager`], overridden by `EMM_MEMORY_MANAGER`).
    ///
    /// # Errors
    ///
    /// The driver fails; the selection names an unknown manager; the manager's interface
    /// version is not emm's; a pending-deallocation variable does not parse.
    pub fn new(driver: Arc<D>, device: DeviceId) -> EmmResult<Self> {
        let factory = selection::current_factory()?;
        Self::with_factory(driver, device, &*factory)
    }

    /// As [`Context::new`], with the manager made by `factory`.
    ///
    /// # Errors
    ///
    /// As [`Context::new`].
    pub fn with_factory(
        driver: Arc<D>,
        device: DeviceId,
        factory: &dyn ManagerFactory,
    ) -> EmmResult<Self> {
        let id = driver.primary_context(device)?;
        let target = ManagerTarget {
            driver: driver.clone(),
            context: id,
            device,
        };
        let manager = selection::create_manager(factory, &target)?;
        Self::bind(driver, device, id, manager)
    }

    /// The primary context of `device` bound to `manager`.
    ///
    /// # Errors
    ///
    /// The driver fails; [`EmmError::VersionMismatch`] when the manager's interface version
    /// is not emm's.
    pub fn with_manager(
        driver: Arc<D>,
        device: DeviceId,
        manager: Box<dyn MemoryManager>,
    ) -> EmmResult<Self> {
        check_interface_version(manager.name(), manager.interface_version())?;
        let id = driver.primary_context(device)?;
        Self::bind(driver, device, id, manager)
    }

    fn bind(
        driver: Arc<D>,
        device: DeviceId,
        id: ContextId,
        manager: Box<dyn MemoryManager>,
    ) -> EmmResult<Self> {
        let properties = driver.device_properties(device)?;
        let config = PendingDeallocsConfig::from_env()?;
        let deallocations = Arc::new(PendingDeallocs::new(driver.clone(), TAG, config));
        deallocations.set_context(id);
        deallocations.set_capacity(properties.total_memory);
        let sink: Arc<dyn DeallocSink> = deallocations.clone();
        Ok(Context {
            driver,
            id,
            device,
            properties,
            manager,
            prepared: AtomicBool::new(false),
            deallocations,
            sink,
        })
    }

    /// The driver's handle of this context.
    pub fn id(&self) -> ContextId {
        self.id
    }
    /// The device.
    pub fn device(&self) -> DeviceId {
        self.device
    }
    /// The device's properties, read when the context was made.
    pub fn properties(&self) -> &DeviceProperties {
        &self.properties
    }
    /// The driver.
    pub fn driver(&self) -> &Arc<D> {
        &self.driver
    }
    /// The manager bound to this context.
    pub fn manager(&self) -> &dyn MemoryManager {
        &*self.manager
    }
    /// The context's own pending deallocations (streams, events, modules).
    pub fn deallocations(&self) -> &Arc<PendingDeallocs<D>> {
        &self.deallocations
    }
    /// What the manager offers beyond v1.
    pub fn capabilities(&self) -> Capabilities {
        self.manager.capabilities()
    }

    /// Makes this context current until the guard goes.
    fn enter(&self) -> EmmResult<Current<'_, D>> {
        let previous = self.driver.current_context()?;
        if previous != self.id {
            self.driver.set_current_context(self.id)?;
        }
        Ok(Current {
            driver: &self.driver,
            previous,
            changed: previous != self.id,
        })
    }

    /// Enters the context and prepares the manager on first use.
    fn enter_prepared(&self) -> EmmResult<Current<'_, D>> {
        let current = self.enter()?;
        if !self.prepared.load(Ordering::Acquire) {
            self.manager.initialize()?;
            self.prepared.store(true, Ordering::Release);
        }
        Ok(current)
    }

    /// Calls the manager's `initialize` (which must be idempotent) with the context current.
    ///
    /// # Errors
    ///
    /// The manager's.
    pub fn prepare_for_use(&self) -> EmmResult<()> {
        let _current = self.enter()?;
        self.manager.initialize()?;
        self.prepared.store(true, Ordering::Release);
        Ok(())
    }

    /// Device memory from the manager.
    ///
    /// # Errors
    ///
    /// The manager's.
    pub fn memalloc(&self, size: usize) -> EmmResult<MemoryPointer> {
        let _current = self.enter_prepared()?;
        self.manager.memalloc(size)
    }

    /// Pinned host memory from the manager; `mapped` needs a device that can map host memory.
    ///
    /// # Errors
    ///
    /// [`EmmError::InvalidArgument`] for `mapped` on a device that cannot map; the manager's.
    pub fn memhostalloc(
        &self,
        size: usize,
        mapped: bool,
        portable: bool,
        wc: bool,
    ) -> EmmResult<HostMemory> {
        self.check_can_map("memhostalloc", mapped)?;
        let _current = self.enter_prepared()?;
        self.manager.memhostalloc(size, mapped, portable, wc)
    }

    /// Pins host memory through the manager (Numba's `Context.mempin`, with its check).
    ///
    /// # Errors
    ///
    /// [`EmmError::InvalidArgument`] for `mapped` on a device that cannot map; the manager's.
    pub fn mempin(
        &self,
        owner: Option<PinOwner>,
        ptr: HostPtr,
        size: usize,
        mapped: bool,
    ) -> EmmResult<HostMemory> {
        self.check_can_map("mempin", mapped)?;
        let _current = self.enter_prepared()?;
        self.manager.mempin(owner, ptr, size, mapped)
    }

    fn check_can_map(&self, operation: &'static str, mapped: bool) -> EmmResult<()> {
        if mapped && !self.properties.can_map_host_memory {
            return Err(EmmError::invalid(
                operation,
                format!(
                    "{} ({}) cannot map host memory; ask with mapped = false",
                    self.device, self.properties.name
                ),
            ));
        }
        Ok(())
    }

    /// Managed memory from the manager.
    ///
    /// # Errors
    ///
    /// The manager's ([`EmmError::Unsupported`] for a v1-only manager).
    pub fn memallocmanaged(&self, size: usize, attach_global: bool) -> EmmResult<ManagedMemory> {
        let _current = self.enter_prepared()?;
        self.manager.memallocmanaged(size, attach_global)
    }

    /// Stream-ordered device memory (the extension).
    ///
    /// # Errors
    ///
    /// The manager's ([`EmmError::Unsupported`] for a v1-only manager).
    pub fn memalloc_async(&self, size: usize, stream: StreamId) -> EmmResult<MemoryPointer> {
        let _current = self.enter_prepared()?;
        self.manager.memalloc_async(size, stream)
    }

    /// Frees `memory` on `stream` (the extension).
    ///
    /// # Errors
    ///
    /// The manager's.
    pub fn memfree_async(&self, memory: MemoryPointer, stream: StreamId) -> EmmResult<()> {
        let _current = self.enter_prepared()?;
        self.manager.memfree_async(memory, stream)
    }

    /// Free and total memory, as the manager tells it.
    ///
    /// # Errors
    ///
    /// The manager's ([`EmmError::Unsupported`] where it cannot tell).
    pub fn get_memory_info(&self) -> EmmResult<MemoryInfo> {
        let _current = self.enter_prepared()?;
        self.manager.get_memory_info()
    }

    /// Device memory the manager holds from the driver now, where it tracks it
    /// ([`MemoryManager::held_bytes`]).
    pub fn held_bytes(&self) -> Option<u64> {
        self.manager.held_bytes()
    }

    /// An IPC handle for `memory`, from the manager.
    ///
    /// # Errors
    ///
    /// The manager's.
    pub fn get_ipc_handle(&self, memory: &MemoryPointer) -> EmmResult<IpcHandle> {
        let _current = self.enter_prepared()?;
        self.manager.get_ipc_handle(memory)
    }

    /// Opens `handle` (exported by another process) in this context.
    ///
    /// # Errors
    ///
    /// As [`IpcHandle::open`].
    pub fn open_ipc_handle(&self, handle: &mut IpcHandle) -> EmmResult<MemoryPointer> {
        let _current = self.enter()?;
        handle.open(self.driver.clone(), self.id)
    }

    /// Resets the manager (allowed before `prepare_for_use`) and runs the context's own
    /// pending deallocations. Both run even if one fails; the first error is returned.
    ///
    /// # Errors
    ///
    /// The manager's reset; failed deallocations.
    pub fn reset(&self) -> EmmResult<()> {
        let _current = self.enter()?;
        let manager = self.manager.reset();
        let own = self.deallocations.flush_all();
        manager.and(own)
    }

    /// Defers cleanup in the manager and in the context's own deallocations while the guard
    /// lives (Numba's `Context.defer_cleanup`).
    pub fn defer_cleanup(&self) -> DeferCleanupGuard {
        self.manager
            .defer_cleanup()
            .and(self.deallocations.disable())
    }

    /// A new stream; dropping it queues its destruction in this context.
    ///
    /// # Errors
    ///
    /// The driver's.
    pub fn create_stream(&self, non_blocking: bool) -> EmmResult<Stream> {
        let _current = self.enter()?;
        let _scope = crate::attribution::CallerScope::enter(TAG);
        let id = self.driver.stream_create(non_blocking)?;
        Ok(Stream::new(id, Arc::clone(&self.sink)))
    }

    /// A new event; dropping it queues its destruction in this context.
    ///
    /// # Errors
    ///
    /// The driver's.
    pub fn create_event(&self) -> EmmResult<Event> {
        let _current = self.enter()?;
        let _scope = crate::attribution::CallerScope::enter(TAG);
        let id = self.driver.event_create()?;
        Ok(Event::new(id, Arc::clone(&self.sink)))
    }

    /// Queues the unloading of a module (or anything else the context owns) with the
    /// context's deallocations.
    pub fn defer_unload(
        &self,
        what: &'static str,
        bytes: u64,
        unload: impl FnOnce() -> Result<(), DriverError> + Send + 'static,
    ) {
        self.sink.add(Dealloc::Custom {
            what,
            bytes,
            run: Box::new(unload),
        });
    }
}

/// Restores the previously current context.
struct Current<'a, D: Driver> {
    driver: &'a Arc<D>,
    previous: ContextId,
    changed: bool,
}

impl<D: Driver> Drop for Current<'_, D> {
    fn drop(&mut self) {
        if self.changed {
            // Best effort: leaving this context current is still a valid state.
            let _ = self.driver.set_current_context(self.previous);
        }
    }
}

impl<D: Driver> Drop for Context<D> {
    fn drop(&mut self) {
        let _ = self.deallocations.close();
    }
}

impl<D: Driver> fmt::Debug for Context<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("id", &self.id)
            .field("device", &self.device)
            .field("manager", &self.manager.name())
            .finish_non_exhaustive()
    }
}
