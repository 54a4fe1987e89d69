//! [`LimitingAdaptor`]: a cap on the bytes allocated through it (RMM's
//! `limiting_resource_adaptor`).
//!
//! - **What it does**: refuses, with [`MrError::OutOfMemory`], any allocation that would take
//!   the bytes allocated through it past the limit. Sizes are counted rounded up to
//!   [`MIN_ALIGNMENT`], as RMM counts them, since that is the least the upstream hands out.
//! - **Thread safety**: `Send + Sync` when the upstream is. The count is one atomic, reserved
//!   with a compare-and-swap before the upstream call, so concurrent callers can never push it
//!   past the limit, even for an instant.
//! - **Streams**: passes the stream through; the limit is across all streams.
//! - **Clone and ownership**: owns its upstream by value; not `Clone`. Share it behind an `Arc`.
//! - **Use and cost**: testing out-of-memory paths, keeping one library inside a budget on a
//!   shared device. One compare-and-swap per allocation, one atomic subtraction per free.
//!
//! Rollback: the reservation is released when the upstream fails the allocation; a free is
//! uncounted only after the upstream accepted it, so a refused free changes nothing.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::driver::{DevicePtr, Driver, MemInfo};
use crate::mr::adaptor::{align_up, Request};
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult, MIN_ALIGNMENT};

/// Caps the bytes allocated through it; see the [module docs](self).
pub struct LimitingAdaptor<Up> {
    upstream: Up,
    limit: u64,
    allocated: AtomicU64,
}

impl<Up: DeviceMemoryResource> LimitingAdaptor<Up> {
    /// Allows at most `limit` bytes (counted in multiples of [`MIN_ALIGNMENT`]) to be
    /// allocated through it at once.
    pub fn new(upstream: Up, limit: u64) -> Self {
        LimitingAdaptor {
            upstream,
            limit,
            allocated: AtomicU64::new(0),
        }
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        &self.upstream
    }

    /// Gives back the upstream resource.
    pub fn into_upstream(self) -> Up {
        self.upstream
    }

    /// The limit in bytes.
    pub fn allocation_limit(&self) -> u64 {
        self.limit
    }

    /// Bytes allocated through it now, each allocation rounded up to [`MIN_ALIGNMENT`].
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated.load(Ordering::Acquire)
    }

    /// Bytes that may still be allocated.
    pub fn available_bytes(&self) -> u64 {
        self.limit.saturating_sub(self.allocated_bytes())
    }

    /// Reserves `bytes` (rounded) against the limit and returns the amount reserved.
    ///
    /// # Time complexity
    ///
    /// O(1): one compare-and-swap, retried only under contention.
    #[inline]
    fn reserve(&self, bytes: usize) -> MrResult<u64> {
        let oom = |allocated: u64| MrError::OutOfMemory {
            resource: "LimitingAdaptor",
            requested: bytes as u64,
            available: Some(self.limit.saturating_sub(allocated)),
        };
        let Some(size) = align_up(bytes as u64, MIN_ALIGNMENT as u64) else {
            return Err(oom(self.allocated_bytes()));
        };
        self.allocated
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |allocated| {
                allocated.checked_add(size).filter(|&n| n <= self.limit)
            })
            .map(|_| size)
            .map_err(oom)
    }
}

impl<Up: DeviceMemoryResource> super::Adaptor for LimitingAdaptor<Up> {
    type Upstream = Up;

    fn upstream(&self) -> &Up {
        &self.upstream
    }

    fn name(&self) -> &'static str {
        "LimitingAdaptor"
    }

    /// # Time complexity
    ///
    /// O(1) besides the upstream.
    #[inline]
    fn allocate_request(&self, request: Request) -> MrResult<DevicePtr> {
        let size = self.reserve(request.bytes)?;
        request.allocate_from(&self.upstream).inspect_err(|_| {
            self.allocated.fetch_sub(size, Ordering::AcqRel);
        })
    }

    #[inline]
    fn deallocate_request(&self, ptr: DevicePtr, request: Request) -> MrResult<()> {
        request.deallocate_to(&self.upstream, ptr)?;
        // Saturating: a wrong size the upstream cannot detect must not wrap the count and
        // refuse every later allocation.
        let size = align_up(request.bytes as u64, MIN_ALIGNMENT as u64).unwrap_or(u64::MAX);
        let _ = self
            .allocated
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| {
                Some(a.saturating_sub(size))
            });
        Ok(())
    }

    /// The limit as total and what is left of it as free, each capped by what the upstream
    /// reports when it can tell.
    fn memory_info(&self) -> Option<MemInfo> {
        let own = MemInfo {
            free: self.available_bytes(),
            total: self.limit,
        };
        Some(match self.upstream.memory_info() {
            Some(up) => MemInfo {
                free: own.free.min(up.free),
                total: own.total.min(up.total),
            },
            None => own,
        })
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<LimitingAdaptor<crate::mr::CudaResource<D>>>();
    }
};
