//! Host memory of the contract: [`MappedMemory`] (host memory with a device address),
//! [`PinnedMemory`] (page-locked host memory) and [`HostMemory`], what `memhostalloc` and
//! `mempin` return.
//!
//! NBEP 7: "Returns a `MappedMemory` or `PinnedMemory` instance that owns the
//! allocated memory, depending on whether the region was mapped into device memory." Both
//! share the buffer model of [`MemoryPointer`]: clones and views keep the owner alive and the
//! finalizer runs once, with the last of them.

use std::fmt;
use std::ops::RangeBounds;

use crate::contract::error::EmmResult;
use crate::contract::finalizer::Finalizer;
use crate::contract::pointer::{span_accessors, BufferParts, MemoryPointer, PinOwner, Span};
use crate::driver::{ContextId, DevicePtr, HostPtr};

/// Host memory mapped into the device address space: a host pointer and a device pointer to
/// the same bytes (Numba's `MappedMemory`, a kind of `MemoryPointer`).
#[derive(Clone)]
pub struct MappedMemory {
    span: Span,
}

impl MappedMemory {
    /// Mapped memory of `size` bytes at `host` (seen by the device at `device`). `pin_owner`
    /// is kept alive with it (the `owner` given to `mempin`; `None` for `memhostalloc`).
    pub fn new(
        context: ContextId,
        host: HostPtr,
        device: DevicePtr,
        size: usize,
        pin_owner: Option<PinOwner>,
        finalizer: Option<Finalizer>,
    ) -> Self {
        MappedMemory {
            span: Span::new(BufferParts {
                context,
                device,
                host,
                size,
                pin_owner,
                finalizer,
            }),
        }
    }

    // The host and the device address of the same bytes.
    span_accessors!(host_ptr, device_ptr, pin_owner);

    /// A view of `range`, keeping the owner alive; both addresses move by `range.start`.
    ///
    /// # Errors
    ///
    /// [`crate::contract::EmmError::InvalidArgument`] when the range is not inside it.
    pub fn view(&self, range: impl RangeBounds<usize>) -> EmmResult<MappedMemory> {
        Ok(MappedMemory {
            span: self.span.view(range, "MappedMemory::view")?,
        })
    }

    /// The device side as a [`MemoryPointer`] sharing this owner (a `MappedMemory` is a
    /// `MemoryPointer` in Numba).
    pub fn as_memory_pointer(&self) -> MemoryPointer {
        MemoryPointer::from_span(self.span.clone())
    }
}

impl fmt::Debug for MappedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedMemory")
            .field("host", &self.host_ptr())
            .field("device", &self.device_ptr())
            .field("size", &self.size())
            .finish()
    }
}

/// Page-locked host memory that is not mapped into the device (Numba's `PinnedMemory`).
#[derive(Clone)]
pub struct PinnedMemory {
    span: Span,
}

impl PinnedMemory {
    /// Pinned memory of `size` bytes at `host`; `pin_owner` is kept alive with it.
    pub fn new(
        context: ContextId,
        host: HostPtr,
        size: usize,
        pin_owner: Option<PinOwner>,
        finalizer: Option<Finalizer>,
    ) -> Self {
        PinnedMemory {
            span: Span::new(BufferParts {
                context,
                device: DevicePtr::NULL,
                host,
                size,
                pin_owner,
                finalizer,
            }),
        }
    }

    span_accessors!(host_ptr, pin_owner);

    /// A view of `range`, keeping the owner alive.
    ///
    /// # Errors
    ///
    /// [`crate::contract::EmmError::InvalidArgument`] when the range is not inside it.
    pub fn view(&self, range: impl RangeBounds<usize>) -> EmmResult<PinnedMemory> {
        Ok(PinnedMemory {
            span: self.span.view(range, "PinnedMemory::view")?,
        })
    }
}

impl fmt::Debug for PinnedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedMemory")
            .field("host", &self.host_ptr())
            .field("size", &self.size())
            .finish()
    }
}

/// What `memhostalloc` and `mempin` return: mapped or only pinned, as asked.
#[derive(Debug, Clone)]
pub enum HostMemory {
    /// Mapped into the device address space (`mapped = true`).
    Mapped(MappedMemory),
    /// Pinned only (`mapped = false`).
    Pinned(PinnedMemory),
}

impl HostMemory {
    /// The host address.
    pub fn host_ptr(&self) -> HostPtr {
        match self {
            HostMemory::Mapped(m) => m.host_ptr(),
            HostMemory::Pinned(p) => p.host_ptr(),
        }
    }
    /// The device address, for mapped memory.
    pub fn device_ptr(&self) -> Option<DevicePtr> {
        match self {
            HostMemory::Mapped(m) => Some(m.device_ptr()),
            HostMemory::Pinned(_) => None,
        }
    }
    /// Size in bytes.
    pub fn size(&self) -> usize {
        match self {
            HostMemory::Mapped(m) => m.size(),
            HostMemory::Pinned(p) => p.size(),
        }
    }
    /// Whether it is mapped into the device address space.
    pub fn is_mapped(&self) -> bool {
        matches!(self, HostMemory::Mapped(_))
    }
    /// The mapped memory, if it is mapped.
    pub fn into_mapped(self) -> Option<MappedMemory> {
        match self {
            HostMemory::Mapped(m) => Some(m),
            HostMemory::Pinned(_) => None,
        }
    }
    /// The pinned memory, if it is not mapped.
    pub fn into_pinned(self) -> Option<PinnedMemory> {
        match self {
            HostMemory::Pinned(p) => Some(p),
            HostMemory::Mapped(_) => None,
        }
    }
}
