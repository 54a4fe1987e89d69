//! [`PluginManager`]: a sandboxed plugin as an EMM memory manager.
//!
//! The device side is a [`PluginResource`]; the host side (`memhostalloc`, `mempin`,
//! `memallocmanaged`, their deferred frees) is emm's own [`HostOnlyManager`], as Numba's
//! "Providing device memory management only" intends: a policy decides where device memory
//! goes and never touches pinned host memory. The ABI carries what a policy needs of the rest:
//! `reset` calls `emm_reset` (then the host side's reset, which always runs), and
//! `defer_cleanup` holds an `emm_defer_enter`/`emm_defer_exit` scope inside the host side's
//! guard. `get_ipc_handle` needs nothing of the guest: the host knows each allocation's chunk,
//! a real upstream allocation, so the driver's base-plus-offset rule gives the right offset and
//! a guest cannot lie about it.
//!
//! - **Thread safety**: `Send + Sync`, as the resource.
//! - **Streams**: `memalloc` memory is usable on every stream and freed on the legacy default
//!   stream. The stream-ordered extension (`memalloc_async`, `memfree_async`) is offered only
//!   for a plugin that imports `emm::stream_order` (ABI v1.1, [`PluginResource::orders_streams`]):
//!   the plugin hears each request's stream and orders its own reuse across streams; the host
//!   adds no synchronization, so `emm check` sees what the plugin does. For any other plugin it
//!   says `Unsupported`, and every request reaches the plugin on the legacy default stream.
//! - **Use and cost**: one `Arc` per pointer on top of the resource's cost.

use std::sync::Arc;

use emm_core::contract::{
    Capabilities, DeferCleanupGuard, EmmError, EmmResult, MemoryManager, MemoryPointer,
    INTERFACE_VERSION,
};
use emm_core::managers::HostOnlyManager;
use emm_core::mr::DeviceMemoryResource;
use emm_core::{ContextId, Driver, StreamId};

use crate::resource::PluginResource;

/// A wasm plugin serving one context's device memory, with emm's host side.
pub struct PluginManager {
    name: String,
    resource: Arc<PluginResource>,
    inner: HostOnlyManager<Arc<PluginResource>, dyn Driver>,
}

impl std::fmt::Debug for PluginManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginManager")
            .field("name", &self.name)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

impl PluginManager {
    /// A manager for `context` whose device memory `resource` serves. Makes no driver call
    /// and does not start the plugin (`initialize` does).
    pub fn new(driver: Arc<dyn Driver>, context: ContextId, resource: Arc<PluginResource>) -> Self {
        let on_reset = Arc::clone(&resource);
        let on_defer = Arc::clone(&resource);
        let inner = HostOnlyManager::new(driver, context, Arc::clone(&resource))
            .with_reset_hook(move || on_reset.reset().map_err(EmmError::from))
            .with_defer_cleanup_hook(move || {
                // A failure here quarantines the plugin; the next request reports it.
                let _ = on_defer.defer_enter();
                let scope = Arc::clone(&on_defer);
                DeferCleanupGuard::new(move || {
                    let _ = scope.defer_exit();
                })
            });
        PluginManager {
            name: format!("wasm:{}", resource.plugin()),
            resource,
            inner,
        }
    }

    /// The sandboxed resource (breaches, statistics, logs).
    pub fn resource(&self) -> &Arc<PluginResource> {
        &self.resource
    }

    /// `Ok` when the plugin orders its reuse across streams, else why `operation` is
    /// unsupported.
    fn stream_ordered(&self, operation: &'static str) -> EmmResult<()> {
        if self.resource.orders_streams() {
            return Ok(());
        }
        Err(EmmError::unsupported(
            &self.name,
            operation,
            "the plugin does not import emm::stream_order (ABI v1.1), so it cannot order its \
             reuse of memory across streams; use memalloc, whose memory is usable on every \
             stream",
        ))
    }

    /// Device frees the resource refused (a user's bad free) since the last call.
    ///
    /// # Errors
    ///
    /// The first refusal.
    pub fn take_device_failures(&self) -> EmmResult<()> {
        self.inner.take_device_failures()
    }
}

impl MemoryManager for PluginManager {
    fn name(&self) -> &str {
        &self.name
    }

    /// The host side's initialization, then the plugin's start-up (ABI check, `emm_init`);
    /// calling it again changes nothing.
    fn initialize(&self) -> EmmResult<()> {
        self.inner.initialize()?;
        self.resource.start().map_err(EmmError::from)
    }

    // The host side runs the plugin's hooks: `reset` calls `emm_reset` and then resets the host
    // side, which runs even when the plugin fails; `defer_cleanup` defers the host side's
    // pending frees and holds an `emm_defer_enter` / `emm_defer_exit` scope inside that guard,
    // during which the plugin should keep empty chunks.
    emm_core::forward_manager_calls!(
        inner: memalloc,
        memhostalloc,
        mempin,
        memallocmanaged,
        get_memory_info,
        get_ipc_handle,
        reset,
        defer_cleanup,
        held_bytes,
    );

    fn interface_version(&self) -> u32 {
        INTERFACE_VERSION
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::V1
            .with_stream_ordered(self.resource.orders_streams())
            .with_managed_memory(true)
            .with_memory_info(self.resource.memory_info().is_some())
    }

    /// `size` bytes for `stream`, from a plugin that orders its reuse across streams.
    ///
    /// # Errors
    ///
    /// [`EmmError::Unsupported`] for a plugin that does not import `emm::stream_order`; then
    /// as `memalloc`.
    fn memalloc_async(&self, size: usize, stream: StreamId) -> EmmResult<MemoryPointer> {
        self.stream_ordered("memalloc_async")?;
        self.inner.memalloc_async(size, stream)
    }

    /// Frees `memory` on `stream`: the plugin hears the stream with the free.
    ///
    /// # Errors
    ///
    /// As [`PluginManager::memalloc_async`]; then as the contract says (another owner alive, a
    /// pointer of another manager). On an error `memory` is dropped, so its finalizer frees it.
    fn memfree_async(&self, memory: MemoryPointer, stream: StreamId) -> EmmResult<()> {
        self.stream_ordered("memfree_async")?;
        self.inner.memfree_async(memory, stream)
    }
}
