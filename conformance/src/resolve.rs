//! Resolving a plugin name: a built-in manager or a `.wasm` plugin's path, as
//! `EMM_MEMORY_MANAGER` names one.

use std::sync::Arc;

use emm_core::contract::selection::{current_factory_with_env, manager_names};
use emm_core::contract::ManagerFactory;

/// The factory of `plugin`: a built-in manager's name (`emm list` shows them) or the path
/// of a `.wasm` plugin, resolved through the registry as `EMM_MEMORY_MANAGER` is. A path
/// loads once a plugin loader is installed (`emm_sandbox::install_loader`, as `emm` does).
///
/// # Errors
///
/// No such manager, or the plugin cannot be loaded, with the reason.
pub fn resolve_plugin(plugin: &str) -> Result<Arc<dyn ManagerFactory>, String> {
    if plugin.trim().is_empty() {
        return Err(format!(
            "no plugin named; give one of: {}",
            manager_names().join(", ")
        ));
    }
    current_factory_with_env(Some(plugin)).map_err(|e| e.to_string())
}
