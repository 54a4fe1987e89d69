//! [`ManagedMemory`]: unified memory from `memallocmanaged`, one address valid on the host and
//! every device.
//!
//! Numba's base class omits `memallocmanaged`, but Numba's context calls it
//! (numba#6328); emm makes it part of the contract, with a default that says it is
//! unsupported.

use std::fmt;
use std::ops::RangeBounds;

use crate::contract::error::EmmResult;
use crate::contract::finalizer::Finalizer;
use crate::contract::pointer::{BufferParts, MemoryPointer, Span};
use crate::driver::{ContextId, DevicePtr, HostPtr};

/// Managed (unified) memory: clones and views keep the owner alive; the finalizer runs once.
#[derive(Clone)]
pub struct ManagedMemory {
    span: Span,
}

impl ManagedMemory {
    /// Managed memory of `size` bytes at `ptr`.
    pub fn new(
        context: ContextId,
        ptr: DevicePtr,
        size: usize,
        finalizer: Option<Finalizer>,
    ) -> Self {
        ManagedMemory {
            span: Span::new(BufferParts {
                context,
                device: ptr,
                host: ptr.as_host(),
                size,
                pin_owner: None,
                finalizer,
            }),
        }
    }

    /// The context it was allocated in.
    pub fn context(&self) -> ContextId {
        self.span.context()
    }
    /// The address, as the device sees it.
    pub fn device_ptr(&self) -> DevicePtr {
        self.span.device()
    }
    /// The same address, as the host sees it.
    pub fn host_ptr(&self) -> HostPtr {
        self.span.host()
    }
    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.span.size()
    }
    /// Bytes from the owner's base to this pointer.
    pub fn offset(&self) -> usize {
        self.span.offset()
    }
    /// How many pointers keep the buffer alive, this one included.
    pub fn owner_count(&self) -> usize {
        self.span.owner_count()
    }

    /// A view of `range`, keeping the owner alive.
    ///
    /// # Errors
    ///
    /// [`crate::contract::EmmError::InvalidArgument`] when the range is not inside it.
    pub fn view(&self, range: impl RangeBounds<usize>) -> EmmResult<ManagedMemory> {
        Ok(ManagedMemory {
            span: self.span.view(range, "ManagedMemory::view")?,
        })
    }

    /// The same memory as a [`MemoryPointer`] sharing this owner.
    pub fn as_memory_pointer(&self) -> MemoryPointer {
        MemoryPointer::from_span(self.span.clone())
    }
}

impl fmt::Debug for ManagedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedMemory")
            .field("ptr", &self.device_ptr())
            .field("size", &self.size())
            .finish()
    }
}
