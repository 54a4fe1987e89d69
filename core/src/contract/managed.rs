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
use crate::contract::pointer::{span_accessors, BufferParts, MemoryPointer, Span};
use crate::driver::{ContextId, DevicePtr};

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

    // One address, valid on the host and on every device.
    span_accessors!(device_ptr, host_ptr);

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
