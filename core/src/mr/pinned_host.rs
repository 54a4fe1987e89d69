//! [`PinnedHostResource`]: page-locked host memory from the driver (`cuMemHostAlloc`).
//!
//! - **What it does**: one `cuMemHostAlloc` per request with the configured flags (mapped,
//!   portable, write-combined), one `cuMemFreeHost` per release. Pinned memory makes
//!   host-to-device copies asynchronous and about twice as fast as from pageable memory.
//! - **Thread safety**: `Send + Sync`; the driver serialises what it must.
//! - **Streams**: none: host memory is not stream-ordered. Free it only after the copies that
//!   use it are complete (synchronize their stream first).
//! - **Clone and ownership**: holds the driver through an `Arc`; clones share it.
//! - **Use and cost**: RMM's `pinned_host_memory_resource`, the staging buffers of
//!   asynchronous copies and the EMM contract's `memhostalloc`. Pinning is slow (≈ 32 µs plus
//!   ≈ 0.6 ms per MiB on an H100 host) and takes memory from the OS: allocate staging buffers
//!   once and reuse them.

use std::sync::Arc;

use crate::attribution::CallerScope;
use crate::driver::{Driver, HostAllocFlags, HostPtr};
use crate::error::CudaCode;
use crate::mr::{HostMemoryResource, MrError, MrResult};

const NAME: &str = "PinnedHostResource";

/// Pinned host memory from `cuMemHostAlloc`, returned with `cuMemFreeHost`.
pub struct PinnedHostResource<D: Driver> {
    driver: Arc<D>,
    flags: HostAllocFlags,
}

impl<D: Driver> PinnedHostResource<D> {
    /// A resource allocating pinned host memory with default flags (not mapped, not portable,
    /// not write-combined).
    pub fn new(driver: impl Into<Arc<D>>) -> Self {
        Self::with_flags(driver, HostAllocFlags::default())
    }

    /// A resource allocating pinned host memory with `flags`.
    pub fn with_flags(driver: impl Into<Arc<D>>, flags: HostAllocFlags) -> Self {
        PinnedHostResource {
            driver: driver.into(),
            flags,
        }
    }

    /// The flags every allocation is made with.
    pub fn flags(&self) -> HostAllocFlags {
        self.flags
    }
}

impl<D: Driver> Clone for PinnedHostResource<D> {
    fn clone(&self) -> Self {
        PinnedHostResource {
            driver: Arc::clone(&self.driver),
            flags: self.flags,
        }
    }
}

impl<D: Driver> std::fmt::Debug for PinnedHostResource<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(NAME).field("flags", &self.flags).finish()
    }
}

impl<D: Driver> HostMemoryResource for PinnedHostResource<D> {
    fn name(&self) -> &'static str {
        NAME
    }

    /// `allocate_host(0)` returns the null pointer without a driver call.
    ///
    /// # Time complexity
    ///
    /// One driver call.
    fn allocate_host(&self, bytes: usize) -> MrResult<HostPtr> {
        if bytes == 0 {
            return Ok(HostPtr(0));
        }
        let _scope = CallerScope::enter(NAME);
        self.driver.host_alloc(bytes, self.flags).map_err(|e| {
            if e.is_out_of_memory() {
                MrError::OutOfMemory {
                    resource: NAME,
                    requested: bytes as u64,
                    available: None,
                }
            } else {
                MrError::Driver(e)
            }
        })
    }

    /// `deallocate_host(null, 0)` is a no-op.
    ///
    /// # Time complexity
    ///
    /// One driver call.
    fn deallocate_host(&self, ptr: HostPtr, bytes: usize) -> MrResult<()> {
        if ptr == HostPtr(0) && bytes == 0 {
            return Ok(());
        }
        let _scope = CallerScope::enter(NAME);
        self.driver.host_free(ptr).map_err(|e| {
            if e.code == CudaCode::INVALID_VALUE {
                MrError::InvalidFree {
                    resource: NAME,
                    ptr: crate::driver::DevicePtr(ptr.0),
                    bytes: bytes as u64,
                    reason: e.to_string(),
                }
            } else {
                MrError::Driver(e)
            }
        })
    }

    fn driver(&self) -> &dyn Driver {
        &*self.driver
    }
}

/// The host-memory counterpart of [`crate::mr::assert_resource`].
const fn assert_host_resource<R: HostMemoryResource + Send + Sync + 'static>() {}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_host_resource::<PinnedHostResource<D>>();
    }
};
