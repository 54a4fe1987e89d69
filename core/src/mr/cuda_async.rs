//! [`AsyncResource`]: stream-ordered allocation from a driver memory pool
//! (`cuMemAllocFromPoolAsync` / `cuMemFreeAsync`). The file is named after RMM's
//! `cuda_async_memory_resource`, as `async` is a Rust keyword.
//!
//! - **What it does**: allocates from a driver memory pool that the resource creates (or the
//!   device's default pool). The driver suballocates, reuses memory freed on the same stream at
//!   once, orders cross-stream reuse itself, and gives memory back to the device at a
//!   synchronization point when the pool holds more than its release threshold.
//! - **Thread safety**: `Send + Sync`; the driver serialises what it must.
//! - **Streams**: fully stream-ordered, by the driver: memory freed on stream A is reused on A
//!   at once and on B only once B is ordered after the free.
//! - **Clone and ownership**: not `Clone`: it owns the pool it created and destroys it when
//!   dropped (memory still allocated from it stays valid until freed, as in CUDA). Share it
//!   through an `Arc`.
//! - **Use and cost**: RMM's `cuda_async_memory_resource`. Each call is a driver round trip
//!   (≈ 1.0–1.7 µs on an H100 when the pool has the memory); the default release threshold is
//!   the device's memory, so the pool keeps what it took until trimmed.

use std::sync::Arc;

use crate::attribution::CallerScope;
use crate::driver::{ContextId, DevicePtr, Driver, MemInfo, MemPoolId, MemPoolUsage, StreamId};
use crate::mr::cuda::{driver_bad_free, driver_oom};
use crate::mr::detail::context_scope::ContextScope;
use crate::mr::{assert_resource, DeviceMemoryResource, MrResult};

const NAME: &str = "AsyncResource";

/// Stream-ordered device memory from a driver memory pool.
pub struct AsyncResource<D: Driver> {
    driver: Arc<D>,
    pool: MemPoolId,
    /// Whether the resource created the pool (and so destroys it).
    owned: bool,
    /// The context current when the resource was built, made current around each call: the
    /// default stream is the current context's, and a stream on device 0 cannot take memory
    /// from device 1's pool (rmm#1405).
    context: Option<ContextId>,
}

impl<D: Driver> AsyncResource<D> {
    /// A resource over a new driver pool on the current context's device, with the release
    /// threshold set to the device's memory (the pool keeps what it took; RMM's default).
    ///
    /// # Errors
    ///
    /// The driver's error when the device has no memory pools or the pool cannot be created.
    pub fn new(driver: impl Into<Arc<D>>) -> MrResult<Self> {
        let driver: Arc<D> = driver.into();
        let _scope = CallerScope::enter(NAME);
        let context = driver.current_context()?;
        let device = driver.context_device(context)?;
        let total = driver.device_properties(device)?.total_memory;
        let pool = driver.mem_pool_create(device)?;
        let r = AsyncResource {
            driver,
            pool,
            owned: true,
            context: Some(context),
        };
        r.driver.mem_pool_set_release_threshold(pool, total)?;
        Ok(r)
    }

    /// A resource over the default pool of the current context's device, whose settings
    /// (release threshold) stay the driver's. The pool is not destroyed on drop.
    ///
    /// # Errors
    ///
    /// The driver's error when the device has no default pool.
    pub fn from_default_pool(driver: impl Into<Arc<D>>) -> MrResult<Self> {
        let driver: Arc<D> = driver.into();
        let _scope = CallerScope::enter(NAME);
        let context = driver.current_context()?;
        let device = driver.context_device(context)?;
        let pool = driver.device_default_mem_pool(device)?;
        Ok(AsyncResource {
            driver,
            pool,
            owned: false,
            context: Some(context),
        })
    }

    /// The context the resource allocates in.
    pub fn context(&self) -> Option<ContextId> {
        self.context
    }

    /// The driver pool allocations come from.
    pub fn pool(&self) -> MemPoolId {
        self.pool
    }

    /// Sets the bytes the pool keeps at a synchronization point before giving memory back.
    ///
    /// # Errors
    ///
    /// The driver's error.
    pub fn set_release_threshold(&self, bytes: u64) -> MrResult<()> {
        let _scope = CallerScope::enter(NAME);
        Ok(self
            .driver
            .mem_pool_set_release_threshold(self.pool, bytes)?)
    }

    /// Gives unused pool memory back to the device, keeping at least `min_bytes_to_keep`.
    ///
    /// # Errors
    ///
    /// The driver's error.
    pub fn trim_to(&self, min_bytes_to_keep: u64) -> MrResult<()> {
        let _scope = CallerScope::enter(NAME);
        Ok(self.driver.mem_pool_trim_to(self.pool, min_bytes_to_keep)?)
    }

    /// Bytes the pool holds from the device and bytes handed out.
    ///
    /// # Errors
    ///
    /// The driver's error.
    pub fn usage(&self) -> MrResult<MemPoolUsage> {
        Ok(self.driver.mem_pool_usage(self.pool)?)
    }
}

impl<D: Driver> std::fmt::Debug for AsyncResource<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(NAME)
            .field("pool", &self.pool)
            .field("owned", &self.owned)
            .finish()
    }
}

impl<D: Driver> DeviceMemoryResource for AsyncResource<D> {
    fn name(&self) -> &'static str {
        NAME
    }

    /// # Time complexity
    ///
    /// One driver call, and `cuCtxGetCurrent` (two more when another context is current).
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let _scope = CallerScope::enter(NAME);
        let _ctx = ContextScope::enter(&*self.driver, self.context);
        self.driver
            .mem_alloc_from_pool_async(bytes, self.pool, stream)
            .map_err(|e| driver_oom(&*self.driver, NAME, bytes, e))
    }

    /// # Time complexity
    ///
    /// One driver call, and `cuCtxGetCurrent` (two more when another context is current).
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        let _scope = CallerScope::enter(NAME);
        let _ctx = ContextScope::enter(&*self.driver, self.context);
        self.driver
            .mem_free_async(ptr, stream)
            .map_err(|e| driver_bad_free(NAME, ptr, bytes, e))
    }

    fn memory_info(&self) -> Option<MemInfo> {
        let _ctx = ContextScope::enter(&*self.driver, self.context);
        let info = self.driver.mem_get_info().ok()?;
        // Memory the pool holds but has not handed out is free to this resource too.
        let idle = self
            .usage()
            .map_or(0, |u| u.reserved.saturating_sub(u.used));
        Some(MemInfo {
            free: (info.free + idle).min(info.total),
            total: info.total,
        })
    }

    /// Waits for the device (so that stream-ordered frees are complete), then trims the driver
    /// pool to nothing; returns the bytes the pool gave back.
    fn release(&self) -> MrResult<u64> {
        let before = self.usage()?.reserved;
        let _scope = CallerScope::enter(NAME);
        let _ctx = ContextScope::enter(&*self.driver, self.context);
        self.driver.context_synchronize()?;
        self.trim_to(0)?;
        Ok(before.saturating_sub(self.usage()?.reserved))
    }

    fn driver(&self) -> &dyn Driver {
        &*self.driver
    }
}

impl<D: Driver> Drop for AsyncResource<D> {
    fn drop(&mut self) {
        if self.owned {
            let _scope = CallerScope::enter(NAME);
            // A failure leaves only an empty pool object behind; there is no caller to tell.
            let _ = self.driver.mem_pool_destroy(self.pool);
        }
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<AsyncResource<D>>();
    }
};
