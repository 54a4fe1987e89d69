//! The current resource of each device, process-wide, as RMM's
//! `set_current_device_resource` / `get_current_device_resource`.
//!
//! A resource is only used on the device it was made for: containers remember the device of
//! their resource and refuse to be used while another device is current (and the simulated GPU
//! reports a kernel touching another device's memory without peer access).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::driver::DeviceId;
use crate::mr::{DeviceMemoryResource, MrError, MrResult};

type Registry = BTreeMap<DeviceId, Arc<dyn DeviceMemoryResource>>;

static CURRENT: RwLock<Registry> = RwLock::new(BTreeMap::new());

fn read() -> std::sync::RwLockReadGuard<'static, Registry> {
    CURRENT.read().unwrap_or_else(|e| e.into_inner())
}

/// Makes `mr` the current resource of `device`; returns the previous one.
pub fn set_current_device_resource(
    device: DeviceId,
    mr: Arc<dyn DeviceMemoryResource>,
) -> Option<Arc<dyn DeviceMemoryResource>> {
    CURRENT
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(device, mr)
}

/// The current resource of `device`.
///
/// # Errors
///
/// [`MrError::InvalidArgument`] when none was set: call `emm_core::reinitialize` (driver-backed
/// resources for every device) or [`set_current_device_resource`] first.
pub fn current_device_resource(device: DeviceId) -> MrResult<Arc<dyn DeviceMemoryResource>> {
    read().get(&device).cloned().ok_or_else(|| MrError::InvalidArgument {
        resource: "current_device_resource",
        reason: format!(
            "no current resource for device {}: call emm_core::reinitialize(driver, options) or set_current_device_resource first",
            device.0
        ),
    })
}

/// The device of the calling thread's current context, asked of the driver behind the current
/// resources.
///
/// # Errors
///
/// As [`current_device_resource`] when no resource is set; the driver's otherwise.
pub fn current_device() -> MrResult<DeviceId> {
    let any = read()
        .values()
        .next()
        .cloned()
        .ok_or_else(|| MrError::InvalidArgument {
            resource: "current_device",
            reason:
                "no current resource is set: call emm_core::reinitialize(driver, options) first"
                    .into(),
        })?;
    let driver = any.driver();
    Ok(driver.context_device(driver.current_context()?)?)
}
