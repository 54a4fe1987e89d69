//! Resource adaptors: each wraps an upstream resource, taken by value, and adds one behaviour
//! (RMM's `*_resource_adaptor`s).
//!
//! Modules, one adaptor per file:
//! - [`aligned`]: [`AlignedAdaptor`], any power-of-two alignment above 256 by over-allocating.
//! - [`failure_retry`]: [`FailureRetryAdaptor`], a callback decides whether to retry after
//!   out of memory.
//! - [`limiting`]: [`LimitingAdaptor`], a cap on the bytes allocated through it.
//! - [`logging`]: [`LoggingAdaptor`], RMM's CSV event log, the input of replay.
//! - [`prefetch`]: [`PrefetchAdaptor`], prefetches managed memory to the device on allocate.
//! - [`statistics`]: [`StatisticsAdaptor`], current, peak and total bytes and counts, nestable.
//! - [`thread_safe`]: [`ThreadSafeAdaptor`], a mutex around a single-threaded
//!   [`LocalMemoryResource`](crate::mr::LocalMemoryResource).
//! - [`tracking`]: [`TrackingAdaptor`], outstanding allocations, backtraces, leak report,
//!   wrong-size frees.
//!
//! # What every adaptor keeps
//!
//! - It exposes its upstream through `fn upstream(&self) -> &Up` and gives it back with
//!   `into_upstream`.
//! - It implements [`Adaptor`], which forwards every call it does not change to the upstream
//!   ([`ThreadSafeAdaptor`], whose upstream is a single-threaded resource, writes its calls out).
//! - The rules of [`crate::mr`] hold through it: `allocate(0)` returns [`DevicePtr::NULL`]
//!   without touching the upstream, counting or logging anything, and
//!   `deallocate(DevicePtr::NULL, 0, _)` is a no-op; alignment requests go to the upstream
//!   (only [`AlignedAdaptor`] raises what is supported); out of memory stays
//!   [`MrError::OutOfMemory`](crate::mr::MrError::OutOfMemory).
//! - **Rollback**: a counter or table an adaptor changed for a call is restored when the
//!   upstream fails that call, so a failed call changes nothing.
//! - `is_equal` is true only for the same adaptor object: the state an adaptor keeps (limits,
//!   tables, counters) belongs to that object.
//!
//! [`DevicePtr::NULL`]: crate::DevicePtr::NULL

pub mod aligned;
pub mod failure_retry;
pub mod limiting;
pub mod logging;
pub mod prefetch;
pub mod statistics;
pub mod thread_safe;
pub mod tracking;

pub use aligned::AlignedAdaptor;
pub use failure_retry::{FailureRetryAdaptor, RetryRequest};
pub use limiting::LimitingAdaptor;
pub use logging::{LogHealth, LoggingAdaptor};
pub use prefetch::PrefetchAdaptor;
pub use statistics::{Counter, Counters, StatisticsAdaptor};
pub use thread_safe::ThreadSafeAdaptor;
pub use tracking::{LeakReport, OutstandingAllocation, TrackingAdaptor};

use std::sync::{Mutex, MutexGuard};

use crate::driver::{DevicePtr, Driver, MemInfo, StreamId};
use crate::mr::{check_alignment, DeviceMemoryResource, MrResult, MIN_ALIGNMENT};

/// One allocation or free as it reaches an adaptor: the plain call (`alignment` is `None`) or
/// the aligned one, so that an adaptor writes its behaviour once for both and still hands the
/// upstream the call it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The size asked for.
    pub bytes: usize,
    /// The alignment of an aligned call; `None` for the plain call.
    pub alignment: Option<usize>,
    /// The stream the memory is allocated or freed on.
    pub stream: StreamId,
}

impl Request {
    /// The alignment the memory has at least: the one asked for, and never below
    /// [`MIN_ALIGNMENT`].
    #[inline]
    pub fn effective_alignment(&self) -> usize {
        self.alignment.unwrap_or(MIN_ALIGNMENT).max(MIN_ALIGNMENT)
    }

    /// Allocates from `upstream` with the call this request came as.
    ///
    /// # Errors
    ///
    /// The upstream's.
    #[inline]
    pub fn allocate_from<R: DeviceMemoryResource + ?Sized>(
        &self,
        upstream: &R,
    ) -> MrResult<DevicePtr> {
        match self.alignment {
            None => upstream.allocate(self.bytes, self.stream),
            Some(alignment) => upstream.allocate_aligned(self.bytes, alignment, self.stream),
        }
    }

    /// Frees `ptr` to `upstream` with the call this request came as.
    ///
    /// # Errors
    ///
    /// The upstream's.
    #[inline]
    pub fn deallocate_to<R: DeviceMemoryResource + ?Sized>(
        &self,
        upstream: &R,
        ptr: DevicePtr,
    ) -> MrResult<()> {
        match self.alignment {
            None => upstream.deallocate(ptr, self.bytes, self.stream),
            Some(alignment) => upstream.deallocate_aligned(ptr, self.bytes, alignment, self.stream),
        }
    }
}

/// The base of an adaptor over a [`DeviceMemoryResource`]: every call it does not change goes
/// to its upstream unchanged, so an adaptor writes only what it adds.
///
/// Implementing it makes the adaptor a [`DeviceMemoryResource`] (by the blanket impl below).
/// The defaults keep [`crate::mr`]'s rules for adaptors: `allocate(0)` and the free of
/// `(DevicePtr::NULL, 0)` never reach the adaptor's own code; every other allocation and free,
/// plain or aligned, reaches [`Adaptor::allocate_request`] and [`Adaptor::deallocate_request`]
/// as one [`Request`], which by default go to the upstream unchanged, as do `memory_info`,
/// `release`, `held` and `driver`; `is_equal` is true only for the same adaptor
/// object (its state belongs to it); `driver_backed` is false (an adaptor counts, limits or logs
/// on the way); `chunk_moves` is not counted (`None`).
///
/// Name the trait by path in the `impl` header (`impl super::Adaptor for …`) rather than
/// importing it where adaptors are called: its methods share their names with
/// [`DeviceMemoryResource`]'s, and a call on an adaptor with both traits in scope is ambiguous.
pub trait Adaptor: Send + Sync {
    /// The resource this adaptor wraps.
    type Upstream: DeviceMemoryResource;

    /// Whether the adaptor honours any power-of-two alignment itself, rather than pass
    /// alignments to its upstream to judge: then an aligned call checks the alignment here, an
    /// aligned call of 0 bytes returns [`DevicePtr::NULL`] without reaching the upstream, and
    /// every other aligned call reaches [`Adaptor::allocate_request`] and
    /// [`Adaptor::deallocate_request`] for the adaptor to align. False by default.
    const HONOURS_ANY_ALIGNMENT: bool = false;

    /// The resource this adaptor wraps.
    fn upstream(&self) -> &Self::Upstream;

    /// As [`DeviceMemoryResource::name`]: the adaptor's own name.
    fn name(&self) -> &'static str;

    /// What the adaptor does with an allocation of at least one byte: by default, only the
    /// upstream's. An adaptor that counts, limits, logs or retries overrides this one method
    /// and reaches its upstream through [`Request::allocate_from`], so the plain and the aligned
    /// call share its code.
    ///
    /// # Errors
    ///
    /// The upstream's, by default.
    #[inline]
    fn allocate_request(&self, request: Request) -> MrResult<DevicePtr> {
        request.allocate_from(self.upstream())
    }

    /// What the adaptor does with a free other than the no-op `(DevicePtr::NULL, 0)`: by
    /// default, only the upstream's. The counterpart of [`Adaptor::allocate_request`], reaching
    /// the upstream through [`Request::deallocate_to`].
    ///
    /// # Errors
    ///
    /// The upstream's, by default.
    #[inline]
    fn deallocate_request(&self, ptr: DevicePtr, request: Request) -> MrResult<()> {
        request.deallocate_to(self.upstream(), ptr)
    }

    /// As [`DeviceMemoryResource::allocate`]: `allocate(0)` is [`DevicePtr::NULL`] without
    /// touching the upstream; any other size goes to [`Adaptor::allocate_request`].
    ///
    /// # Errors
    ///
    /// Those of [`Adaptor::allocate_request`].
    #[inline]
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        self.allocate_request(Request {
            bytes,
            alignment: None,
            stream,
        })
    }

    /// As [`DeviceMemoryResource::deallocate`]: `(DevicePtr::NULL, 0)` is a no-op; any other
    /// free goes to [`Adaptor::deallocate_request`].
    ///
    /// # Errors
    ///
    /// Those of [`Adaptor::deallocate_request`].
    #[inline]
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        self.deallocate_request(
            ptr,
            Request {
                bytes,
                alignment: None,
                stream,
            },
        )
    }

    /// As [`DeviceMemoryResource::allocate_aligned`]: 0 bytes go to the upstream unchanged (it
    /// judges the alignment and counts nothing); any other size goes to
    /// [`Adaptor::allocate_request`]. With [`Adaptor::HONOURS_ANY_ALIGNMENT`], the alignment is
    /// checked first and 0 bytes are [`DevicePtr::NULL`].
    ///
    /// # Errors
    ///
    /// Those of [`Adaptor::allocate_request`]; with [`Adaptor::HONOURS_ANY_ALIGNMENT`],
    /// [`MrError::InvalidArgument`](crate::mr::MrError::InvalidArgument) for an alignment that
    /// is not a power of two.
    #[inline]
    fn allocate_aligned(
        &self,
        bytes: usize,
        alignment: usize,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        if Self::HONOURS_ANY_ALIGNMENT {
            check_alignment(self.name(), bytes, alignment, usize::MAX)?;
            if bytes == 0 {
                return Ok(DevicePtr::NULL);
            }
        } else if bytes == 0 {
            return self.upstream().allocate_aligned(0, alignment, stream);
        }
        self.allocate_request(Request {
            bytes,
            alignment: Some(alignment),
            stream,
        })
    }

    /// As [`DeviceMemoryResource::deallocate_aligned`]: `(DevicePtr::NULL, 0)` is a no-op; any
    /// other free goes to [`Adaptor::deallocate_request`]. With
    /// [`Adaptor::HONOURS_ANY_ALIGNMENT`], the alignment is checked first.
    ///
    /// # Errors
    ///
    /// Those of [`Adaptor::deallocate_request`], and as [`Adaptor::allocate_aligned`] for the
    /// alignment.
    #[inline]
    fn deallocate_aligned(
        &self,
        ptr: DevicePtr,
        bytes: usize,
        alignment: usize,
        stream: StreamId,
    ) -> MrResult<()> {
        if Self::HONOURS_ANY_ALIGNMENT {
            check_alignment(self.name(), bytes, alignment, usize::MAX)?;
        }
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        self.deallocate_request(
            ptr,
            Request {
                bytes,
                alignment: Some(alignment),
                stream,
            },
        )
    }

    /// As [`DeviceMemoryResource::is_equal`]: by default, only the same adaptor object.
    fn is_equal(&self, other: &dyn DeviceMemoryResource) -> bool {
        std::ptr::addr_eq(
            self as *const Self,
            other as *const dyn DeviceMemoryResource,
        )
    }

    /// As [`DeviceMemoryResource::memory_info`]: the upstream's, by default.
    fn memory_info(&self) -> Option<MemInfo> {
        self.upstream().memory_info()
    }

    /// As [`DeviceMemoryResource::release`]: the upstream's, by default.
    ///
    /// # Errors
    ///
    /// The upstream's.
    fn release(&self) -> MrResult<u64> {
        self.upstream().release()
    }

    /// As [`DeviceMemoryResource::driver`]: the upstream's, by default.
    fn driver(&self) -> &dyn Driver {
        self.upstream().driver()
    }

    /// As [`DeviceMemoryResource::driver_backed`]: false by default, since an adaptor adds
    /// something on the way.
    fn driver_backed(&self) -> bool {
        false
    }

    /// As [`DeviceMemoryResource::chunk_moves`]: not counted (`None`) by default.
    fn chunk_moves(&self) -> Option<u64> {
        None
    }

    /// As [`DeviceMemoryResource::held`]: the upstream's, by default.
    fn held(&self) -> Option<u64> {
        self.upstream().held()
    }
}

impl<A: Adaptor> DeviceMemoryResource for A {
    forward_resource_methods!(A: Adaptor, |this| this);
}

/// Locks `m`, recovering the data if a thread panicked while holding it: every adaptor's
/// tables stay consistent at each unlock, so a panic elsewhere never corrupts them.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `n` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
#[inline]
pub(crate) fn align_up(n: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    Some(n.checked_add(align - 1)? & !(align - 1))
}

#[cfg(test)]
mod tests {
    use super::align_up;

    #[test]
    fn align_up_rounds_and_refuses_overflow() {
        assert_eq!(align_up(0, 256), Some(0));
        assert_eq!(align_up(1, 256), Some(256));
        assert_eq!(align_up(256, 256), Some(256));
        assert_eq!(align_up(257, 256), Some(512));
        assert_eq!(align_up(u64::MAX, 256), None);
    }
}
