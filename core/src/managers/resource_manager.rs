//! Resource-backed built-in managers: a named resource chain ([`crate::mr::named`]) for device
//! memory behind [`HostOnlyManager`] for the host side, selectable as `pool`, `sharded`, `arena`,
//! `binning`, `async` and `managed` (`EMM_MEMORY_MANAGER=pool`).
//!
//! What `defer_cleanup` defers: the host side's pending deallocations (pinned and mapped
//! memory, unpins, managed memory). Device memory goes back to the resource at once — a pool
//! reuses it immediately — and `reset` gives the resource's free memory back to the driver.

use std::sync::Arc;

use crate::contract::selection::{ManagerFactory, ManagerTarget};
use crate::contract::{EmmResult, MemoryManager, INTERFACE_VERSION};
use crate::driver::{ContextId, Driver};
use crate::managers::HostOnlyManager;
use crate::mr::named::{self, NAMED_RESOURCES};
use crate::mr::{DeviceMemoryResource, MrResult};

/// Makes a [`HostOnlyManager`] over the named resource chain for each context.
#[derive(Debug, Clone)]
pub struct ResourceManagerFactory {
    name: String,
}

impl ResourceManagerFactory {
    /// A factory of managers over the chain `resource` names (see
    /// [`crate::mr::named::NAMED_RESOURCES`]).
    pub fn new(resource: &str) -> Self {
        ResourceManagerFactory {
            name: resource.to_string(),
        }
    }

    /// One factory per built-in resource-backed manager.
    pub fn builtins() -> Vec<Arc<dyn ManagerFactory>> {
        NAMED_RESOURCES
            .iter()
            // `cuda` is what `default` does better.
            .filter(|(n, _)| *n != "cuda")
            .map(|(n, _)| Arc::new(ResourceManagerFactory::new(n)) as Arc<dyn ManagerFactory>)
            .collect()
    }
}

/// Runs `f` with `ctx` current on this thread, restoring the caller's context after.
fn in_context<T>(
    driver: &dyn Driver,
    ctx: ContextId,
    f: impl FnOnce() -> MrResult<T>,
) -> MrResult<T> {
    let before = driver.current_context()?;
    if before == ctx {
        return f();
    }
    driver.set_current_context(ctx)?;
    let r = f();
    driver.set_current_context(before)?;
    r
}

impl ManagerFactory for ResourceManagerFactory {
    fn name(&self) -> &str {
        &self.name
    }

    fn interface_version(&self) -> u32 {
        INTERFACE_VERSION
    }

    fn create(&self, t: &ManagerTarget) -> EmmResult<Box<dyn MemoryManager>> {
        let resource: Arc<dyn DeviceMemoryResource> = in_context(&*t.driver, t.context, || {
            named::build(&self.name, Arc::clone(&t.driver))
        })?;
        let on_reset = Arc::clone(&resource);
        let manager = HostOnlyManager::new(Arc::clone(&t.driver), t.context, resource)
            .with_reset_hook(move || on_reset.release().map(|_| ()).map_err(Into::into));
        Ok(Box::new(match self.name.as_str() {
            "async" => manager
                .without_ipc(
                    "memory from the driver's stream-ordered pool cannot be exported with \
                     cuIpcGetMemHandle; use the pool manager for memory shared between processes",
                )
                .with_synchronous_memalloc(),
            "pool-vmm" | "pool-vmm-tight" => manager.without_ipc(
                "memory mapped with cuMemMap cannot be exported with cuIpcGetMemHandle; use \
                 the pool manager (cuMemAlloc chunks) for memory shared between processes",
            ),
            "managed" => manager.without_ipc(
                "managed memory cannot be exported with cuIpcGetMemHandle; use the pool \
                 manager for memory shared between processes",
            ),
            _ => manager,
        }))
    }
}
