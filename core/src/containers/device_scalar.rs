//! [`DeviceScalar`]: one value in device memory (RMM's `device_scalar`).

use std::sync::Arc;

use bytemuck::Pod;

use crate::containers::{DeviceVec, StreamView};
use crate::driver::DevicePtr;
use crate::mr::{DeviceMemoryResource, MrResult};

/// One `T` in device memory, for a kernel to read or write; reading it back synchronizes with
/// the stream.
#[derive(Debug)]
pub struct DeviceScalar<T: Pod> {
    v: DeviceVec<T>,
}

impl<T: Pod> DeviceScalar<T> {
    /// A scalar holding `value`, from `mr`, set on `stream`.
    ///
    /// # Errors
    ///
    /// Out of memory; the driver's.
    pub fn new_in(
        value: T,
        stream: StreamView,
        mr: Arc<dyn DeviceMemoryResource>,
    ) -> MrResult<Self> {
        Ok(DeviceScalar {
            v: DeviceVec::from_slice_in(&[value], stream, mr)?,
        })
    }

    /// Sets the value, ordered on `stream`.
    ///
    /// # Errors
    ///
    /// The driver's.
    pub fn set_value(&mut self, value: T, stream: StreamView) -> MrResult<()> {
        self.v.resize(1, stream)?;
        self.v.set(0, value)
    }

    /// The value, copied to the host on `stream`.
    ///
    /// # Errors
    ///
    /// The driver's.
    pub fn value(&self, stream: StreamView) -> MrResult<T> {
        self.v.get(0, stream)
    }

    /// The device address of the value.
    pub fn ptr(&self) -> DevicePtr {
        self.v.ptr()
    }
}
