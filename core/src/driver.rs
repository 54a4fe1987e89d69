//! The [`Driver`] trait: the one seam between emm and a GPU.
//!
//! It covers what the source documents use of the CUDA driver API — contexts, device memory
//! (synchronous and stream-ordered), driver memory pools, virtual memory management (reserve
//! address space, create physical memory, map it), managed memory with advice and prefetch,
//! pinned and registered host memory, IPC, streams and events, copies — and nothing else. Every method returns a [`DriverResult`]; an implementation never panics on bad input
//! (a foreign pointer, a double free, size 0, an absurd size): it returns the CUDA code the real
//! driver would, with a message saying what was asked.
//!
//! Two implementations exist: `emm-sim` (a deterministic simulated GPU) and `emm-cuda` (cudarc).
//! Handles are plain numbers so that both can mint them and so that they cross the C ABI and
//! the wasm sandbox unchanged.
//!
//! [`counting::CountingDriver`] wraps any driver and counts the calls made through it.

use std::fmt;

use crate::error::DriverResult;

pub mod counting;
#[cfg(test)]
pub(crate) mod scripted;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident($inner:ty), $fmt:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub $inner);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, $fmt, self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }
        }
    };
}

handle!(
    /// A device virtual address (`CUdeviceptr`). Managed memory and the device alias of mapped
    /// host memory are also `DevicePtr`s, as in CUDA.
    DevicePtr(u64),
    "dptr:{:#x}"
);
handle!(
    /// A host virtual address of pinned, registered or managed memory.
    HostPtr(u64),
    "hptr:{:#x}"
);
handle!(
    /// A stream (`CUstream`). [`StreamId::DEFAULT`] is the legacy default stream of the current
    /// context, which orders itself with every blocking stream of that context.
    StreamId(u64),
    "stream:{}"
);
handle!(
    /// An event (`CUevent`).
    EventId(u64),
    "event:{}"
);
handle!(
    /// A context (`CUcontext`).
    ContextId(u64),
    "ctx:{}"
);
handle!(
    /// A device ordinal (`CUdevice`).
    DeviceId(u32),
    "device:{}"
);
handle!(
    /// A driver memory pool (`CUmemoryPool`), used by stream-ordered allocation.
    MemPoolId(u64),
    "mempool:{}"
);

handle!(
    /// Physical device memory from [`Driver::mem_create`] (`CUmemGenericAllocationHandle`):
    /// memory with no address until [`Driver::mem_map`] maps it into a reserved range.
    PhysHandle(u64),
    "phys:{:#x}"
);

impl StreamId {
    /// The legacy default stream (`0` in CUDA).
    pub const DEFAULT: StreamId = StreamId(0);
    /// The calling thread's per-thread default stream (`CU_STREAM_PER_THREAD`, `0x2`): a
    /// blocking stream of the current context, one per thread, never destroyed.
    pub const PER_THREAD: StreamId = StreamId(2);
}

impl DevicePtr {
    /// The null device pointer.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// The address `bytes` past this one.
    #[inline]
    pub fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(bytes))
    }

    /// The same address seen from the host. Valid for managed memory and, under unified
    /// addressing, for mapped host memory.
    #[inline]
    pub fn as_host(self) -> HostPtr {
        HostPtr(self.0)
    }
}

impl HostPtr {
    /// The address `bytes` past this one.
    #[inline]
    pub fn offset(self, bytes: u64) -> HostPtr {
        HostPtr(self.0.wrapping_add(bytes))
    }
}

/// What a device can do and how much memory it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProperties {
    /// The device's name, e.g. `NVIDIA H100 80GB HBM3` or `emm-sim GPU 0`.
    pub name: String,
    /// Total device memory in bytes.
    pub total_memory: u64,
    /// Whether host memory can be mapped into the device address space.
    pub can_map_host_memory: bool,
    /// Whether the device can access managed memory concurrently with the host (pageable
    /// migration, oversubscription).
    pub concurrent_managed_access: bool,
    /// Whether the device supports CUDA IPC memory handles.
    pub supports_ipc: bool,
    /// Whether the device supports stream-ordered allocation (driver memory pools).
    pub supports_memory_pools: bool,
}

/// Free and total memory of a device, in bytes (`cuMemGetInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes the driver can still allocate.
    pub free: u64,
    /// Total bytes on the device.
    pub total: u64,
}

/// Where managed memory lives or is moved to: a device or the host (CUDA 13 `CUmemLocation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Location {
    /// Host memory.
    Host,
    /// The memory of one device.
    Device(DeviceId),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Host => f.write_str("host"),
            Location::Device(d) => write!(f, "device {}", d.0),
        }
    }
}

/// Advice for managed memory (`CUmem_advise`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Advice {
    /// Reads are far more common than writes: processors may keep read-only copies.
    SetReadMostly,
    /// Undo [`Advice::SetReadMostly`].
    UnsetReadMostly,
    /// Keep the pages at the given location; other processors map them instead of migrating.
    SetPreferredLocation,
    /// Undo [`Advice::SetPreferredLocation`].
    UnsetPreferredLocation,
    /// The given processor accesses the range: keep a mapping for it so access never faults.
    SetAccessedBy,
    /// Undo [`Advice::SetAccessedBy`].
    UnsetAccessedBy,
}

/// Flags of `cuMemHostAlloc`, named as in the EMM contract's `memhostalloc(size, mapped,
/// portable, wc)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct HostAllocFlags {
    /// Map the allocation into the device address space (`CU_MEMHOSTALLOC_DEVICEMAP`).
    pub mapped: bool,
    /// Pinned for every context, not only the calling one (`CU_MEMHOSTALLOC_PORTABLE`).
    pub portable: bool,
    /// Write-combined: fast for the device to read, slow for the host to read
    /// (`CU_MEMHOSTALLOC_WRITECOMBINED`).
    pub write_combined: bool,
}

/// How much of a driver memory pool is reserved from the device and how much is handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemPoolUsage {
    /// Bytes the pool holds from the device (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`).
    pub reserved: u64,
    /// Bytes of the pool currently allocated (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`).
    pub used: u64,
}

/// An opaque CUDA IPC memory handle (`CUipcMemHandle`, 64 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcMemHandle(pub [u8; 64]);

impl fmt::Debug for IpcMemHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IpcMemHandle(")?;
        for b in &self.0[..16] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("…)")
    }
}

/// The CUDA driver, as emm uses it.
///
/// Calls that allocate or copy run in the calling thread's current context (see
/// [`Driver::set_current_context`]); an implementation whose thread has no current context
/// uses the primary context of device 0, as the CUDA runtime does.
///
/// A `stream` of `None` in the copy calls means the synchronous form (`cuMemcpyHtoD`), which
/// returns after the copy is complete.
pub trait Driver: Send + Sync + 'static {
    /// A short name of the backend, e.g. `sim` or `cuda`.
    fn backend_name(&self) -> &'static str;

    /// Whether this driver is a simulated GPU, where memory is not real and an unproven
    /// plugin can do no harm. The plugin gate (`emm-sandbox`) asks it: only a simulated
    /// driver may run a `.wasm` plugin without a passing verdict. The default is `false`,
    /// so a driver that does not say is treated as hardware.
    fn is_simulated(&self) -> bool {
        false
    }

    // ---- devices and contexts ------------------------------------------------------------

    /// Number of devices (`cuDeviceGetCount`).
    fn device_count(&self) -> DriverResult<u32>;
    /// Properties of `device`.
    fn device_properties(&self, device: DeviceId) -> DriverResult<DeviceProperties>;
    /// The primary context of `device`, retained for the life of the driver object.
    fn primary_context(&self, device: DeviceId) -> DriverResult<ContextId>;
    /// Make `ctx` current on the calling thread (`cuCtxSetCurrent`).
    fn set_current_context(&self, ctx: ContextId) -> DriverResult<()>;
    /// The calling thread's current context (`cuCtxGetCurrent`).
    fn current_context(&self) -> DriverResult<ContextId>;
    /// The device of `ctx` (`cuCtxGetDevice`).
    fn context_device(&self, ctx: ContextId) -> DriverResult<DeviceId>;
    /// Wait for all work of the current context (`cuCtxSynchronize`).
    fn context_synchronize(&self) -> DriverResult<()>;
    /// Whether `device` can access memory on `peer` (`cuDeviceCanAccessPeer`).
    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> DriverResult<bool>;
    /// Let the current context access memory of `peer` (`cuCtxEnablePeerAccess`).
    fn enable_peer_access(&self, peer: ContextId) -> DriverResult<()>;

    // ---- device memory -------------------------------------------------------------------

    /// Allocate `size` bytes of device memory (`cuMemAlloc`). Size 0 is `INVALID_VALUE`.
    fn mem_alloc(&self, size: usize) -> DriverResult<DevicePtr>;
    /// Free device memory from [`Driver::mem_alloc`] (`cuMemFree`). Synchronizes the device.
    fn mem_free(&self, ptr: DevicePtr) -> DriverResult<()>;
    /// Allocate on `stream` from the current pool of the stream's device (`cuMemAllocAsync`).
    fn mem_alloc_async(&self, size: usize, stream: StreamId) -> DriverResult<DevicePtr>;
    /// Allocate on `stream` from `pool` (`cuMemAllocFromPoolAsync`).
    fn mem_alloc_from_pool_async(
        &self,
        size: usize,
        pool: MemPoolId,
        stream: StreamId,
    ) -> DriverResult<DevicePtr>;
    /// Free stream-ordered memory on `stream` (`cuMemFreeAsync`). The memory is reusable at
    /// once on `stream`, and on another stream only once that stream is ordered after this free.
    fn mem_free_async(&self, ptr: DevicePtr, stream: StreamId) -> DriverResult<()>;
    /// Create a memory pool on `device` (`cuMemPoolCreate`).
    fn mem_pool_create(&self, device: DeviceId) -> DriverResult<MemPoolId>;
    /// Destroy a pool (`cuMemPoolDestroy`); memory still allocated from it stays valid until freed.
    fn mem_pool_destroy(&self, pool: MemPoolId) -> DriverResult<()>;
    /// The default pool of `device` (`cuDeviceGetDefaultMemPool`).
    fn device_default_mem_pool(&self, device: DeviceId) -> DriverResult<MemPoolId>;
    /// Bytes a pool keeps reserved at a synchronization point before releasing memory to the
    /// device (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`).
    fn mem_pool_set_release_threshold(&self, pool: MemPoolId, bytes: u64) -> DriverResult<()>;
    /// Release unused pool memory down to `min_bytes_to_keep` (`cuMemPoolTrimTo`).
    fn mem_pool_trim_to(&self, pool: MemPoolId, min_bytes_to_keep: u64) -> DriverResult<()>;
    /// Reserved and used bytes of a pool.
    fn mem_pool_usage(&self, pool: MemPoolId) -> DriverResult<MemPoolUsage>;

    // ---- virtual memory management -------------------------------------------------------
    //
    // Reserve address space, create physical memory, map it into the reservation, grant a
    // device access: what PyTorch's expandable segments are made of. Sizes and addresses are
    // multiples of the allocation granularity. emm's rules, which the simulator enforces: a
    // range is unmapped before its physical memory is released and before its reservation is
    // freed, and the work using a range is waited for before it is unmapped (`cuMemUnmap` is
    // not stream-ordered).

    /// The allocation granularity of device memory on `device`
    /// (`cuMemGetAllocationGranularity`, `CU_MEM_ALLOC_GRANULARITY_MINIMUM`): 2 MiB on an H100.
    /// `NOT_SUPPORTED` where the device has no virtual memory management.
    fn mem_get_allocation_granularity(&self, device: DeviceId) -> DriverResult<usize>;
    /// Reserve `size` bytes of device virtual address space aligned to `alignment` (0: the
    /// granularity) (`cuMemAddressReserve`). Uses no memory; nothing may touch the range until
    /// memory is mapped there. A size that is 0 or not a multiple of the granularity is
    /// `INVALID_VALUE`.
    fn mem_address_reserve(&self, size: usize, alignment: usize) -> DriverResult<DevicePtr>;
    /// Free a reservation from [`Driver::mem_address_reserve`] (`cuMemAddressFree`); `size` as
    /// reserved. A reservation with memory still mapped in it is refused: unmap first.
    fn mem_address_free(&self, ptr: DevicePtr, size: usize) -> DriverResult<()>;
    /// Create `size` bytes of physical memory on `device` (`cuMemCreate`, pinned device memory,
    /// no shareable handle). It counts against the device's memory at once. A size that is 0 or
    /// not a multiple of the granularity is `INVALID_VALUE`.
    fn mem_create(&self, size: usize, device: DeviceId) -> DriverResult<PhysHandle>;
    /// Release physical memory from [`Driver::mem_create`] (`cuMemRelease`). Memory still
    /// mapped is refused with `ILLEGAL_STATE` (CUDA would free it at its last unmap; emm's
    /// layers unmap first, so the refusal catches a leak).
    fn mem_release(&self, handle: PhysHandle) -> DriverResult<()>;
    /// Map the first `size` bytes of `handle` at `ptr`, inside a reservation (`cuMemMap`,
    /// offset 0). A range that is already mapped, in part or whole, is refused. Nothing may
    /// touch the range until [`Driver::mem_set_access`] grants access.
    fn mem_map(&self, ptr: DevicePtr, size: usize, handle: PhysHandle) -> DriverResult<()>;
    /// Unmap `size` bytes at `ptr` (`cuMemUnmap`): one or more whole mappings. Not
    /// stream-ordered: wait for the work that uses the range first. A range that is not
    /// mapped, or only part of a mapping, is refused.
    fn mem_unmap(&self, ptr: DevicePtr, size: usize) -> DriverResult<()>;
    /// Let `device` read and write the mapped range `ptr..ptr + size` (`cuMemSetAccess`,
    /// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`). A range not wholly mapped is refused.
    fn mem_set_access(&self, ptr: DevicePtr, size: usize, device: DeviceId) -> DriverResult<()>;

    // ---- managed memory ------------------------------------------------------------------

    /// Allocate managed (unified) memory (`cuMemAllocManaged`); `attach_global` chooses
    /// `CU_MEM_ATTACH_GLOBAL` over `CU_MEM_ATTACH_HOST`.
    fn mem_alloc_managed(&self, size: usize, attach_global: bool) -> DriverResult<DevicePtr>;
    /// Advise the driver about a managed range (`cuMemAdvise_v2`).
    fn mem_advise(
        &self,
        ptr: DevicePtr,
        size: usize,
        advice: Advice,
        location: Location,
    ) -> DriverResult<()>;
    /// Migrate a managed range to `location`, ordered on `stream` (`cuMemPrefetchAsync_v2`).
    fn mem_prefetch(
        &self,
        ptr: DevicePtr,
        size: usize,
        location: Location,
        stream: StreamId,
    ) -> DriverResult<()>;

    // ---- host memory ---------------------------------------------------------------------

    /// Allocate pinned host memory (`cuMemHostAlloc`).
    fn host_alloc(&self, size: usize, flags: HostAllocFlags) -> DriverResult<HostPtr>;
    /// Free memory from [`Driver::host_alloc`] (`cuMemFreeHost`).
    fn host_free(&self, ptr: HostPtr) -> DriverResult<()>;
    /// Page-lock an existing host range (`cuMemHostRegister`); `mapped` also maps it into the
    /// device address space. Registering an overlapping range twice is
    /// `HOST_MEMORY_ALREADY_REGISTERED`.
    fn host_register(&self, ptr: HostPtr, size: usize, mapped: bool) -> DriverResult<()>;
    /// Undo [`Driver::host_register`] (`cuMemHostUnregister`).
    fn host_unregister(&self, ptr: HostPtr) -> DriverResult<()>;
    /// The device address of mapped host memory (`cuMemHostGetDevicePointer`).
    fn host_device_pointer(&self, ptr: HostPtr) -> DriverResult<DevicePtr>;
    /// Allocate ordinary pageable host memory (what `malloc` returns), for callers that pin
    /// memory they own with [`Driver::host_register`]. Not a CUDA call.
    fn pageable_alloc(&self, size: usize) -> DriverResult<HostPtr>;
    /// Free memory from [`Driver::pageable_alloc`]. Not a CUDA call.
    fn pageable_free(&self, ptr: HostPtr) -> DriverResult<()>;

    // ---- information ---------------------------------------------------------------------

    /// Free and total memory of the current context's device (`cuMemGetInfo`).
    fn mem_get_info(&self) -> DriverResult<MemInfo>;
    /// The base and size of the driver allocation containing `ptr` (`cuMemGetAddressRange`).
    fn mem_get_address_range(&self, ptr: DevicePtr) -> DriverResult<(DevicePtr, usize)>;

    // ---- IPC -----------------------------------------------------------------------------

    /// An IPC handle for the driver allocation whose base is `base` (`cuIpcGetMemHandle`).
    fn ipc_get_mem_handle(&self, base: DevicePtr) -> DriverResult<IpcMemHandle>;
    /// Open a handle exported by another process (`cuIpcOpenMemHandle`). Opening a handle this
    /// process already has open is `ALREADY_MAPPED`.
    fn ipc_open_mem_handle(&self, handle: &IpcMemHandle) -> DriverResult<DevicePtr>;
    /// Close a pointer from [`Driver::ipc_open_mem_handle`] (`cuIpcCloseMemHandle`). Closing a
    /// pointer that is not open is `INVALID_VALUE`.
    fn ipc_close_mem_handle(&self, ptr: DevicePtr) -> DriverResult<()>;

    // ---- streams and events --------------------------------------------------------------

    /// Create a stream in the current context (`cuStreamCreate`); `non_blocking` streams do
    /// not order themselves with the legacy default stream.
    fn stream_create(&self, non_blocking: bool) -> DriverResult<StreamId>;
    /// Destroy a stream (`cuStreamDestroy`); work already queued still completes.
    fn stream_destroy(&self, stream: StreamId) -> DriverResult<()>;
    /// Wait for all work queued on `stream` (`cuStreamSynchronize`).
    fn stream_synchronize(&self, stream: StreamId) -> DriverResult<()>;
    /// Whether all work queued on `stream` is complete (`cuStreamQuery`).
    fn stream_query(&self, stream: StreamId) -> DriverResult<bool>;
    /// Make future work on `stream` wait for `event` (`cuStreamWaitEvent`).
    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> DriverResult<()>;
    /// Create an event in the current context (`cuEventCreate`).
    fn event_create(&self) -> DriverResult<EventId>;
    /// Destroy an event (`cuEventDestroy`).
    fn event_destroy(&self, event: EventId) -> DriverResult<()>;
    /// Capture the work queued on `stream` so far in `event` (`cuEventRecord`).
    fn event_record(&self, event: EventId, stream: StreamId) -> DriverResult<()>;
    /// Whether the work captured by `event` is complete (`cuEventQuery`).
    fn event_query(&self, event: EventId) -> DriverResult<bool>;
    /// Wait for the work captured by `event` (`cuEventSynchronize`).
    fn event_synchronize(&self, event: EventId) -> DriverResult<()>;

    // ---- data ----------------------------------------------------------------------------

    /// Copy host bytes to device-accessible memory (`cuMemcpyHtoD[Async]`).
    fn memcpy_htod(&self, dst: DevicePtr, src: &[u8], stream: Option<StreamId>)
        -> DriverResult<()>;
    /// Copy device-accessible memory to host bytes (`cuMemcpyDtoH[Async]`). Returns once `dst`
    /// holds the bytes, as CUDA does for pageable destinations.
    fn memcpy_dtoh(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: Option<StreamId>,
    ) -> DriverResult<()>;
    /// Copy between device-accessible addresses (`cuMemcpy[Async]` under unified addressing).
    fn memcpy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
        stream: Option<StreamId>,
    ) -> DriverResult<()>;
    /// Set `size` bytes to `value` (`cuMemsetD8[Async]`).
    fn memset_d8(
        &self,
        dst: DevicePtr,
        value: u8,
        size: usize,
        stream: Option<StreamId>,
    ) -> DriverResult<()>;
    /// A host load from pinned, registered or managed memory (the CPU reading it directly).
    fn host_read(&self, src: HostPtr, dst: &mut [u8]) -> DriverResult<()>;
    /// A host store to pinned, registered or managed memory (the CPU writing it directly).
    fn host_write(&self, dst: HostPtr, src: &[u8]) -> DriverResult<()>;

    // ---- the host's clock ----------------------------------------------------------------

    /// The host's clock in nanoseconds from an arbitrary start, never going back: what a
    /// resource weighs the time its driver calls take against (a tight segment's moves). The
    /// default is the monotonic clock; a simulated GPU gives its virtual time, which only its
    /// calls and [`Driver::host_sleep`] advance.
    fn host_clock_ns(&self) -> u64 {
        monotonic_ns()
    }

    /// The host does other work for `ns` nanoseconds (a replay keeping its log's pace): the
    /// default sleeps; a simulated GPU advances its virtual time, so that the device runs on
    /// meanwhile.
    fn host_sleep(&self, ns: u64) {
        std::thread::sleep(std::time::Duration::from_nanos(ns));
    }
}

/// Nanoseconds of the monotonic clock since the first call in this process.
fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Every method of [`Driver`], written once: `class name(args) -> result;`, where `class` is
/// the [`counting::CallClass`] a [`counting::CountingDriver`] counts the call as, or `Uncounted`
/// for the calls that never reach the GPU.
///
/// `with_driver_methods!(m)` calls the macro `m!` with the whole list; the forwarding impls
/// (`Arc<T>` below, `CountingDriver`) are generated from it, so a method added to the trait is
/// added here once. A method left out of the list is a compile error in those impls, except a
/// method with a default body: keep every method here, defaults included.
macro_rules! with_driver_methods {
    ($m:ident) => {
        $m! {
            Uncounted backend_name() -> &'static str;
            Uncounted is_simulated() -> bool;
            Other device_count() -> DriverResult<u32>;
            Other device_properties(device: DeviceId) -> DriverResult<DeviceProperties>;
            Other primary_context(device: DeviceId) -> DriverResult<ContextId>;
            Other set_current_context(ctx: ContextId) -> DriverResult<()>;
            Other current_context() -> DriverResult<ContextId>;
            Other context_device(ctx: ContextId) -> DriverResult<DeviceId>;
            Ordering context_synchronize() -> DriverResult<()>;
            Other can_access_peer(device: DeviceId, peer: DeviceId) -> DriverResult<bool>;
            Other enable_peer_access(peer: ContextId) -> DriverResult<()>;
            Memory mem_alloc(size: usize) -> DriverResult<DevicePtr>;
            Memory mem_free(ptr: DevicePtr) -> DriverResult<()>;
            Memory mem_alloc_async(size: usize, stream: StreamId) -> DriverResult<DevicePtr>;
            Memory mem_alloc_from_pool_async(size: usize, pool: MemPoolId, stream: StreamId) -> DriverResult<DevicePtr>;
            Memory mem_free_async(ptr: DevicePtr, stream: StreamId) -> DriverResult<()>;
            Other mem_pool_create(device: DeviceId) -> DriverResult<MemPoolId>;
            Other mem_pool_destroy(pool: MemPoolId) -> DriverResult<()>;
            Other device_default_mem_pool(device: DeviceId) -> DriverResult<MemPoolId>;
            Other mem_pool_set_release_threshold(pool: MemPoolId, bytes: u64) -> DriverResult<()>;
            Memory mem_pool_trim_to(pool: MemPoolId, min_bytes_to_keep: u64) -> DriverResult<()>;
            Other mem_pool_usage(pool: MemPoolId) -> DriverResult<MemPoolUsage>;
            Other mem_get_allocation_granularity(device: DeviceId) -> DriverResult<usize>;
            Memory mem_address_reserve(size: usize, alignment: usize) -> DriverResult<DevicePtr>;
            Memory mem_address_free(ptr: DevicePtr, size: usize) -> DriverResult<()>;
            Memory mem_create(size: usize, device: DeviceId) -> DriverResult<PhysHandle>;
            Memory mem_release(handle: PhysHandle) -> DriverResult<()>;
            Memory mem_map(ptr: DevicePtr, size: usize, handle: PhysHandle) -> DriverResult<()>;
            Memory mem_unmap(ptr: DevicePtr, size: usize) -> DriverResult<()>;
            Memory mem_set_access(ptr: DevicePtr, size: usize, device: DeviceId) -> DriverResult<()>;
            Memory mem_alloc_managed(size: usize, attach_global: bool) -> DriverResult<DevicePtr>;
            Other mem_advise(ptr: DevicePtr, size: usize, advice: Advice, location: Location) -> DriverResult<()>;
            Other mem_prefetch(ptr: DevicePtr, size: usize, location: Location, stream: StreamId) -> DriverResult<()>;
            Memory host_alloc(size: usize, flags: HostAllocFlags) -> DriverResult<HostPtr>;
            Memory host_free(ptr: HostPtr) -> DriverResult<()>;
            Memory host_register(ptr: HostPtr, size: usize, mapped: bool) -> DriverResult<()>;
            Memory host_unregister(ptr: HostPtr) -> DriverResult<()>;
            Other host_device_pointer(ptr: HostPtr) -> DriverResult<DevicePtr>;
            Other pageable_alloc(size: usize) -> DriverResult<HostPtr>;
            Other pageable_free(ptr: HostPtr) -> DriverResult<()>;
            Other mem_get_info() -> DriverResult<MemInfo>;
            Other mem_get_address_range(ptr: DevicePtr) -> DriverResult<(DevicePtr, usize)>;
            Other ipc_get_mem_handle(base: DevicePtr) -> DriverResult<IpcMemHandle>;
            Other ipc_open_mem_handle(handle: &IpcMemHandle) -> DriverResult<DevicePtr>;
            Other ipc_close_mem_handle(ptr: DevicePtr) -> DriverResult<()>;
            Other stream_create(non_blocking: bool) -> DriverResult<StreamId>;
            Other stream_destroy(stream: StreamId) -> DriverResult<()>;
            Ordering stream_synchronize(stream: StreamId) -> DriverResult<()>;
            Ordering stream_query(stream: StreamId) -> DriverResult<bool>;
            Ordering stream_wait_event(stream: StreamId, event: EventId) -> DriverResult<()>;
            Other event_create() -> DriverResult<EventId>;
            Other event_destroy(event: EventId) -> DriverResult<()>;
            Ordering event_record(event: EventId, stream: StreamId) -> DriverResult<()>;
            Ordering event_query(event: EventId) -> DriverResult<bool>;
            Ordering event_synchronize(event: EventId) -> DriverResult<()>;
            Other memcpy_htod(dst: DevicePtr, src: &[u8], stream: Option<StreamId>) -> DriverResult<()>;
            Other memcpy_dtoh(dst: &mut [u8], src: DevicePtr, stream: Option<StreamId>) -> DriverResult<()>;
            Other memcpy_dtod(dst: DevicePtr, src: DevicePtr, size: usize, stream: Option<StreamId>) -> DriverResult<()>;
            Other memset_d8(dst: DevicePtr, value: u8, size: usize, stream: Option<StreamId>) -> DriverResult<()>;
            Other host_read(src: HostPtr, dst: &mut [u8]) -> DriverResult<()>;
            Other host_write(dst: HostPtr, src: &[u8]) -> DriverResult<()>;
            Uncounted host_clock_ns() -> u64;
            Uncounted host_sleep(ns: u64) -> ();
        }
    };
}

/// Forwards every call of a `Driver for Arc<T>` to the `T` inside.
macro_rules! forward_to_shared_driver {
    ($($class:ident $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        /// A shared driver is a driver: `Arc<dyn Driver>` (and `Arc<D>`) can stand wherever a
        /// driver is taken by value, e.g. `CudaResource<Arc<dyn Driver>>` for a driver chosen at
        /// run time.
        impl<T: Driver + ?Sized> Driver for std::sync::Arc<T> {
            $(
                #[inline]
                fn $name(&self, $($arg: $ty),*) -> $ret {
                    (**self).$name($($arg),*)
                }
            )*
        }
    };
}

pub(crate) use with_driver_methods;

with_driver_methods!(forward_to_shared_driver);
