//! [`DeviceBuffer`]: untyped, uninitialized, stream-ordered device memory from a resource.

use std::sync::Arc;

use crate::containers::current::{current_device, current_device_resource};
use crate::containers::StreamView;
use crate::driver::{DeviceId, DevicePtr, Driver};
use crate::mr::{DeviceMemoryResource, MrError, MrResult};
use crate::units::Bytes;

/// Device memory owned by a buffer: allocated from a resource on a stream, freed on drop on
/// the buffer's last stream (see [`DeviceBuffer::set_stream`]). RMM's `device_buffer`.
///
/// The contents start uninitialized. A buffer holds `size` bytes inside an allocation of
/// `capacity` bytes; growing past the capacity reallocates and copies on the stream.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use emm_core::containers::DeviceBuffer;
/// use emm_core::mr::CudaResource;
/// use emm_core::StreamId;
/// # use emm_sim::{SimConfig, SimDriver};
/// # let gpu = SimDriver::new(SimConfig::new(1)).unwrap();
/// let mr = Arc::new(CudaResource::new(gpu));
/// let buf = DeviceBuffer::from_host_in(b"hello", StreamId::DEFAULT, mr).unwrap();
/// assert_eq!(buf.to_host(StreamId::DEFAULT).unwrap(), b"hello");
/// ```
pub struct DeviceBuffer {
    ptr: DevicePtr,
    size: usize,
    capacity: usize,
    stream: StreamView,
    device: DeviceId,
    mr: Arc<dyn DeviceMemoryResource>,
}

/// The device of the calling thread's current context, as `mr`'s driver sees it.
fn device_of(mr: &dyn DeviceMemoryResource) -> MrResult<DeviceId> {
    let d = mr.driver();
    Ok(d.context_device(d.current_context()?)?)
}

impl DeviceBuffer {
    /// `bytes` of uninitialized memory from the current resource of the current device.
    ///
    /// # Errors
    ///
    /// No current resource; out of memory.
    pub fn new(bytes: usize, stream: StreamView) -> MrResult<Self> {
        let mr = current_device_resource(current_device()?)?;
        Self::new_in(bytes, stream, mr)
    }

    /// `bytes` of uninitialized memory from `mr`, on `stream`.
    ///
    /// # Errors
    ///
    /// Out of memory, or the resource's error.
    pub fn new_in(
        bytes: usize,
        stream: StreamView,
        mr: Arc<dyn DeviceMemoryResource>,
    ) -> MrResult<Self> {
        let device = device_of(&*mr)?;
        let ptr = mr.allocate(bytes, stream)?;
        Ok(DeviceBuffer {
            ptr,
            size: bytes,
            capacity: bytes,
            stream,
            device,
            mr,
        })
    }

    /// A buffer holding a copy of `data`, from the current resource of the current device.
    ///
    /// # Errors
    ///
    /// As [`DeviceBuffer::new`], and copy errors.
    pub fn from_host(data: &[u8], stream: StreamView) -> MrResult<Self> {
        let mr = current_device_resource(current_device()?)?;
        Self::from_host_in(data, stream, mr)
    }

    /// A buffer holding a copy of `data`, from `mr`.
    ///
    /// # Errors
    ///
    /// As [`DeviceBuffer::new_in`], and copy errors (the memory is returned first).
    pub fn from_host_in(
        data: &[u8],
        stream: StreamView,
        mr: Arc<dyn DeviceMemoryResource>,
    ) -> MrResult<Self> {
        let buf = Self::new_in(data.len(), stream, mr)?;
        buf.copy_from_host(0, data)?;
        Ok(buf)
    }

    /// Bytes in the buffer.
    #[inline]
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the buffer holds no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Bytes allocated (at least `size`).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The device address of the first byte ([`DevicePtr::NULL`] when the capacity is 0).
    #[inline]
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The stream the buffer's memory is ordered on; it is freed there.
    #[inline]
    pub fn stream(&self) -> StreamView {
        self.stream
    }

    /// The device the buffer lives on.
    #[inline]
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// The resource the memory came from.
    pub fn resource(&self) -> &Arc<dyn DeviceMemoryResource> {
        &self.mr
    }

    /// Moves the buffer to `stream`: later reallocations and the final free happen there. The
    /// caller orders `stream` after the buffer's earlier work (an event wait), as in RMM.
    pub fn set_stream(&mut self, stream: StreamView) {
        self.stream = stream;
    }

    fn driver(&self) -> &dyn Driver {
        self.mr.driver()
    }

    /// In debug builds, refuses use while another device is current: a resource is only used on
    /// the device it was made for.
    fn check_device(&self) -> MrResult<()> {
        if cfg!(debug_assertions) {
            let now = device_of(&*self.mr)?;
            if now != self.device {
                return Err(MrError::InvalidArgument {
                    resource: self.mr.name(),
                    reason: format!(
                        "a DeviceBuffer of device {} was used while device {} is current; make its device current first",
                        self.device.0, now.0
                    ),
                });
            }
        }
        Ok(())
    }

    fn check_range(&self, offset: usize, len: usize) -> MrResult<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(MrError::InvalidArgument {
                resource: self.mr.name(),
                reason: format!(
                    "{len} bytes at offset {offset} run past the end of a {}-byte buffer",
                    self.size
                ),
            });
        }
        Ok(())
    }

    /// Copies `data` into the buffer at `offset`, ordered on the buffer's stream.
    ///
    /// # Errors
    ///
    /// Out of range; the driver's.
    pub fn copy_from_host(&self, offset: usize, data: &[u8]) -> MrResult<()> {
        self.check_range(offset, data.len())?;
        self.check_device()?;
        if data.is_empty() {
            return Ok(());
        }
        Ok(self
            .driver()
            .memcpy_htod(self.ptr.offset(offset as u64), data, Some(self.stream))?)
    }

    /// Copies `dst.len()` bytes at `offset` to the host, ordered on `stream`; returns once
    /// `dst` holds them.
    ///
    /// # Errors
    ///
    /// Out of range; the driver's.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8], stream: StreamView) -> MrResult<()> {
        self.check_range(offset, dst.len())?;
        self.check_device()?;
        if dst.is_empty() {
            return Ok(());
        }
        Ok(self
            .driver()
            .memcpy_dtoh(dst, self.ptr.offset(offset as u64), Some(stream))?)
    }

    /// The buffer's bytes, copied to the host on `stream`.
    ///
    /// # Errors
    ///
    /// The driver's.
    pub fn to_host(&self, stream: StreamView) -> MrResult<Vec<u8>> {
        let mut out = vec![0; self.size];
        self.copy_to_host(0, &mut out, stream)?;
        Ok(out)
    }

    /// Moves the contents into a new allocation of `capacity` bytes on the buffer's stream.
    /// On failure the buffer is unchanged.
    fn reallocate(&mut self, capacity: usize, keep: usize) -> MrResult<()> {
        self.check_device()?;
        let new = self.mr.allocate(capacity, self.stream)?;
        if keep > 0 {
            if let Err(e) = self
                .driver()
                .memcpy_dtod(new, self.ptr, keep, Some(self.stream))
            {
                let _ = self.mr.deallocate(new, capacity, self.stream);
                return Err(e.into());
            }
        }
        self.mr.deallocate(self.ptr, self.capacity, self.stream)?;
        self.ptr = new;
        self.capacity = capacity;
        Ok(())
    }

    /// Sets the size to `new_size` bytes, keeping the first `min(size, new_size)` bytes; new
    /// bytes are uninitialized. Within the capacity nothing is allocated.
    ///
    /// # Errors
    ///
    /// Out of memory, with the buffer and its contents unchanged.
    ///
    /// # Time complexity
    ///
    /// O(1) within the capacity, else one allocation and one device copy of `size` bytes.
    pub fn resize(&mut self, new_size: usize, stream: StreamView) -> MrResult<()> {
        self.stream = stream;
        if new_size > self.capacity {
            self.reallocate(new_size, self.size)?;
        }
        self.size = new_size;
        Ok(())
    }

    /// Makes the capacity equal the size, reallocating if it is larger.
    ///
    /// # Errors
    ///
    /// Out of memory, with the buffer unchanged.
    pub fn shrink_to_fit(&mut self, stream: StreamView) -> MrResult<()> {
        self.stream = stream;
        if self.capacity > self.size {
            self.reallocate(self.size, self.size)?;
        }
        Ok(())
    }

    /// A copy of the buffer, from the same resource, made on `stream`.
    ///
    /// # Errors
    ///
    /// Out of memory; the driver's.
    pub fn try_clone(&self, stream: StreamView) -> MrResult<Self> {
        self.check_device()?;
        let ptr = self.mr.allocate(self.size, stream)?;
        let copy = DeviceBuffer {
            ptr,
            size: self.size,
            capacity: self.size,
            stream,
            device: self.device,
            mr: Arc::clone(&self.mr),
        };
        if self.size > 0 {
            self.driver()
                .memcpy_dtod(ptr, self.ptr, self.size, Some(stream))?;
        }
        Ok(copy)
    }
}

impl Clone for DeviceBuffer {
    /// Copies the buffer on its stream.
    ///
    /// # Panics
    ///
    /// When the copy cannot be allocated, as `Vec::clone` does; use
    /// [`DeviceBuffer::try_clone`] to get the error instead.
    fn clone(&self) -> Self {
        match self.try_clone(self.stream) {
            Ok(b) => b,
            Err(e) => panic!("DeviceBuffer::clone of {}: {e}", Bytes(self.size as u64)),
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // The allocation is ours: the resource can only refuse it if the resource itself is
        // broken, and a destructor has no one to tell.
        let _ = self.mr.deallocate(self.ptr, self.capacity, self.stream);
    }
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &self.ptr)
            .field("size", &self.size)
            .field("capacity", &self.capacity)
            .field("stream", &self.stream)
            .field("device", &self.device)
            .field("resource", &self.mr.name())
            .finish()
    }
}
