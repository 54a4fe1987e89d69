//! RAII containers over memory resources, as RMM's `device_buffer`, `device_uvector` and
//! `device_scalar`, with stream handles and a per-device current resource.
//!
//! Modules:
//! - `stream`: [`StreamView`] (non-owning) and [`Stream`] (owning).
//! - `current`: the process-wide current resource of each device.
//! - `device_buffer`: [`DeviceBuffer`], untyped stream-ordered device memory.
//! - `device_vec`: [`DeviceVec`], a typed, uninitialized array.
//! - `device_scalar`: [`DeviceScalar`], one value in device memory.
//! - `reinitialize`: [`reinitialize`], the current resources of every device rebuilt from options.

mod current;
mod device_buffer;
mod device_scalar;
mod device_vec;
mod reinitialize;
mod stream;

pub use current::{current_device, current_device_resource, set_current_device_resource};
pub use device_buffer::DeviceBuffer;
pub use device_scalar::DeviceScalar;
pub use device_vec::DeviceVec;
pub use reinitialize::{
    reinitialize, reinitialize_chains, ReinitializeOptions, ReinitializedChain,
};
pub use stream::{Stream, StreamView};
