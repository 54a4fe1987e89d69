//! [`DeviceVec`]: a typed, uninitialized device array (RMM's `device_uvector`).

use std::marker::PhantomData;
use std::sync::Arc;

use bytemuck::Pod;

use crate::containers::{DeviceBuffer, StreamView};
use crate::driver::DevicePtr;
use crate::mr::{DeviceMemoryResource, MrError, MrResult};

/// A typed array in device memory. Elements start uninitialized: there is no implicit fill,
/// which is why RMM added `device_uvector` beside `device_vector`. Element access goes through
/// the stream (each `get`/`set` is a copy), so keep bulk work on the device.
///
/// `T` is [`Pod`]: any bit pattern is a valid value, so bytes copied back from the device are
/// always a `T`.
pub struct DeviceVec<T: Pod> {
    buf: DeviceBuffer,
    len: usize,
    _t: PhantomData<T>,
}

fn elem_bytes<T>(n: usize) -> MrResult<usize> {
    n.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| MrError::InvalidArgument {
            resource: "DeviceVec",
            reason: format!(
                "{n} elements of {} bytes overflow the address space",
                std::mem::size_of::<T>()
            ),
        })
}

impl<T: Pod> DeviceVec<T> {
    /// `len` uninitialized elements from `mr`.
    ///
    /// # Errors
    ///
    /// Out of memory.
    pub fn new_in(
        len: usize,
        stream: StreamView,
        mr: Arc<dyn DeviceMemoryResource>,
    ) -> MrResult<Self> {
        let buf = DeviceBuffer::new_in(elem_bytes::<T>(len)?, stream, mr)?;
        Ok(DeviceVec {
            buf,
            len,
            _t: PhantomData,
        })
    }

    /// An empty vector with room for `capacity` elements, from `mr`.
    ///
    /// # Errors
    ///
    /// Out of memory.
    pub fn with_capacity_in(
        capacity: usize,
        stream: StreamView,
        mr: Arc<dyn DeviceMemoryResource>,
    ) -> MrResult<Self> {
        let mut v = Self::new_in(capacity, stream, mr)?;
        v.len = 0;
        Ok(v)
    }

    /// `len` uninitialized elements from the current resource of the current device.
    ///
    /// # Errors
    ///
    /// No current resource; out of memory.
    pub fn new(len: usize, stream: StreamView) -> MrResult<Self> {
        let buf = DeviceBuffer::new(elem_bytes::<T>(len)?, stream)?;
        Ok(DeviceVec {
            buf,
            len,
            _t: PhantomData,
        })
    }

    /// A copy of `data` in device memory from `mr`.
    ///
    /// # Errors
    ///
    /// Out of memory; the driver's.
    pub fn from_slice_in(
        data: &[T],
        stream: StreamView,
        mr: Arc<dyn DeviceMemoryResource>,
    ) -> MrResult<Self> {
        let buf = DeviceBuffer::from_host_in(bytemuck::cast_slice(data), stream, mr)?;
        Ok(DeviceVec {
            buf,
            len: data.len(),
            _t: PhantomData,
        })
    }

    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements that fit without reallocating.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.buf.capacity() / std::mem::size_of::<T>().max(1)
    }

    /// The device address of element 0.
    #[inline]
    pub fn ptr(&self) -> DevicePtr {
        self.buf.ptr()
    }

    /// The stream the vector is ordered on.
    #[inline]
    pub fn stream(&self) -> StreamView {
        self.buf.stream()
    }

    fn check(&self, i: usize) -> MrResult<usize> {
        if i >= self.len {
            return Err(MrError::InvalidArgument {
                resource: "DeviceVec",
                reason: format!(
                    "index {i} is out of bounds for a DeviceVec of length {}",
                    self.len
                ),
            });
        }
        elem_bytes::<T>(i)
    }

    /// Element `i`, copied to the host on `stream`.
    ///
    /// # Errors
    ///
    /// Index out of bounds; the driver's.
    pub fn get(&self, i: usize, stream: StreamView) -> MrResult<T> {
        let off = self.check(i)?;
        let mut v = T::zeroed();
        self.buf
            .copy_to_host(off, bytemuck::bytes_of_mut(&mut v), stream)?;
        Ok(v)
    }

    /// Sets element `i` to `value`, ordered on the vector's stream.
    ///
    /// # Errors
    ///
    /// Index out of bounds; the driver's.
    pub fn set(&self, i: usize, value: T) -> MrResult<()> {
        let off = self.check(i)?;
        self.buf.copy_from_host(off, bytemuck::bytes_of(&value))
    }

    /// Resizes to `len` elements; new elements are uninitialized.
    ///
    /// # Errors
    ///
    /// Out of memory, with the vector unchanged.
    pub fn resize(&mut self, len: usize, stream: StreamView) -> MrResult<()> {
        self.buf.resize(elem_bytes::<T>(len)?, stream)?;
        self.len = len;
        Ok(())
    }

    /// Appends `value`, doubling the capacity when full.
    ///
    /// # Errors
    ///
    /// Out of memory, with the vector unchanged.
    ///
    /// # Time complexity
    ///
    /// Amortized O(1) copies: one host-to-device copy of one element, plus a reallocation
    /// and device copy when the capacity doubles.
    pub fn push(&mut self, value: T, stream: StreamView) -> MrResult<()> {
        if self.len == self.capacity() {
            let want = (self.capacity() * 2).max(4);
            let keep = elem_bytes::<T>(self.len)?;
            self.buf.resize(elem_bytes::<T>(want)?, stream)?;
            self.buf.resize(keep, stream)?;
        }
        self.buf.resize(elem_bytes::<T>(self.len + 1)?, stream)?;
        self.len += 1;
        self.set(self.len - 1, value)
    }

    /// Removes and returns the last element, read on `stream`.
    ///
    /// # Errors
    ///
    /// The driver's.
    pub fn pop(&mut self, stream: StreamView) -> MrResult<Option<T>> {
        if self.len == 0 {
            return Ok(None);
        }
        let v = self.get(self.len - 1, stream)?;
        self.len -= 1;
        self.buf.resize(elem_bytes::<T>(self.len)?, stream)?;
        Ok(Some(v))
    }

    /// Sets every element to `value`: one `memset` when all bytes of `value` are equal,
    /// otherwise one copy of a host-filled array.
    ///
    /// # Errors
    ///
    /// The driver's.
    pub fn fill(&self, value: T, stream: StreamView) -> MrResult<()> {
        if self.len == 0 {
            return Ok(());
        }
        let bytes = bytemuck::bytes_of(&value);
        let d = self.buf.resource().driver();
        if bytes.iter().all(|b| *b == bytes[0]) {
            return Ok(d.memset_d8(
                self.ptr(),
                bytes[0],
                elem_bytes::<T>(self.len)?,
                Some(stream),
            )?);
        }
        let host = vec![value; self.len];
        Ok(d.memcpy_htod(self.ptr(), bytemuck::cast_slice(&host), Some(stream))?)
    }

    /// All elements, copied to the host on `stream`.
    ///
    /// # Errors
    ///
    /// The driver's.
    pub fn to_vec(&self, stream: StreamView) -> MrResult<Vec<T>> {
        let mut out = vec![T::zeroed(); self.len];
        self.buf
            .copy_to_host(0, bytemuck::cast_slice_mut(&mut out), stream)?;
        Ok(out)
    }

    /// The untyped buffer underneath.
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.buf
    }
}

impl<T: Pod> std::fmt::Debug for DeviceVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceVec")
            .field("len", &self.len)
            .field("buffer", &self.buf)
            .finish()
    }
}
