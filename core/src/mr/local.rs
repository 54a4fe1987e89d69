//! [`LocalMemoryResource`]: a resource used from one thread at a time, with `&mut self`
//! methods; [`ThreadSafeAdaptor`](crate::mr::adaptor::ThreadSafeAdaptor) makes it a
//! [`DeviceMemoryResource`](crate::mr::DeviceMemoryResource).
//!
//! RMM's resources are all called through `const` methods and are thread safe or not by
//! convention, with `thread_safe_resource_adaptor` wrapped around those that are not; nothing
//! stops a caller sharing an unsafe one. Here the type system keeps the two apart: a resource
//! written for one thread implements this trait, whose methods take `&mut self`, so it needs
//! no locks or atomics inside and cannot be shared by mistake; the only way to share it is
//! `ThreadSafeAdaptor`, which owns it behind a mutex.

use std::sync::Arc;

use crate::driver::{DevicePtr, Driver, MemInfo, StreamId};
use crate::mr::{check_alignment, MrResult, MIN_ALIGNMENT};

/// Stream-ordered device memory from a resource used by one thread at a time. The rules of
/// [`crate::mr`] (alignment, zero bytes, out of memory, bad frees) are the same as for
/// [`DeviceMemoryResource`](crate::mr::DeviceMemoryResource).
pub trait LocalMemoryResource: Send {
    /// A short name for messages and logs.
    fn name(&self) -> &'static str;

    /// `bytes` of device memory, [`MIN_ALIGNMENT`]-aligned, usable on `stream` at once.
    ///
    /// # Errors
    ///
    /// [`MrError::OutOfMemory`](crate::mr::MrError::OutOfMemory) when it cannot be had.
    fn allocate(&mut self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr>;

    /// Returns `ptr` of `bytes` on `stream`.
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidFree`](crate::mr::MrError::InvalidFree) for a pointer it did not hand
    /// out; nothing is changed.
    fn deallocate(&mut self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()>;

    /// `bytes` aligned to `alignment` (a power of two).
    ///
    /// # Errors
    ///
    /// [`MrError::UnsupportedAlignment`](crate::mr::MrError::UnsupportedAlignment) above what
    /// the resource can honour.
    fn allocate_aligned(
        &mut self,
        bytes: usize,
        alignment: usize,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        check_alignment(self.name(), bytes, alignment, MIN_ALIGNMENT)?;
        self.allocate(bytes, stream)
    }

    /// Frees memory from [`LocalMemoryResource::allocate_aligned`].
    ///
    /// # Errors
    ///
    /// As [`LocalMemoryResource::deallocate`].
    fn deallocate_aligned(
        &mut self,
        ptr: DevicePtr,
        bytes: usize,
        _alignment: usize,
        stream: StreamId,
    ) -> MrResult<()> {
        self.deallocate(ptr, bytes, stream)
    }

    /// Free and total memory as this resource sees them, if it can tell.
    fn memory_info(&self) -> Option<MemInfo> {
        None
    }

    /// The driver this resource's memory comes from, shared: the adaptor that owns the
    /// resource behind a lock keeps its own handle, to answer `driver()` without locking.
    fn shared_driver(&self) -> Arc<dyn Driver>;
}
