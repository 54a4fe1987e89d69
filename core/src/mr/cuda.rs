//! [`CudaResource`]: device memory straight from the driver (`cuMemAlloc` / `cuMemFree`).
//!
//! - **What it does**: one driver allocation per request, one driver free per release, in the
//!   context that was current when the resource was built: when another context is current at
//!   the call (a thread working on another device), it makes its own current for the call and
//!   restores the other after, so memory of a resource built for device N never lands on
//!   device 0 (rmm#1405).
//! - **Thread safety**: `Send + Sync`; the driver serialises what it must.
//! - **Streams**: the stream is ignored: `cuMemAlloc` memory is usable on every stream, and
//!   `cuMemFree` synchronizes the device, so a release is ordered after all earlier work.
//! - **Clone and ownership**: holds the driver through an `Arc`; clones share it.
//! - **Use and cost**: the upstream of pools. Each call costs a driver round trip (≈ 7 µs on an
//!   H100, ≈ 72 µs for tens of MiB) and a free stalls the device: never use it directly on a
//!   hot path.

use std::sync::Arc;

use crate::attribution::CallerScope;
use crate::driver::{ContextId, DevicePtr, Driver, MemInfo, StreamId};
use crate::error::CudaCode;
use crate::mr::detail::context_scope::ContextScope;
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult};

/// Device memory from `cuMemAlloc`, returned with `cuMemFree`.
pub struct CudaResource<D: Driver> {
    driver: Arc<D>,
    /// The context current when the resource was built (`None`: none was).
    context: Option<ContextId>,
}

impl<D: Driver> CudaResource<D> {
    /// A resource allocating from `driver` in the calling thread's current context (or, if
    /// none is current, in whatever context is current at each call).
    pub fn new(driver: impl Into<Arc<D>>) -> Self {
        let driver = driver.into();
        let context = driver.current_context().ok();
        CudaResource { driver, context }
    }

    /// The context the resource allocates in.
    pub fn context(&self) -> Option<ContextId> {
        self.context
    }

    /// Runs `f` with the resource's context current, restoring the caller's after.
    ///
    /// # Time complexity
    ///
    /// One driver call (`cuCtxGetCurrent`) when the context is already current; three when
    /// it must be switched and restored.
    fn in_context<T>(&self, f: impl FnOnce() -> T) -> T {
        let _scope = ContextScope::enter(&*self.driver, self.context);
        f()
    }
}

impl<D: Driver> Clone for CudaResource<D> {
    fn clone(&self) -> Self {
        CudaResource {
            driver: Arc::clone(&self.driver),
            context: self.context,
        }
    }
}

/// Maps a driver out-of-memory error to [`MrError::OutOfMemory`], asking the driver how much
/// is free (a call made only on this failure path).
pub(crate) fn driver_oom(
    driver: &dyn Driver,
    resource: &'static str,
    requested: usize,
    e: crate::DriverError,
) -> MrError {
    if e.is_out_of_memory() {
        MrError::OutOfMemory {
            resource,
            requested: requested as u64,
            available: driver.mem_get_info().ok().map(|i| i.free),
        }
    } else {
        MrError::Driver(e)
    }
}

/// Maps a driver error on a free to [`MrError::InvalidFree`] where the driver refused the
/// pointer.
pub(crate) fn driver_bad_free(
    resource: &'static str,
    ptr: DevicePtr,
    bytes: usize,
    e: crate::DriverError,
) -> MrError {
    if e.code == CudaCode::INVALID_VALUE || e.code == CudaCode::ILLEGAL_ADDRESS {
        MrError::InvalidFree {
            resource,
            ptr,
            bytes: bytes as u64,
            reason: e.to_string(),
        }
    } else {
        MrError::Driver(e)
    }
}

impl<D: Driver> DeviceMemoryResource for CudaResource<D> {
    fn name(&self) -> &'static str {
        "CudaResource"
    }

    fn allocate(&self, bytes: usize, _stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let _scope = CallerScope::enter(self.name());
        self.in_context(|| {
            self.driver
                .mem_alloc(bytes)
                .map_err(|e| driver_oom(&*self.driver, self.name(), bytes, e))
        })
    }

    fn deallocate(&self, ptr: DevicePtr, bytes: usize, _stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        let _scope = CallerScope::enter(self.name());
        self.in_context(|| {
            self.driver
                .mem_free(ptr)
                .map_err(|e| driver_bad_free(self.name(), ptr, bytes, e))
        })
    }

    fn is_equal(&self, other: &dyn DeviceMemoryResource) -> bool {
        // Any two CudaResources over the same driver can free each other's memory.
        other.name() == self.name() && std::ptr::addr_eq(other.driver(), self.driver())
    }

    fn memory_info(&self) -> Option<MemInfo> {
        self.in_context(|| self.driver.mem_get_info().ok())
    }

    fn driver(&self) -> &dyn Driver {
        &*self.driver
    }

    fn driver_backed(&self) -> bool {
        true
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<CudaResource<D>>();
    }
};
