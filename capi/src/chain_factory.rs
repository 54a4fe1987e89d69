//! [`ChainFactory`]: managers over the resource chains `emm_reinitialize` built, one chain per
//! device, so that the C ABI's allocations, `DeviceBuffer`s and Rust containers of the process
//! all draw on the same chain (RMM's `rmm.reinitialize` followed by its allocators).

use std::collections::BTreeMap;
use std::sync::Arc;

use emm_core::contract::selection::{ManagerFactory, ManagerTarget};
use emm_core::contract::{EmmError, EmmResult, MemoryManager, INTERFACE_VERSION};
use emm_core::managers::HostOnlyManager;
use emm_core::mr::DeviceMemoryResource;
use emm_core::DeviceId;

/// Makes a [`HostOnlyManager`] over the chain built for the context's device.
pub(crate) struct ChainFactory {
    chains: BTreeMap<DeviceId, Arc<dyn DeviceMemoryResource>>,
    managed: bool,
}

impl ChainFactory {
    /// A factory over `chains` (device → chain); `managed` when they allocate managed memory
    /// (which `cuIpcGetMemHandle` cannot export).
    pub(crate) fn new(
        chains: BTreeMap<DeviceId, Arc<dyn DeviceMemoryResource>>,
        managed: bool,
    ) -> Self {
        ChainFactory { chains, managed }
    }
}

impl ManagerFactory for ChainFactory {
    fn name(&self) -> &str {
        "reinitialize"
    }

    fn interface_version(&self) -> u32 {
        INTERFACE_VERSION
    }

    fn create(&self, t: &ManagerTarget) -> EmmResult<Box<dyn MemoryManager>> {
        let chain = self.chains.get(&t.device).cloned().ok_or_else(|| {
            EmmError::invalid(
                "emm_reinitialize",
                format!(
                    "device {} was not set up by emm_reinitialize (devices {:?}); include it \
                     in the options' devices",
                    t.device.0,
                    self.chains.keys().map(|d| d.0).collect::<Vec<_>>()
                ),
            )
        })?;
        let on_reset = Arc::clone(&chain);
        let manager = HostOnlyManager::new(Arc::clone(&t.driver), t.context, chain)
            .with_reset_hook(move || on_reset.release().map(|_| ()).map_err(Into::into));
        Ok(Box::new(if self.managed {
            manager.without_ipc(
                "managed memory cannot be exported with cuIpcGetMemHandle; reinitialize \
                 without managed_memory for memory shared between processes",
            )
        } else {
            manager
        }))
    }
}
