//! The enablement switch: [`set_enabled_unified_memory`] and `EMM_ENABLE_UNIFIED_MEMORY`.
//!
//! The RFC: "The default value for the `enabled_uvm` flag will be False. Setting the value to
//! True, will have the effect that newly created tensors will be allocated and marked as
//! managed", "we propose to add a check on the environment for the
//! `PYTORCH_ENABLE_UNIFIED_MEMORY` variable. When set, the same global context enablement flag
//! will be set", and "UVM will not successfully enable when CUDA/ROCm is not present".
//!
//! In emm the switch works where the contract binds a manager to a context
//! (`selection::create_manager`, which `Context::new` and `Context::with_factory` use; a manager
//! given ready-made to `Context::with_manager` is taken as it is): a context created while it
//! is on gets a [`UnifiedManager`] around the manager it would have had, so all of its device and host allocations (and
//! `memallocmanaged`) come from one caching managed allocator. Contexts created before keep
//! their manager, as they do when `set_memory_manager` changes the choice (seed 004: "only
//! contexts created after the memory manager was updated will use instances of the new memory
//! manager"). On a device without concurrent managed access the context is not created and
//! the error says why. The environment wins over the program, as `EMM_MEMORY_MANAGER` does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::contract::{Context, EmmResult, ManagerTarget, MemoryManager};
use crate::driver::{DeviceId, Driver};
use crate::unified::caching::CachingManagedAllocator;
use crate::unified::error::UnifiedError;
use crate::unified::manager::UnifiedManager;
use crate::unified::options::CachingManagedOptions;

/// The environment variable that turns unified memory on (`1`, `true`, `on`, `yes`) or off
/// (`0`, `false`, `off`, `no`) for every context created from then on, whatever the program set.
pub const UNIFIED_MEMORY_ENV_VAR: &str = "EMM_ENABLE_UNIFIED_MEMORY";

static ENABLED: AtomicBool = AtomicBool::new(false);
static OPTIONS: RwLock<CachingManagedOptions> = RwLock::new(CachingManagedOptions::DEFAULT);

/// The allocators the switch made, by the address of their manager, for [`context_allocator`].
type Made = Vec<(usize, Weak<CachingManagedAllocator>)>;
static MADE: Mutex<Made> = Mutex::new(Vec::new());

/// Turns unified memory on or off for contexts created from now on (the RFC's
/// `set_enabled_uvm`). Off by default. `EMM_ENABLE_UNIFIED_MEMORY`, when set, wins.
pub fn set_enabled_unified_memory(on: bool) {
    ENABLED.store(on, Ordering::Release);
}

/// Whether contexts created now get unified memory (the RFC's `get_enabled_uvm`): the
/// environment variable when set, else the program's choice.
///
/// # Errors
///
/// [`UnifiedError::InvalidConfig`] when the variable is set to something else than a yes or
/// a no.
pub fn get_enabled_unified_memory() -> Result<bool, UnifiedError> {
    let env = std::env::var(UNIFIED_MEMORY_ENV_VAR).ok();
    resolve_enabled(env.as_deref(), ENABLED.load(Ordering::Acquire))
}

/// The switch's rule, without touching the environment: `env_value` is the variable's value
/// (unset or blank: not set), `program` what [`set_enabled_unified_memory`] said.
///
/// # Errors
///
/// As [`get_enabled_unified_memory`].
pub fn resolve_enabled(env_value: Option<&str>, program: bool) -> Result<bool, UnifiedError> {
    let Some(v) = env_value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(program);
    };
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(UnifiedError::InvalidConfig {
            setting: UNIFIED_MEMORY_ENV_VAR,
            value: v.to_string(),
            reason: "give 1 (or true, on, yes) to turn unified memory on, 0 (or false, off, no) \
                     to turn it off, or unset it"
                .to_string(),
        }),
    }
}

/// Sets the options of the caching allocators made for contexts created from now on.
///
/// # Errors
///
/// [`UnifiedError::InvalidConfig`] when they do not validate; nothing changes then.
pub fn set_unified_memory_options(options: CachingManagedOptions) -> Result<(), UnifiedError> {
    options.validate()?;
    *OPTIONS.write().unwrap_or_else(|e| e.into_inner()) = options;
    Ok(())
}

/// The options new contexts' caching allocators get.
pub fn unified_memory_options() -> CachingManagedOptions {
    *OPTIONS.read().unwrap_or_else(|e| e.into_inner())
}

/// Checks that `device` can run unified memory: prefetch and advice need concurrent managed
/// access.
///
/// # Errors
///
/// [`UnifiedError::NotSupported`] naming the device; the driver's error.
pub fn check_unified_memory_support(
    driver: &dyn Driver,
    device: DeviceId,
) -> Result<(), UnifiedError> {
    let p = driver.device_properties(device)?;
    if p.concurrent_managed_access {
        Ok(())
    } else {
        Err(UnifiedError::NotSupported {
            device,
            name: p.name,
        })
    }
}

/// Identifies a manager by address: a context owns its manager in a box that never moves.
fn manager_key(manager: &dyn MemoryManager) -> usize {
    std::ptr::from_ref(manager).cast::<()>() as usize
}

/// `manager` wrapped in a [`UnifiedManager`] when the switch is on (the seam
/// `selection::create_manager` calls); `manager` itself when it is off.
///
/// # Errors
///
/// A bad `EMM_ENABLE_UNIFIED_MEMORY`; [`UnifiedError::NotSupported`] for a device without
/// concurrent managed access.
pub fn wrap_if_enabled(
    manager: Box<dyn MemoryManager>,
    target: &ManagerTarget,
) -> EmmResult<Box<dyn MemoryManager>> {
    if !get_enabled_unified_memory()? {
        return Ok(manager);
    }
    check_unified_memory_support(&*target.driver, target.device)?;
    let alloc = Arc::new(CachingManagedAllocator::new(
        Arc::clone(&target.driver),
        target.device,
        unified_memory_options(),
    )?);
    let weak = Arc::downgrade(&alloc);
    let wrapped: Box<dyn MemoryManager> =
        Box::new(UnifiedManager::new(manager, alloc, target.context));
    let key = manager_key(&*wrapped);
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    // A manager at this address before was dropped: its entry is stale.
    made.retain(|(k, w)| *k != key && w.strong_count() > 0);
    made.push((key, weak));
    Ok(wrapped)
}

/// The caching allocator behind `context`, when it was created with unified memory on (so
/// that `ManagedBuffer`s share the context's cache).
pub fn context_allocator<D: Driver>(context: &Context<D>) -> Option<Arc<CachingManagedAllocator>> {
    let manager = context.manager();
    // Only a UnifiedManager registers; another manager may since live at a freed address.
    if !manager.name().starts_with(UnifiedManager::NAME_PREFIX) {
        return None;
    }
    let key = manager_key(manager);
    let made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    made.iter()
        .rev()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_wins_and_bad_values_are_clear_errors() {
        assert!(!resolve_enabled(None, false).unwrap());
        assert!(resolve_enabled(None, true).unwrap());
        assert!(resolve_enabled(Some(" "), true).unwrap());
        assert!(resolve_enabled(Some("1"), false).unwrap());
        assert!(resolve_enabled(Some("ON"), false).unwrap());
        assert!(!resolve_enabled(Some("0"), true).unwrap());
        let e = resolve_enabled(Some("maybe"), false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "EMM_ENABLE_UNIFIED_MEMORY = \"maybe\": give 1 (or true, on, yes) to turn unified \
             memory on, 0 (or false, off, no) to turn it off, or unset it"
        );
    }
}
