//! [`PluginFactory`]: makes one [`PluginManager`] per context from a loaded module, and the
//! loader that `EMM_MEMORY_MANAGER=path/to/plugin.wasm` goes through.

use std::path::Path;
use std::sync::Arc;

use emm_core::contract::selection::{set_plugin_loader, PluginLoader};
use emm_core::contract::{
    EmmResult, ManagerFactory, ManagerTarget, MemoryManager, INTERFACE_VERSION,
};
use emm_core::mr::{CudaResource, DeviceMemoryResource};
use emm_core::Driver;

use crate::error::SandboxError;
use crate::limits::PluginLimits;
use crate::manager::PluginManager;
use crate::module::PluginModule;
use crate::resource::PluginResource;

/// The environment variable holding the config blob a loaded plugin's `emm_init` receives
/// (text such as `chunk_bytes=67108864`; empty when unset).
pub const CONFIG_ENV_VAR: &str = "EMM_PLUGIN_CONFIG";

/// Makes a [`PluginManager`] per context; chunks come from a [`CudaResource`] over the
/// context's driver, and, when asked, quarantined requests go to another `CudaResource`.
#[derive(Debug, Clone)]
pub struct PluginFactory {
    module: Arc<PluginModule>,
    fallback_to_driver: bool,
}

impl PluginFactory {
    /// A factory for `module`.
    pub fn new(module: Arc<PluginModule>) -> Self {
        PluginFactory {
            module,
            fallback_to_driver: false,
        }
    }

    /// Loads the plugin at `path` with `limits` and `config`.
    ///
    /// # Errors
    ///
    /// As [`PluginModule::from_file`].
    pub fn from_file(
        path: &Path,
        limits: PluginLimits,
        config: Vec<u8>,
    ) -> Result<Self, SandboxError> {
        Ok(PluginFactory::new(Arc::new(PluginModule::from_file(
            path, limits, config,
        )?)))
    }

    /// Serve requests from the driver (`cuMemAlloc`) once a plugin is quarantined for good,
    /// rather than failing them.
    pub fn fallback_to_driver(mut self, on: bool) -> Self {
        self.fallback_to_driver = on;
        self
    }

    /// The module.
    pub fn module(&self) -> &Arc<PluginModule> {
        &self.module
    }

    /// A manager for `target`, returned as its concrete type (tests reach the resource).
    pub fn create_plugin_manager(&self, target: &ManagerTarget) -> PluginManager {
        let driver: Arc<dyn Driver> = Arc::clone(&target.driver);
        let upstream: Arc<dyn DeviceMemoryResource> = Arc::new(driver_resource(&driver));
        let mut resource = PluginResource::new(Arc::clone(&self.module), upstream);
        if self.fallback_to_driver {
            resource = resource.with_fallback(Arc::new(driver_resource(&driver)));
        }
        PluginManager::new(driver, target.context, Arc::new(resource))
    }
}

/// `cuMemAlloc` memory from the context's driver.
fn driver_resource(driver: &Arc<dyn Driver>) -> CudaResource<Arc<dyn Driver>> {
    CudaResource::new(Arc::new(Arc::clone(driver)))
}

impl ManagerFactory for PluginFactory {
    fn name(&self) -> &str {
        self.module.name()
    }

    fn interface_version(&self) -> u32 {
        INTERFACE_VERSION
    }

    fn create(&self, target: &ManagerTarget) -> EmmResult<Box<dyn MemoryManager>> {
        Ok(Box::new(self.create_plugin_manager(target)))
    }
}

/// The loader of `.wasm` plugins: each path is loaded with `limits`, its config from
/// [`CONFIG_ENV_VAR`]. `emm check path/to/plugin.wasm` and `EMM_MEMORY_MANAGER` both go through
/// it once [`install_loader`] (or `set_plugin_loader(loader(..))`) has run.
pub fn loader(limits: PluginLimits) -> Arc<PluginLoader> {
    Arc::new(move |path: &Path| {
        let config = std::env::var(CONFIG_ENV_VAR)
            .unwrap_or_default()
            .into_bytes();
        let factory = PluginFactory::from_file(path, limits.clone(), config)?;
        Ok(Arc::new(factory) as Arc<dyn ManagerFactory>)
    })
}

/// Installs [`loader`] with the default limits as emm's `.wasm` plugin loader.
pub fn install_loader() {
    set_plugin_loader(loader(PluginLimits::default()));
}
