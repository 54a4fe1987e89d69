//! Process-wide choice of the memory manager: [`set_memory_manager`], a registry of built-in
//! managers, and the `EMM_MEMORY_MANAGER` environment variable that overrides both.
//!
//! NBEP 7: "When this variable is set, Numba will automatically use the memory manager
//! from the specified module. Calls to `set_memory_manager` will issue a warning, but
//! otherwise be ignored." And Numba's reference: "At the time of their creation, contexts are bound to an
//! instance of a memory manager for their lifetime … only contexts created after the memory
//! manager was updated will use instances of the new memory manager."
//!
//! The override rule is the pure function [`resolve_selection`]; the global state is one
//! `RwLock` holding the program's choice, the built-in registry and the `.wasm` loader.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::contract::error::{EmmError, EmmResult};
use crate::contract::manager::{check_interface_version, MemoryManager};
use crate::driver::{ContextId, DeviceId, Driver};
use crate::managers::{DefaultManager, ResourceManagerFactory, DEFAULT_MANAGER_NAME};

/// The environment variable naming the manager every new context uses: a built-in name
/// (`default`, …) or the path of a `.wasm` plugin.
pub const MANAGER_ENV_VAR: &str = "EMM_MEMORY_MANAGER";

/// What a factory makes a manager for: one context of one driver.
#[derive(Clone)]
pub struct ManagerTarget {
    /// The driver of the context.
    pub driver: Arc<dyn Driver>,
    /// The context the manager serves.
    pub context: ContextId,
    /// The context's device.
    pub device: DeviceId,
}

impl std::fmt::Debug for ManagerTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerTarget")
            .field("backend", &self.driver.backend_name())
            .field("context", &self.context)
            .field("device", &self.device)
            .finish()
    }
}

/// Makes one manager per context (the seed passes the plugin *class*; this is its Rust form).
pub trait ManagerFactory: Send + Sync {
    /// The name of the managers it makes.
    fn name(&self) -> &str;
    /// The interface version of the managers it makes; checked when the factory is set.
    fn interface_version(&self) -> u32;
    /// A new manager for `target`. Must not allocate: `initialize` comes later.
    ///
    /// # Errors
    ///
    /// Whatever stops the manager from being made (a bad configuration).
    fn create(&self, target: &ManagerTarget) -> EmmResult<Box<dyn MemoryManager>>;
}

/// Loads a `.wasm` plugin as a factory (installed by the sandbox crate).
pub type PluginLoader = dyn Fn(&Path) -> EmmResult<Arc<dyn ManagerFactory>> + Send + Sync;

/// Which manager new contexts use, after the environment is taken into account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice<'a> {
    /// The built-in default (nothing was set).
    Default,
    /// The factory the program set with [`set_memory_manager`].
    Requested,
    /// A built-in manager named by the environment.
    Named(&'a str),
    /// A `.wasm` plugin named by the environment.
    WasmPlugin(&'a Path),
}

/// The outcome of [`resolve_selection`]: the choice and, when the environment overrides the
/// program, the warning to give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution<'a> {
    /// The manager to use.
    pub choice: Choice<'a>,
    /// Set when `EMM_MEMORY_MANAGER` overrides a manager the program set.
    pub warning: Option<String>,
}

/// The selection rule, without touching the environment: `env_value` is the value of
/// `EMM_MEMORY_MANAGER` (unset or blank: none), `requested` the name of the factory the
/// program set (if any). The environment wins, with a warning when it overrides the program.
pub fn resolve_selection<'a>(
    env_value: Option<&'a str>,
    requested: Option<&str>,
) -> Resolution<'a> {
    let env = env_value.map(str::trim).filter(|v| !v.is_empty());
    let Some(v) = env else {
        let choice = if requested.is_some() {
            Choice::Requested
        } else {
            Choice::Default
        };
        return Resolution {
            choice,
            warning: None,
        };
    };
    let choice = if v.ends_with(".wasm") {
        Choice::WasmPlugin(Path::new(v))
    } else {
        Choice::Named(v)
    };
    let warning = requested.map(|r| {
        format!(
            "{MANAGER_ENV_VAR}={v} overrides set_memory_manager({r}); the call is ignored \
             (unset {MANAGER_ENV_VAR} to use {r})"
        )
    });
    Resolution { choice, warning }
}

struct Registry {
    requested: Option<Arc<dyn ManagerFactory>>,
    builtins: BTreeMap<String, Arc<dyn ManagerFactory>>,
    loader: Option<Arc<PluginLoader>>,
}

fn registry() -> &'static RwLock<Registry> {
    static REGISTRY: OnceLock<RwLock<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut builtins = BTreeMap::new();
        builtins.insert(DEFAULT_MANAGER_NAME.to_string(), DefaultManager::factory());
        for f in ResourceManagerFactory::builtins() {
            builtins.insert(f.name().to_string(), f);
        }
        RwLock::new(Registry {
            requested: None,
            builtins,
            loader: None,
        })
    })
}

// The registry holds no invariant a panic could break; recover it rather than fail.
fn read() -> RwLockReadGuard<'static, Registry> {
    registry().read().unwrap_or_else(|e| e.into_inner())
}
fn write() -> RwLockWriteGuard<'static, Registry> {
    registry().write().unwrap_or_else(|e| e.into_inner())
}

/// What [`set_memory_manager`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    /// The name of the factory that was set.
    pub name: String,
    /// Set when `EMM_MEMORY_MANAGER` overrides it (the warning also goes to stderr).
    pub warning: Option<String>,
}

/// Sets the manager of every context created from now on; existing contexts keep theirs.
/// When `EMM_MEMORY_MANAGER` is set, it wins: the call is recorded but warns.
///
/// # Errors
///
/// [`EmmError::VersionMismatch`] when the factory's interface version is not emm's; nothing
/// is changed then.
pub fn set_memory_manager(factory: Arc<dyn ManagerFactory>) -> EmmResult<Selected> {
    let env = std::env::var(MANAGER_ENV_VAR).ok();
    set_memory_manager_with_env(factory, env.as_deref())
}

/// [`set_memory_manager`] with the environment variable's value given.
///
/// # Errors
///
/// As [`set_memory_manager`].
pub fn set_memory_manager_with_env(
    factory: Arc<dyn ManagerFactory>,
    env_value: Option<&str>,
) -> EmmResult<Selected> {
    check_interface_version(factory.name(), factory.interface_version())?;
    let name = factory.name().to_string();
    let warning = resolve_selection(env_value, Some(&name)).warning;
    if let Some(w) = &warning {
        eprintln!("emm: warning: {w}");
    }
    write().requested = Some(factory);
    Ok(Selected { name, warning })
}

/// Forgets the program's choice: new contexts use the default (or the environment's).
pub fn clear_memory_manager() {
    write().requested = None;
}

/// Adds (or replaces) a built-in manager that `EMM_MEMORY_MANAGER` can name; returns the one
/// it replaced.
///
/// # Errors
///
/// [`EmmError::VersionMismatch`] for a factory of another interface version.
pub fn register_manager(
    name: &str,
    factory: Arc<dyn ManagerFactory>,
) -> EmmResult<Option<Arc<dyn ManagerFactory>>> {
    check_interface_version(factory.name(), factory.interface_version())?;
    Ok(write().builtins.insert(name.to_string(), factory))
}

/// The names `EMM_MEMORY_MANAGER` can give, in order.
pub fn manager_names() -> Vec<String> {
    read().builtins.keys().cloned().collect()
}

/// Installs the loader of `.wasm` plugins named by `EMM_MEMORY_MANAGER`.
pub fn set_plugin_loader(loader: Arc<PluginLoader>) {
    write().loader = Some(loader);
}

/// The factory a context created now would use, reading `EMM_MEMORY_MANAGER`.
///
/// # Errors
///
/// [`EmmError::UnknownManager`] for a name no built-in has; [`EmmError::Unsupported`] for a
/// `.wasm` path with no loader installed; the loader's errors; a version mismatch.
pub fn current_factory() -> EmmResult<Arc<dyn ManagerFactory>> {
    let env = std::env::var(MANAGER_ENV_VAR).ok();
    current_factory_with_env(env.as_deref())
}

/// [`current_factory`] with the environment variable's value given.
///
/// # Errors
///
/// As [`current_factory`].
pub fn current_factory_with_env(env_value: Option<&str>) -> EmmResult<Arc<dyn ManagerFactory>> {
    let reg = read();
    let requested = reg.requested.as_ref().map(|f| f.name().to_string());
    let factory = match resolve_selection(env_value, requested.as_deref()).choice {
        Choice::Requested => reg.requested.clone(),
        Choice::Default => reg.builtins.get(DEFAULT_MANAGER_NAME).cloned(),
        Choice::Named(n) => {
            Some(
                reg.builtins
                    .get(n)
                    .cloned()
                    .ok_or_else(|| EmmError::UnknownManager {
                        name: n.to_string(),
                        known: reg.builtins.keys().cloned().collect::<Vec<_>>().join(", "),
                    })?,
            )
        }
        Choice::WasmPlugin(path) => {
            let Some(loader) = reg.loader.clone() else {
                return Err(EmmError::unsupported(
                    path.display().to_string(),
                    "loading a .wasm plugin",
                    "no plugin loader is installed; link emm-sandbox (which installs one) or \
                     name a built-in manager",
                ));
            };
            drop(reg);
            let f = loader(path)?;
            check_interface_version(f.name(), f.interface_version())?;
            return Ok(f);
        }
    };
    factory.ok_or_else(|| EmmError::UnknownManager {
        name: DEFAULT_MANAGER_NAME.to_string(),
        known: reg.builtins.keys().cloned().collect::<Vec<_>>().join(", "),
    })
}

/// Makes the manager for `target` with `factory`, checking the instance's version too (a
/// factory may misreport it). With unified memory on (`crate::unified::enable`), the manager
/// comes wrapped in a `UnifiedManager`.
///
/// # Errors
///
/// The factory's errors; [`EmmError::VersionMismatch`]; unified memory on for a device that
/// cannot run it.
pub fn create_manager(
    factory: &dyn ManagerFactory,
    target: &ManagerTarget,
) -> EmmResult<Box<dyn MemoryManager>> {
    let manager = factory.create(target)?;
    check_interface_version(manager.name(), manager.interface_version())?;
    // With unified memory on, the context's allocations go through the caching managed
    // allocator (the RFC's "forgo all traditional allocators"); off, this returns `manager`.
    crate::unified::wrap_if_enabled(manager, target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_wins_and_warns_only_when_it_overrides_a_call() {
        let r = resolve_selection(None, None);
        assert_eq!((r.choice, r.warning), (Choice::Default, None));
        let r = resolve_selection(Some("  "), Some("pool"));
        assert_eq!((r.choice, r.warning), (Choice::Requested, None));
        let r = resolve_selection(Some("default"), None);
        assert_eq!((r.choice, r.warning), (Choice::Named("default"), None));
        let r = resolve_selection(Some("default"), Some("pool"));
        assert_eq!(r.choice, Choice::Named("default"));
        assert_eq!(
            r.warning.as_deref(),
            Some(
                "EMM_MEMORY_MANAGER=default overrides set_memory_manager(pool); the call is \
                 ignored (unset EMM_MEMORY_MANAGER to use pool)"
            )
        );
        let r = resolve_selection(Some("/opt/plugins/arena.wasm"), None);
        assert_eq!(
            r.choice,
            Choice::WasmPlugin(Path::new("/opt/plugins/arena.wasm"))
        );
    }
}
