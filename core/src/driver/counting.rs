//! [`CountingDriver`]: a driver that counts the calls made through it, by class, and passes
//! each on unchanged.
//!
//! What a slow path costs on a GPU is mostly its driver calls (`cuMemAlloc` and `cuMemFree`
//! take microseconds, `cuEventRecord` and `cuStreamWaitEvent` about one each), and the
//! simulated GPU spends no wall time on them. Building a resource over a counting driver shows
//! how often it reaches the driver, on the simulator and on a GPU alike; the many-threads
//! benchmark reports these counts per 1 000 operations.
//!
//! Counting costs one relaxed atomic add per call, in a counter on a cache line of its own per
//! class; calls that never reach the GPU (`backend_name`, `is_simulated`) are not counted.

use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

/// What a driver call does, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallClass {
    /// Takes or gives back memory: `cuMemAlloc`, `cuMemFree`, their async forms, `cuMemCreate`,
    /// `cuMemMap`, `cuMemUnmap`, `cuMemRelease`, address reservations, host and managed memory.
    Memory,
    /// Orders or waits for work: `cuEventRecord`, `cuStreamWaitEvent`, event and stream
    /// queries and synchronizes, `cuCtxSynchronize`.
    Ordering,
    /// Everything else: context queries and switches, `cuMemGetInfo`, copies, events and
    /// streams created or destroyed.
    Other,
}

/// Calls made through a [`CountingDriver`], by class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// [`CallClass::Memory`] calls.
    pub memory: u64,
    /// [`CallClass::Ordering`] calls.
    pub ordering: u64,
    /// [`CallClass::Other`] calls.
    pub other: u64,
}

impl CallCounts {
    /// Every call together.
    pub fn total(&self) -> u64 {
        self.memory + self.ordering + self.other
    }

    /// The calls made since `earlier` was read.
    pub fn since(&self, earlier: &CallCounts) -> CallCounts {
        CallCounts {
            memory: self.memory.saturating_sub(earlier.memory),
            ordering: self.ordering.saturating_sub(earlier.ordering),
            other: self.other.saturating_sub(earlier.other),
        }
    }
}

/// One counter on a cache line of its own, so that threads counting different classes do not
/// slow each other down.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Counter(AtomicU64);

/// A driver that counts the calls made through it and passes them on to `D`.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use emm_core::driver::counting::CountingDriver;
/// use emm_core::mr::{CudaResource, DeviceMemoryResource, PoolResource};
/// use emm_core::StreamId;
/// # fn demo(driver: Arc<dyn emm_core::Driver>) -> emm_core::mr::MrResult<()> {
/// let counting = Arc::new(CountingDriver::new(driver));
/// let cuda = CudaResource::<CountingDriver<Arc<dyn emm_core::Driver>>>::new(counting.clone());
/// let pool = PoolResource::new(cuda);
/// let p = pool.allocate(1000, StreamId::DEFAULT)?;
/// pool.deallocate(p, 1000, StreamId::DEFAULT)?;
/// println!("{} driver calls", counting.counts().total());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct CountingDriver<D: Driver + ?Sized> {
    counters: [Counter; 3],
    inner: D,
}

impl<D: Driver> CountingDriver<D> {
    /// Counts the calls made to `inner`, from zero.
    pub fn new(inner: D) -> Self {
        CountingDriver {
            counters: Default::default(),
            inner,
        }
    }
}

impl<D: Driver + ?Sized> CountingDriver<D> {
    /// The driver the calls go to.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The calls made so far.
    pub fn counts(&self) -> CallCounts {
        let get = |c: CallClass| self.counters[c as usize].0.load(Ordering::Relaxed);
        CallCounts {
            memory: get(CallClass::Memory),
            ordering: get(CallClass::Ordering),
            other: get(CallClass::Other),
        }
    }

    #[inline]
    fn count(&self, class: CallClass) {
        self.counters[class as usize]
            .0
            .fetch_add(1, Ordering::Relaxed);
    }
}

impl<D: Driver + ?Sized> Driver for CountingDriver<D> {
    #[inline]
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
    #[inline]
    fn is_simulated(&self) -> bool {
        self.inner.is_simulated()
    }
    #[inline]
    fn device_count(&self) -> DriverResult<u32> {
        self.count(CallClass::Other);
        self.inner.device_count()
    }
    #[inline]
    fn device_properties(&self, device: DeviceId) -> DriverResult<DeviceProperties> {
        self.count(CallClass::Other);
        self.inner.device_properties(device)
    }
    #[inline]
    fn primary_context(&self, device: DeviceId) -> DriverResult<ContextId> {
        self.count(CallClass::Other);
        self.inner.primary_context(device)
    }
    #[inline]
    fn set_current_context(&self, ctx: ContextId) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.set_current_context(ctx)
    }
    #[inline]
    fn current_context(&self) -> DriverResult<ContextId> {
        self.count(CallClass::Other);
        self.inner.current_context()
    }
    #[inline]
    fn context_device(&self, ctx: ContextId) -> DriverResult<DeviceId> {
        self.count(CallClass::Other);
        self.inner.context_device(ctx)
    }
    #[inline]
    fn context_synchronize(&self) -> DriverResult<()> {
        self.count(CallClass::Ordering);
        self.inner.context_synchronize()
    }
    #[inline]
    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> DriverResult<bool> {
        self.count(CallClass::Other);
        self.inner.can_access_peer(device, peer)
    }
    #[inline]
    fn enable_peer_access(&self, peer: ContextId) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.enable_peer_access(peer)
    }
    #[inline]
    fn mem_alloc(&self, size: usize) -> DriverResult<DevicePtr> {
        self.count(CallClass::Memory);
        self.inner.mem_alloc(size)
    }
    #[inline]
    fn mem_free(&self, ptr: DevicePtr) -> DriverResult<()> {
        self.count(CallClass::Memory);
        self.inner.mem_free(ptr)
    }
    #[inline]
    fn mem_alloc_async(&self, size: usize, stream: StreamId) -> DriverResult<DevicePtr> {
        self.count(CallClass::Memory);
        self.inner.mem_alloc_async(size, stream)
    }
    #[inline]
    fn mem_alloc_from_pool_async(
        &self,
        size: usize,
        pool: MemPoolId,
        stream: StreamId,
    ) -> DriverResult<DevicePtr> {
        self.count(CallClass::Memory);
        self.inner.mem_alloc_from_pool_async(size, pool, stream)
    }
    #[inline]
    fn mem_free_async(&self, ptr: DevicePtr, stream: StreamId) -> DriverResult<()> {
        self.count(CallClass::Memory);
        self.inner.mem_free_async(ptr, stream)
    }
    #[inline]
    fn mem_pool_create(&self, device: DeviceId) -> DriverResult<MemPoolId> {
        self.count(CallClass::Other);
        self.inner.mem_pool_create(device)
    }
    #[inline]
    fn mem_pool_destroy(&self, pool: MemPoolId) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.mem_pool_destroy(pool)
    }
    #[inline]
    fn device_default_mem_pool(&self, device: DeviceId) -> DriverResult<MemPoolId> {
        self.count(CallClass::Other);
        self.inner.device_default_mem_pool(device)
    }
    #[inline]
    fn mem_pool_set_release_threshold(&self, pool: MemPoolId, bytes: u64) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.mem_pool_set_release_threshold(pool, bytes)
    }
    #[inline]
    fn mem_pool_trim_to(&self, pool: MemPoolId, min_bytes_to_keep: u64) -> DriverResult<()> {
        self.count(CallClass::Memory);
        self.inner.mem_pool_trim_to(pool, min_bytes_to_keep)
    }
    #[inline]
    fn mem_pool_usage(&self, pool: MemPoolId) -> DriverResult<MemPoolUsage> {
        self.count(CallClass::Other);
        self.inner.mem_pool_usage(pool)
    }
    #[inline]
    fn mem_get_allocation_granularity(&self, device: DeviceId) -> DriverResult<usize> {
        self.count(CallClass::Other);
        self.inner.mem_get_allocation_granularity(device)
    }
    #[inline]
    fn mem_address_reserve(&self, size: usize, alignment: usize) -> DriverResult<DevicePtr> {
        self.count(CallClass::Memory);
        self.inner.mem_address_reserve(size, alignment)
    }
    #[inline]
    fn mem_address_free(&self, ptr: DevicePtr, size: usize) -> DriverResult<()> {
        self.count(CallClass::Memory);
        self.inner.mem_address_free(ptr, size)
    }
    #[inline]
    fn mem_create(&self, size: usize, device: DeviceId) -> DriverResult<PhysHandle> {
        self.count(CallClass::Memory);
        self.inner.mem_create(size, device)
    }
    #[inline]
    fn mem_release(&self, handle: PhysHandle) -> DriverResult<()> {
        self.count(CallClass::Memory);
        self.inner.mem_release(handle)
    }
    #[inline]
    fn mem_map(&self, ptr: DevicePtr, size: usize, handle: PhysHandle) -> DriverResult<()> {
        self.count(CallClass::Memory);
        self.inner.mem_map(ptr, size, handle)
    }
    #[inline]
    fn mem_unmap(&self, ptr: DevicePtr, size: usize) -> DriverResult<()> {
        self.count(CallClass::Memory);
        self.inner.mem_unmap(ptr, size)
    }
    #[inline]
    fn mem_set_access(&self, ptr: DevicePtr, size: usize, device: DeviceId) -> DriverResult<()> {
        self.count(CallClass::Memory);
        self.inner.mem_set_access(ptr, size, device)
    }
    #[inline]
    fn mem_alloc_managed(&self, size: usize, attach_global: bool) -> DriverResult<DevicePtr> {
        self.count(CallClass::Memory);
        self.inner.mem_alloc_managed(size, attach_global)
    }
    #[inline]
    fn mem_advise(
        &self,
        ptr: DevicePtr,
        size: usize,
        advice: Advice,
        location: Location,
    ) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.mem_advise(ptr, size, advice, location)
    }
    #[inline]
    fn mem_prefetch(
        &self,
        ptr: DevicePtr,
        size: usize,
        location: Location,
        stream: StreamId,
    ) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.mem_prefetch(ptr, size, location, stream)
    }
    #[inline]
    fn host_alloc(&self, size: usize, flags: HostAllocFlags) -> DriverResult<HostPtr> {
        self.count(CallClass::Memory);
        self.inner.host_alloc(size, flags)
    }
    #[inline]
    fn host_free(&self, ptr: HostPtr) -> DriverResult<()> {
        self.count(CallClass::Memory);
        self.inner.host_free(ptr)
    }
    #[inline]
    fn host_register(&self, ptr: HostPtr, size: usize, mapped: bool) -> DriverResult<()> {
        self.count(CallClass::Memory);
        self.inner.host_register(ptr, size, mapped)
    }
    #[inline]
    fn host_unregister(&self, ptr: HostPtr) -> DriverResult<()> {
        self.count(CallClass::Memory);
        self.inner.host_unregister(ptr)
    }
    #[inline]
    fn host_device_pointer(&self, ptr: HostPtr) -> DriverResult<DevicePtr> {
        self.count(CallClass::Other);
        self.inner.host_device_pointer(ptr)
    }
    #[inline]
    fn pageable_alloc(&self, size: usize) -> DriverResult<HostPtr> {
        self.count(CallClass::Other);
        self.inner.pageable_alloc(size)
    }
    #[inline]
    fn pageable_free(&self, ptr: HostPtr) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.pageable_free(ptr)
    }
    #[inline]
    fn mem_get_info(&self) -> DriverResult<MemInfo> {
        self.count(CallClass::Other);
        self.inner.mem_get_info()
    }
    #[inline]
    fn mem_get_address_range(&self, ptr: DevicePtr) -> DriverResult<(DevicePtr, usize)> {
        self.count(CallClass::Other);
        self.inner.mem_get_address_range(ptr)
    }
    #[inline]
    fn ipc_get_mem_handle(&self, base: DevicePtr) -> DriverResult<IpcMemHandle> {
        self.count(CallClass::Other);
        self.inner.ipc_get_mem_handle(base)
    }
    #[inline]
    fn ipc_open_mem_handle(&self, handle: &IpcMemHandle) -> DriverResult<DevicePtr> {
        self.count(CallClass::Other);
        self.inner.ipc_open_mem_handle(handle)
    }
    #[inline]
    fn ipc_close_mem_handle(&self, ptr: DevicePtr) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.ipc_close_mem_handle(ptr)
    }
    #[inline]
    fn stream_create(&self, non_blocking: bool) -> DriverResult<StreamId> {
        self.count(CallClass::Other);
        self.inner.stream_create(non_blocking)
    }
    #[inline]
    fn stream_destroy(&self, stream: StreamId) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.stream_destroy(stream)
    }
    #[inline]
    fn stream_synchronize(&self, stream: StreamId) -> DriverResult<()> {
        self.count(CallClass::Ordering);
        self.inner.stream_synchronize(stream)
    }
    #[inline]
    fn stream_query(&self, stream: StreamId) -> DriverResult<bool> {
        self.count(CallClass::Ordering);
        self.inner.stream_query(stream)
    }
    #[inline]
    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> DriverResult<()> {
        self.count(CallClass::Ordering);
        self.inner.stream_wait_event(stream, event)
    }
    #[inline]
    fn event_create(&self) -> DriverResult<EventId> {
        self.count(CallClass::Other);
        self.inner.event_create()
    }
    #[inline]
    fn event_destroy(&self, event: EventId) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.event_destroy(event)
    }
    #[inline]
    fn event_record(&self, event: EventId, stream: StreamId) -> DriverResult<()> {
        self.count(CallClass::Ordering);
        self.inner.event_record(event, stream)
    }
    #[inline]
    fn event_query(&self, event: EventId) -> DriverResult<bool> {
        self.count(CallClass::Ordering);
        self.inner.event_query(event)
    }
    #[inline]
    fn event_synchronize(&self, event: EventId) -> DriverResult<()> {
        self.count(CallClass::Ordering);
        self.inner.event_synchronize(event)
    }
    #[inline]
    fn memcpy_htod(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.memcpy_htod(dst, src, stream)
    }
    #[inline]
    fn memcpy_dtoh(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.memcpy_dtoh(dst, src, stream)
    }
    #[inline]
    fn memcpy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.memcpy_dtod(dst, src, size, stream)
    }
    #[inline]
    fn memset_d8(
        &self,
        dst: DevicePtr,
        value: u8,
        size: usize,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.memset_d8(dst, value, size, stream)
    }
    #[inline]
    fn host_read(&self, src: HostPtr, dst: &mut [u8]) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.host_read(src, dst)
    }
    #[inline]
    fn host_write(&self, dst: HostPtr, src: &[u8]) -> DriverResult<()> {
        self.count(CallClass::Other);
        self.inner.host_write(dst, src)
    }
}
