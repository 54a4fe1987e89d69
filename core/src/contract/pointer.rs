//! [`MemoryPointer`]: device memory with an owner, views and a finalizer that runs exactly once.
//!
//! Every pointer type of the contract ([`MemoryPointer`], `MappedMemory`, `PinnedMemory`,
//! `ManagedMemory`) is a window (`offset`, `size`) onto one shared buffer. The buffer holds the
//! finalizer; cloning a pointer or taking a view adds an owner, and the finalizer runs when the
//! last owner goes — Numba's `own()` and `view()` in Rust form.

use std::any::Any;
use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use crate::contract::error::{EmmError, EmmResult};
use crate::contract::finalizer::{Dealloc, DeallocSink, Finalizer};
use crate::driver::{ContextId, DevicePtr, HostPtr};

/// The object that owns memory passed to `mempin` (Numba's `owner`, e.g. a host array). A
/// pinned pointer keeps it alive for as long as the pin lasts.
pub type PinOwner = Arc<dyn Any + Send + Sync>;

/// The buffer every view shares. Dropping it (with the last owner) runs the finalizer.
pub(crate) struct Buffer {
    context: ContextId,
    device: DevicePtr,
    host: HostPtr,
    size: usize,
    pin_owner: Option<PinOwner>,
    // A Mutex only to make the buffer Sync; it is never locked, only reached by `get_mut`.
    finalizer: Mutex<Option<Finalizer>>,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let slot = self.finalizer.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = slot.take() {
            f.run();
        }
    }
}

/// The addresses of a new buffer.
pub(crate) struct BufferParts {
    pub context: ContextId,
    pub device: DevicePtr,
    pub host: HostPtr,
    pub size: usize,
    pub pin_owner: Option<PinOwner>,
    pub finalizer: Option<Finalizer>,
}

/// Writes, inside the `impl` of a pointer type made of a [`Span`] (a field named `span`), the
/// accessors every such type has: `context`, `size`, `offset` and `owner_count`, then those
/// it names among `device_ptr`, `host_ptr` and `pin_owner` (the addresses and owner its kind
/// of memory has).
macro_rules! span_accessors {
    (@one device_ptr) => {
        /// The device address: the owner's base plus [`offset`](Self::offset).
        pub fn device_ptr(&self) -> $crate::DevicePtr {
            self.span.device()
        }
    };
    (@one host_ptr) => {
        /// The host address: the owner's base plus [`offset`](Self::offset).
        pub fn host_ptr(&self) -> $crate::HostPtr {
            self.span.host()
        }
    };
    (@one pin_owner) => {
        /// The object that owns the pinned memory, when it came from `mempin`.
        pub fn pin_owner(&self) -> Option<&$crate::contract::PinOwner> {
            self.span.pin_owner()
        }
    };
    ($($address:ident),* $(,)?) => {
        /// The context the memory was allocated, pinned or mapped in.
        pub fn context(&self) -> $crate::ContextId {
            self.span.context()
        }
        /// Size in bytes (of the view, for a view).
        pub fn size(&self) -> usize {
            self.span.size()
        }
        /// Bytes from the owner's base to this pointer.
        pub fn offset(&self) -> usize {
            self.span.offset()
        }
        /// How many pointers (clones and views) keep the owner alive, this one included.
        pub fn owner_count(&self) -> usize {
            self.span.owner_count()
        }
        $(span_accessors!(@one $address);)*
    };
}
pub(crate) use span_accessors;

/// A window onto a shared [`Buffer`]: what every pointer type is made of.
#[derive(Clone)]
pub(crate) struct Span {
    buf: Arc<Buffer>,
    offset: usize,
    size: usize,
}

impl Span {
    pub(crate) fn new(p: BufferParts) -> Span {
        let size = p.size;
        Span {
            buf: Arc::new(Buffer {
                context: p.context,
                device: p.device,
                host: p.host,
                size: p.size,
                pin_owner: p.pin_owner,
                finalizer: Mutex::new(p.finalizer),
            }),
            offset: 0,
            size,
        }
    }

    pub(crate) fn context(&self) -> ContextId {
        self.buf.context
    }
    pub(crate) fn device(&self) -> DevicePtr {
        if self.buf.device == DevicePtr::NULL {
            return DevicePtr::NULL;
        }
        self.buf.device.offset(self.offset as u64)
    }
    pub(crate) fn host(&self) -> HostPtr {
        if self.buf.host == HostPtr(0) {
            return HostPtr(0);
        }
        self.buf.host.offset(self.offset as u64)
    }
    pub(crate) fn size(&self) -> usize {
        self.size
    }
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }
    pub(crate) fn pin_owner(&self) -> Option<&PinOwner> {
        self.buf.pin_owner.as_ref()
    }
    pub(crate) fn owner(&self) -> Span {
        Span {
            buf: Arc::clone(&self.buf),
            offset: 0,
            size: self.buf.size,
        }
    }
    pub(crate) fn shares_owner(&self, other: &Span) -> bool {
        Arc::ptr_eq(&self.buf, &other.buf)
    }
    pub(crate) fn owner_count(&self) -> usize {
        Arc::strong_count(&self.buf)
    }

    /// A view of `range` (relative to this span), keeping the owner alive.
    pub(crate) fn view(
        &self,
        range: impl RangeBounds<usize>,
        operation: &'static str,
    ) -> EmmResult<Span> {
        let start = match range.start_bound() {
            Bound::Included(&s) => Some(s),
            Bound::Excluded(&s) => s.checked_add(1),
            Bound::Unbounded => Some(0),
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1),
            Bound::Excluded(&e) => Some(e),
            Bound::Unbounded => Some(self.size),
        };
        match (start, end) {
            (Some(s), Some(e)) if s <= e && e <= self.size => Ok(Span {
                buf: Arc::clone(&self.buf),
                offset: self.offset + s,
                size: e - s,
            }),
            _ => Err(EmmError::invalid(
                operation,
                format!(
                    "range {:?}..{:?} is outside the pointer's {} bytes; give start <= end <= {}",
                    range.start_bound(),
                    range.end_bound(),
                    self.size,
                    self.size
                ),
            )),
        }
    }

    /// The buffer's finalizer, when this is the only owner and the whole buffer.
    pub(crate) fn try_release(self) -> Result<Released, Span> {
        if self.offset != 0 || self.size != self.buf.size {
            return Err(self);
        }
        match Arc::try_unwrap(self.buf) {
            Ok(mut buf) => {
                let finalizer = buf
                    .finalizer
                    .get_mut()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                Ok(Released {
                    context: buf.context,
                    device_ptr: buf.device,
                    host_ptr: buf.host,
                    size: buf.size,
                    finalizer,
                })
            }
            Err(buf) => Err(Span {
                size: buf.size,
                buf,
                offset: 0,
            }),
        }
    }
}

/// A buffer taken apart by its last owner: the addresses and the finalizer that has not run.
/// Whoever holds it is responsible for releasing the memory (usually by running `finalizer`).
#[derive(Debug)]
pub struct Released {
    /// The context the memory was allocated in.
    pub context: ContextId,
    /// The device address (null for pinned host memory that is not mapped).
    pub device_ptr: DevicePtr,
    /// The host address (null for device memory).
    pub host_ptr: HostPtr,
    /// The size in bytes.
    pub size: usize,
    /// The finalizer, not yet run.
    pub finalizer: Option<Finalizer>,
}

/// A pointer to device memory that owns its buffer (Numba's `MemoryPointer`).
///
/// Cloning adds an owner (Numba's `own()`); [`MemoryPointer::view`] returns a sub-slice that
/// also keeps the owner alive and carries its offset (a view of a view adds offsets). The
/// finalizer runs exactly once, when the last owner — clone or view — is dropped.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use emm_core::contract::{Finalizer, MemoryPointer};
/// use emm_core::{ContextId, DevicePtr};
///
/// let runs = Arc::new(AtomicUsize::new(0));
/// let r = Arc::clone(&runs);
/// let ptr = MemoryPointer::new(ContextId(1), DevicePtr(0x1000), 40,
///     Some(Finalizer::new(move || { r.fetch_add(1, Ordering::SeqCst); })));
/// let view = ptr.view(8..)?.view(4..12)?;
/// assert_eq!(view.device_ptr(), DevicePtr(0x100c));
/// drop(ptr);
/// assert_eq!(runs.load(Ordering::SeqCst), 0, "the view keeps the owner alive");
/// drop(view);
/// assert_eq!(runs.load(Ordering::SeqCst), 1);
/// # Ok::<(), emm_core::contract::EmmError>(())
/// ```
#[derive(Clone)]
pub struct MemoryPointer {
    span: Span,
}

impl MemoryPointer {
    /// A pointer owning `size` bytes at `ptr` in `context`; `finalizer` runs when the last
    /// owner goes.
    pub fn new(
        context: ContextId,
        ptr: DevicePtr,
        size: usize,
        finalizer: Option<Finalizer>,
    ) -> Self {
        MemoryPointer {
            span: Span::new(BufferParts {
                context,
                device: ptr,
                host: HostPtr(0),
                size,
                pin_owner: None,
                finalizer,
            }),
        }
    }

    pub(crate) fn from_span(span: Span) -> Self {
        MemoryPointer { span }
    }

    span_accessors!(device_ptr);

    /// The owner: the whole buffer this pointer is a view of (itself, when it is not a view).
    pub fn owner(&self) -> MemoryPointer {
        MemoryPointer {
            span: self.span.owner(),
        }
    }

    /// Whether `self` and `other` share one owner (one buffer, one finalizer).
    pub fn shares_owner(&self, other: &MemoryPointer) -> bool {
        self.span.shares_owner(&other.span)
    }

    /// A view of `range` of this pointer: `view(16..)`, `view(16..32)`. It keeps the owner
    /// alive, and its offset is this pointer's plus `range.start`.
    ///
    /// # Errors
    ///
    /// [`EmmError::InvalidArgument`] when the range is not inside this pointer.
    pub fn view(&self, range: impl RangeBounds<usize>) -> EmmResult<MemoryPointer> {
        Ok(MemoryPointer {
            span: self.span.view(range, "MemoryPointer::view")?,
        })
    }

    /// Takes the buffer apart without running its finalizer, when this is its last owner and
    /// not a view; otherwise gives the pointer back. Managers use it to release memory another
    /// way (e.g. free it on a stream).
    ///
    /// # Errors
    ///
    /// `Err(self)` when other owners are alive or this is a view.
    pub fn try_release(self) -> Result<Released, MemoryPointer> {
        self.span.try_release().map_err(MemoryPointer::from_span)
    }

    /// Takes the pointer apart for the `memfree_async` of the manager `owner`, whose
    /// deallocations go to `sink`: `Some(item)` (a [`Dealloc::DeviceAsync`]) for stream-ordered
    /// memory that manager allocated (the caller frees it on the new stream, and hands `item`
    /// back to `sink` if that fails). Memory from `memalloc` is handed to its usual path (its
    /// free synchronizes, so it is ordered after the stream's work) and gives `None`.
    ///
    /// # Errors
    ///
    /// [`EmmError::InvalidArgument`] for a view or a pointer with other owners (nothing is
    /// freed), one without a finalizer, and one another manager allocated (its own finalizer
    /// releases it).
    pub(crate) fn release_async(
        self,
        sink: &Arc<dyn DeallocSink>,
        owner: &str,
    ) -> EmmResult<Option<Dealloc>> {
        let released = self.try_release().map_err(|m| {
            let (owners, offset) = (m.owner_count(), m.offset());
            drop(m);
            EmmError::invalid(
                "memfree_async",
                format!(
                    "the pointer is a view (offset {offset}) or other owners are alive \
                     ({owners} in all); free the whole allocation through its last owner (it \
                     is freed as usual when the last owner is dropped)"
                ),
            )
        })?;
        let Some(finalizer) = released.finalizer else {
            return Err(EmmError::invalid(
                "memfree_async",
                "the pointer has no finalizer, so no manager owns it; nothing was freed",
            ));
        };
        if !finalizer.targets(sink) {
            finalizer.run();
            return Err(EmmError::invalid(
                "memfree_async",
                format!(
                    "the pointer was not allocated by {owner}; it was released by its own \
                     finalizer instead"
                ),
            ));
        }
        match finalizer.into_enqueued() {
            Ok((_, item @ Dealloc::DeviceAsync { .. })) => Ok(Some(item)),
            Ok((sink, item)) => {
                sink.add(item);
                Ok(None)
            }
            Err(user) => {
                user.run();
                Ok(None)
            }
        }
    }
}

impl fmt::Debug for MemoryPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryPointer")
            .field("context", &self.context())
            .field("ptr", &self.device_ptr())
            .field("size", &self.size())
            .field("offset", &self.offset())
            .finish()
    }
}
