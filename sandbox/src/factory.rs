//! [`PluginFactory`]: makes one [`PluginManager`] per context from a loaded module, and the
//! loader that `EMM_MEMORY_MANAGER=path/to/plugin.wasm` goes through.
//!
//! The gate stands here: every client (the `emm` tool, `EMM_MEMORY_MANAGER`, the Rust API,
//! the C ABI) gets its managers from a `PluginFactory`, and a factory makes a manager for a
//! driver that is not simulated only once [`GatePolicy::admit`] lets the plugin through.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use emm_core::contract::selection::{set_plugin_loader, PluginLoader};
use emm_core::contract::{
    EmmResult, ManagerFactory, ManagerTarget, MemoryManager, INTERFACE_VERSION,
};
use emm_core::mr::{CudaResource, DeviceMemoryResource};
use emm_core::Driver;

use crate::error::SandboxError;
use crate::gate::{Admission, GateError, GatePolicy};
use crate::limits::PluginLimits;
use crate::manager::PluginManager;
use crate::module::PluginModule;
use crate::resource::PluginResource;

/// The environment variable holding the config blob a loaded plugin's `emm_init` receives
/// (text such as `chunk_bytes=67108864`; empty when unset).
pub const CONFIG_ENV_VAR: &str = "EMM_PLUGIN_CONFIG";

/// Makes a [`PluginManager`] per context; chunks come from a [`CudaResource`] over the
/// context's driver, and, when asked, quarantined requests go to another `CudaResource`.
///
/// On a driver that is not simulated, a manager is made only when the gate admits the
/// plugin (see [`crate::gate`]); the first admission is kept, so the verdict store is read
/// once per factory, and an override's warning is printed once.
#[derive(Debug, Clone)]
pub struct PluginFactory {
    module: Arc<PluginModule>,
    fallback_to_driver: bool,
    source: Option<PathBuf>,
    // `None`: the policy the environment gives when the gate is first asked.
    gate: Option<GatePolicy>,
    admitted: Arc<Mutex<Option<Admission>>>,
}

impl PluginFactory {
    /// A factory for `module`.
    pub fn new(module: Arc<PluginModule>) -> Self {
        PluginFactory {
            module,
            fallback_to_driver: false,
            source: None,
            gate: None,
            admitted: Arc::new(Mutex::new(None)),
        }
    }

    /// Loads the plugin at `path` with `limits` and `config`; the file is read and hashed
    /// once.
    ///
    /// # Errors
    ///
    /// As [`PluginModule::from_file`].
    pub fn from_file(
        path: &Path,
        limits: PluginLimits,
        config: Vec<u8>,
    ) -> Result<Self, SandboxError> {
        let mut f = PluginFactory::new(Arc::new(PluginModule::from_file(path, limits, config)?));
        f.source = Some(path.to_path_buf());
        Ok(f)
    }

    /// Decides with `policy` whether the plugin may run on hardware, rather than with the
    /// policy the environment gives (`EMM_VERDICT_DIR`, `EMM_GATE`, `EMM_GATE_MIN_DEPTH`).
    pub fn with_gate(mut self, policy: GatePolicy) -> Self {
        self.gate = Some(policy);
        self.admitted = Arc::new(Mutex::new(None));
        self
    }

    /// The file the plugin was loaded from, if it was.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// Whether the plugin may run on a real GPU: asks the gate the first time, prints an
    /// override's warning to stderr, and keeps the admission. A refusal is not kept (a check
    /// run meanwhile may have recorded a verdict).
    ///
    /// # Errors
    ///
    /// The gate's [`GateError`]: no passing verdict at the minimum depth, a failed or an
    /// edited record, a bad setting; each says which command to run.
    pub fn admit_hardware(&self) -> Result<Admission, GateError> {
        // Nothing in the slot can be half-written; recover it rather than fail.
        let mut slot = self.admitted.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = slot.as_ref() {
            return Ok(a.clone());
        }
        let policy = match &self.gate {
            Some(p) => p.clone(),
            None => GatePolicy::from_env()?,
        };
        let a = policy.admit(&self.module, self.source.as_deref())?;
        if let Some(w) = a.warning() {
            eprintln!("emm: warning: {w}");
        }
        *slot = Some(a.clone());
        Ok(a)
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

    /// A manager for `target`, returned as its concrete type (tests reach the resource). On
    /// a driver that is not simulated, the gate must admit the plugin first.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Refused`] with the gate's reason, when `target`'s driver is hardware
    /// and the plugin has no passing verdict (see [`PluginFactory::admit_hardware`]).
    pub fn create_plugin_manager(
        &self,
        target: &ManagerTarget,
    ) -> Result<PluginManager, SandboxError> {
        if !target.driver.is_simulated() {
            self.admit_hardware()?;
        }
        let driver: Arc<dyn Driver> = Arc::clone(&target.driver);
        let upstream: Arc<dyn DeviceMemoryResource> = Arc::new(driver_resource(&driver));
        let mut resource = PluginResource::new(Arc::clone(&self.module), upstream);
        if self.fallback_to_driver {
            resource = resource.with_fallback(Arc::new(driver_resource(&driver)));
        }
        Ok(PluginManager::new(
            driver,
            target.context,
            Arc::new(resource),
        ))
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
        Ok(Box::new(self.create_plugin_manager(target)?))
    }
}

/// Loads the `.wasm` plugin at `path` with `limits`, its config from [`CONFIG_ENV_VAR`]: the
/// public way in for every client (the loader below, the `emm` tool, the C ABI). The factory
/// it returns is gated by the environment's policy; [`PluginFactory::with_gate`] names
/// another.
///
/// # Errors
///
/// As [`PluginModule::from_file`].
pub fn load_plugin(path: &Path, limits: PluginLimits) -> Result<PluginFactory, SandboxError> {
    let config = std::env::var(CONFIG_ENV_VAR)
        .unwrap_or_default()
        .into_bytes();
    PluginFactory::from_file(path, limits, config)
}

/// The loader of `.wasm` plugins: each path is loaded with `limits` by [`load_plugin`].
/// `emm check path/to/plugin.wasm` and `EMM_MEMORY_MANAGER` both go through it once
/// [`install_loader`] (or `set_plugin_loader(loader(..))`) has run.
pub fn loader(limits: PluginLimits) -> Arc<PluginLoader> {
    Arc::new(move |path: &Path| {
        let factory = load_plugin(path, limits.clone())?;
        Ok(Arc::new(factory) as Arc<dyn ManagerFactory>)
    })
}

/// Installs [`loader`] with the default limits as emm's `.wasm` plugin loader.
pub fn install_loader() {
    set_plugin_loader(loader(PluginLimits::default()));
}
