//! [`Sandboxed`]: a wasm plugin's factory whose managers the suite can look into — the host's
//! statistics beside the plugin's own (`emm_stats`) — so that a plugin's word about itself is
//! checked against what the host knows.
//!
//! A case finds its manager's resource by the driver it was made for (each case has a machine
//! of its own): [`Sandboxed::create`] records it, [`resource_for`] takes it back.

use std::sync::{Arc, Mutex, Weak};

use emm_core::contract::{EmmResult, ManagerFactory, ManagerTarget, MemoryManager};
use emm_core::Driver;
use emm_sandbox::{PluginFactory, PluginResource};

/// Resources of managers made and not yet taken, by the address of their driver.
static MADE: Mutex<Vec<(usize, Weak<PluginResource>)>> = Mutex::new(Vec::new());

fn key(driver: &Arc<dyn Driver>) -> usize {
    Arc::as_ptr(driver).cast::<()>() as usize
}

/// A [`PluginFactory`] whose managers' resources the suite can read.
#[derive(Debug, Clone)]
pub struct Sandboxed(pub PluginFactory);

impl ManagerFactory for Sandboxed {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn interface_version(&self) -> u32 {
        self.0.interface_version()
    }

    fn create(&self, target: &ManagerTarget) -> EmmResult<Box<dyn MemoryManager>> {
        let m = self.0.create_plugin_manager(target)?;
        if let Ok(mut made) = MADE.lock() {
            made.retain(|(_, r)| r.strong_count() > 0);
            made.push((key(&target.driver), Arc::downgrade(m.resource())));
        }
        Ok(Box::new(m))
    }
}

/// The resource of the sandboxed manager made for `driver`, if one was (taken once).
pub fn resource_for(driver: &Arc<dyn Driver>) -> Option<Arc<PluginResource>> {
    let mut made = MADE.lock().ok()?;
    let at = made.iter().rposition(|(k, _)| *k == key(driver))?;
    made.swap_remove(at).1.upgrade()
}
