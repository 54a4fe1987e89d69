//! The copies of [`ManagedBuffer`]: what `to` does when more than the location changes, and
//! `manage` / `unmanage`. The RFC's copy path: "The tensor copy will occur as normal; set
//! memadvise in the direction of the transfer; Set cudaMemPrefetchAsync()".

use std::sync::Arc;

use crate::attribution::CallerScope;
use crate::containers::{current_device_resource, DeviceBuffer};
use crate::driver::{Location, StreamId};
use crate::mr::DeviceMemoryResource;
use crate::unified::buffer::{ManagedBuffer, TAG};
use crate::unified::error::UnifiedError;

impl ManagedBuffer {
    /// A copy at `location`, managed or standard (`mr` for standard device memory, else the
    /// current device resource).
    pub(super) fn copy_to(
        &self,
        location: Location,
        managed: bool,
        mr: Option<Arc<dyn DeviceMemoryResource>>,
        stream: StreamId,
    ) -> Result<ManagedBuffer, UnifiedError> {
        let dst = if managed {
            ManagedBuffer::new(&self.alloc, self.size, location, stream)?
        } else {
            self.standard(location, mr, stream)?
        };
        self.copy_into(&dst, stream)?;
        Ok(dst)
    }

    fn standard(
        &self,
        location: Location,
        mr: Option<Arc<dyn DeviceMemoryResource>>,
        stream: StreamId,
    ) -> Result<ManagedBuffer, UnifiedError> {
        let Location::Device(d) = location else {
            return Ok(ManagedBuffer::from_host(&self.alloc, &vec![0; self.size]));
        };
        let mr = match mr {
            Some(mr) => mr,
            None => current_device_resource(d)?,
        };
        let buffer = DeviceBuffer::new_in(self.size, stream, mr)?;
        if buffer.device() != d {
            return Err(UnifiedError::invalid(
                "ManagedBuffer::to",
                format!(
                    "standard memory for device {} came from device {}: make device {}'s \
                     context current (or give its resource) first",
                    d.0,
                    buffer.device().0,
                    d.0
                ),
            ));
        }
        Ok(ManagedBuffer::from_device_buffer(&self.alloc, buffer))
    }

    /// Copies the contents into `dst` (same size): host stores into managed host memory, the
    /// copy engine otherwise; managed destinations are then prefetched to their location, as
    /// the RFC's copy path does.
    fn copy_into(&self, dst: &ManagedBuffer, stream: StreamId) -> Result<(), UnifiedError> {
        let driver = self.driver();
        let _scope = CallerScope::enter(TAG);
        let n = self.size;
        if let Some(src) = self.storage.host() {
            return match (dst.storage.host(), dst.device_ptr()) {
                (Some(mut d), _) => {
                    d.copy_from_slice(&src);
                    Ok(())
                }
                (None, Some(p)) if dst.is_managed() && dst.location == Location::Host => {
                    Ok(driver.host_write(p.as_host(), &src)?)
                }
                (None, Some(p)) => {
                    driver.memcpy_htod(p, &src, Some(stream))?;
                    dst.prefetch_after_copy(stream)
                }
                (None, None) => Ok(()),
            };
        }
        let Some(src) = self.device_ptr() else {
            return Ok(());
        };
        if let Some(mut d) = dst.storage.host() {
            return Ok(driver.memcpy_dtoh(&mut d, src, Some(stream))?);
        }
        if let Some(p) = dst.device_ptr() {
            driver.memcpy_dtod(p, src, n, Some(stream))?;
            dst.prefetch_after_copy(stream)?;
        }
        Ok(())
    }

    fn prefetch_after_copy(&self, stream: StreamId) -> Result<(), UnifiedError> {
        if let (true, Some(p)) = (self.is_managed(), self.device_ptr()) {
            self.driver()
                .mem_prefetch(p, self.size, self.location, stream)?;
            self.storage.used_on(stream);
        }
        Ok(())
    }
}
