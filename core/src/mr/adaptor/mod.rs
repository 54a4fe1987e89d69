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
