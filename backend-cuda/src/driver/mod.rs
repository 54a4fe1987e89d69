//! [`CudaDriver`]: emm's [`Driver`] on a real GPU. No raw call lives here: each goes through
//! `result`, and every handle the caller passes is checked against the ones this driver made,
//! so a stale or foreign stream, event, pool or context is an error, never a crash.
//!
//! Modules: this one holds the [`Driver`] calls; `setup` opening the GPU and the calls beyond
//! [`Driver`]; `handles` the handles this driver made and the checks against them.

mod handles;
mod setup;

use std::cell::Cell;
use std::sync::Mutex;

use cudarc::driver::sys;
use emm_core::units::Bytes;
use emm_core::{
    Advice, ContextId, CudaCode, DeviceId, DeviceProperties, DevicePtr, Driver, DriverError,
    DriverResult, EventId, HostAllocFlags, HostPtr, IpcMemHandle, Location, MemInfo, MemPoolId,
    MemPoolUsage, PhysHandle, StreamId,
};

use crate::result::{ctx, device, mem, stream, vmm};

use handles::{advice, location, zero, Dev, Handles, Phys};

/// Managed allocations are refused beyond this fraction of the device's free memory: asking
/// for more managed memory than a card has free can hang the GPU.
pub const MANAGED_FREE_FRACTION: f64 = 0.9;

/// Stream-ordered requests of at least this size are checked against free memory before the
/// driver sees them (`refuse_beyond_reach`).
const LARGE_REQUEST: u64 = 1 << 30;

thread_local! {
    /// Whether this thread has a current context (set by us or found on first use).
    static HAS_CONTEXT: Cell<bool> = const { Cell::new(false) };
}

/// The CUDA driver through cudarc.
///
/// Creating one loads `libcuda`, initializes the driver, retains every device's primary context
/// and sets each default memory pool's release threshold to the maximum (CUDA's default of 0
/// made a synchronized async alloc/free pair 56× slower when measured on an H100).
pub struct CudaDriver {
    devices: Vec<Dev>,
    handles: Mutex<Handles>,
}

impl std::fmt::Debug for CudaDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDriver")
            .field("devices", &self.devices.len())
            .finish_non_exhaustive()
    }
}

fn as_stream(raw: u64) -> sys::CUstream {
    raw as sys::CUstream
}

impl Driver for CudaDriver {
    fn backend_name(&self) -> &'static str {
        "cuda"
    }

    fn is_simulated(&self) -> bool {
        false
    }

    fn device_count(&self) -> DriverResult<u32> {
        Ok(self.devices.len() as u32)
    }

    fn device_properties(&self, d: DeviceId) -> DriverResult<DeviceProperties> {
        use sys::CUdevice_attribute as A;
        let cu = self.dev(d)?.cu;
        Ok(DeviceProperties {
            name: device::name(cu)?,
            total_memory: device::total_mem(cu)? as u64,
            can_map_host_memory: device::attribute(cu, A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)?
                != 0,
            concurrent_managed_access: device::attribute(
                cu,
                A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
            )? != 0,
            supports_ipc: device::attribute(cu, A::CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED)? != 0,
            supports_memory_pools: device::attribute(
                cu,
                A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
            )? != 0,
        })
    }

    fn primary_context(&self, d: DeviceId) -> DriverResult<ContextId> {
        Ok(ContextId(self.dev(d)?.ctx))
    }

    fn set_current_context(&self, c: ContextId) -> DriverResult<()> {
        self.ctx_device(c)?;
        ctx::set_current(c.0 as sys::CUcontext)?;
        HAS_CONTEXT.with(|h| h.set(true));
        Ok(())
    }

    fn current_context(&self) -> DriverResult<ContextId> {
        self.ensure_context()?;
        Ok(ContextId(ctx::get_current()? as u64))
    }

    fn context_device(&self, c: ContextId) -> DriverResult<DeviceId> {
        self.ctx_device(c).map(DeviceId)
    }

    fn context_synchronize(&self) -> DriverResult<()> {
        self.ensure_context()?;
        ctx::synchronize()
    }

    fn can_access_peer(&self, d: DeviceId, peer: DeviceId) -> DriverResult<bool> {
        let (a, b) = (self.dev(d)?.cu, self.dev(peer)?.cu);
        if a == b {
            return Ok(false);
        }
        device::can_access_peer(a, b)
    }

    fn enable_peer_access(&self, peer: ContextId) -> DriverResult<()> {
        self.ctx_device(peer)?;
        self.ensure_context()?;
        ctx::enable_peer_access(peer.0 as sys::CUcontext)
    }

    fn mem_alloc(&self, size: usize) -> DriverResult<DevicePtr> {
        if size == 0 {
            return Err(zero("cuMemAlloc"));
        }
        self.ensure_context()?;
        let p = mem::alloc(size)?;
        self.lock().device.insert(p, size);
        Ok(DevicePtr(p))
    }

    fn mem_free(&self, ptr: DevicePtr) -> DriverResult<()> {
        self.ensure_context()?;
        let r = mem::free(ptr.0);
        if r.is_ok() {
            let mut h = self.lock();
            h.host.managed.remove(&ptr.0);
            h.device.remove(&ptr.0);
        }
        r
    }

    fn mem_alloc_async(&self, size: usize, s: StreamId) -> DriverResult<DevicePtr> {
        if size == 0 {
            return Err(zero("cuMemAllocAsync"));
        }
        let raw = self.stream(s)?;
        self.ensure_context()?;
        if size as u64 >= LARGE_REQUEST {
            let pool = self.dev(DeviceId(self.current_device()?))?.default_pool;
            self.refuse_beyond_reach("cuMemAllocAsync", size, MemPoolId(pool))?;
        }
        let p = mem::alloc_async(size, raw)?;
        self.lock().device.insert(p, size);
        Ok(DevicePtr(p))
    }

    fn mem_alloc_from_pool_async(
        &self,
        size: usize,
        pool: MemPoolId,
        s: StreamId,
    ) -> DriverResult<DevicePtr> {
        if size == 0 {
            return Err(zero("cuMemAllocFromPoolAsync"));
        }
        let (raw, p) = (self.stream(s)?, self.pool(pool)?);
        self.ensure_context()?;
        if size as u64 >= LARGE_REQUEST {
            self.refuse_beyond_reach("cuMemAllocFromPoolAsync", size, pool)?;
        }
        let ptr = mem::alloc_from_pool_async(size, p, raw)?;
        self.lock().device.insert(ptr, size);
        Ok(DevicePtr(ptr))
    }

    fn mem_free_async(&self, ptr: DevicePtr, s: StreamId) -> DriverResult<()> {
        let raw = self.stream(s)?;
        self.ensure_context()?;
        mem::free_async(ptr.0, raw)?;
        let mut h = self.lock();
        h.device.remove(&ptr.0);
        h.host.managed.remove(&ptr.0);
        Ok(())
    }

    fn mem_pool_create(&self, d: DeviceId) -> DriverResult<MemPoolId> {
        self.dev(d)?;
        let p = mem::pool_create(d.0 as i32)? as u64;
        self.lock().pools.insert(p, d.0);
        Ok(MemPoolId(p))
    }

    fn mem_pool_destroy(&self, pool: MemPoolId) -> DriverResult<()> {
        if self.devices.iter().any(|d| d.default_pool == pool.0) {
            return Err(DriverError::new(
                "cuMemPoolDestroy",
                CudaCode::INVALID_VALUE,
                format!("{pool} is a device's default pool and cannot be destroyed"),
            ));
        }
        let p = self.pool(pool)?;
        mem::pool_destroy(p)?;
        self.lock().pools.remove(&pool.0);
        Ok(())
    }

    fn device_default_mem_pool(&self, d: DeviceId) -> DriverResult<MemPoolId> {
        Ok(MemPoolId(self.dev(d)?.default_pool))
    }

    fn mem_pool_set_release_threshold(&self, pool: MemPoolId, bytes: u64) -> DriverResult<()> {
        mem::pool_set_release_threshold(self.pool(pool)?, bytes)
    }

    fn mem_pool_trim_to(&self, pool: MemPoolId, keep: u64) -> DriverResult<()> {
        mem::pool_trim_to(
            self.pool(pool)?,
            usize::try_from(keep).unwrap_or(usize::MAX),
        )
    }

    fn mem_pool_usage(&self, pool: MemPoolId) -> DriverResult<MemPoolUsage> {
        use sys::CUmemPool_attribute as A;
        let p = self.pool(pool)?;
        Ok(MemPoolUsage {
            reserved: mem::pool_get_u64(p, A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            used: mem::pool_get_u64(p, A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
        })
    }

    fn mem_get_allocation_granularity(&self, d: DeviceId) -> DriverResult<usize> {
        self.dev(d)?;
        vmm::granularity(d.0 as i32)
    }

    fn mem_address_reserve(&self, size: usize, alignment: usize) -> DriverResult<DevicePtr> {
        if size == 0 {
            return Err(zero("cuMemAddressReserve"));
        }
        self.ensure_context()?;
        let p = vmm::address_reserve(size, alignment)?;
        self.lock().reservations.insert(p, size);
        Ok(DevicePtr(p))
    }

    fn mem_address_free(&self, ptr: DevicePtr, size: usize) -> DriverResult<()> {
        let mut h = self.lock();
        let refuse = |code, why: String| {
            Err(DriverError::new(
                "cuMemAddressFree",
                code,
                format!("{ptr}: {why}"),
            ))
        };
        match h.reservations.get(&ptr.0) {
            None => {
                return refuse(
                    CudaCode::INVALID_VALUE,
                    "not a live reservation of this driver (freed, or never reserved)".into(),
                )
            }
            Some(&n) if n != size => {
                return refuse(
                    CudaCode::INVALID_VALUE,
                    format!("it was reserved with {n} bytes, not {size}"),
                )
            }
            Some(_) => {}
        }
        if let Some((&at, &(n, _))) = h.mappings.range(ptr.0..ptr.0 + size as u64).next() {
            return refuse(
                CudaCode::ILLEGAL_STATE,
                format!(
                    "{} is still mapped at {at:#x}; unmap it first",
                    Bytes(n as u64)
                ),
            );
        }
        vmm::address_free(ptr.0, size)?;
        h.reservations.remove(&ptr.0);
        Ok(())
    }

    fn mem_create(&self, size: usize, d: DeviceId) -> DriverResult<PhysHandle> {
        if size == 0 {
            return Err(zero("cuMemCreate"));
        }
        self.dev(d)?;
        self.ensure_context()?;
        let handle = vmm::create(size, d.0 as i32)?;
        self.lock().phys.insert(handle, Phys { size, mappings: 0 });
        Ok(PhysHandle(handle))
    }

    fn mem_release(&self, handle: PhysHandle) -> DriverResult<()> {
        let mut h = self.lock();
        match h.phys.get(&handle.0) {
            None => Err(DriverError::new(
                "cuMemRelease",
                CudaCode::INVALID_VALUE,
                format!("{handle} is not live physical memory of this driver (released already, or never created)"),
            )),
            Some(p) if p.mappings > 0 => Err(DriverError::new(
                "cuMemRelease",
                CudaCode::ILLEGAL_STATE,
                format!("{handle} is still mapped {} time(s); unmap it first", p.mappings),
            )),
            Some(_) => {
                vmm::release(handle.0)?;
                h.phys.remove(&handle.0);
                Ok(())
            }
        }
    }

    fn mem_map(&self, ptr: DevicePtr, size: usize, handle: PhysHandle) -> DriverResult<()> {
        let mut h = self.lock();
        match h.phys.get(&handle.0) {
            Some(p) if size <= p.size => {}
            Some(p) => {
                return Err(DriverError::new(
                    "cuMemMap",
                    CudaCode::INVALID_VALUE,
                    format!("{size} bytes asked of {handle}, which has {}", p.size),
                ))
            }
            None => {
                return Err(DriverError::new(
                    "cuMemMap",
                    CudaCode::INVALID_VALUE,
                    format!("{handle} is not live physical memory of this driver"),
                ))
            }
        }
        if size == 0 {
            return Err(zero("cuMemMap"));
        }
        self.ensure_context()?;
        vmm::map(ptr.0, size, handle.0)?;
        h.mappings.insert(ptr.0, (size, handle.0));
        if let Some(p) = h.phys.get_mut(&handle.0) {
            p.mappings += 1;
        }
        Ok(())
    }

    fn mem_unmap(&self, ptr: DevicePtr, size: usize) -> DriverResult<()> {
        if size == 0 {
            return Err(zero("cuMemUnmap"));
        }
        self.ensure_context()?;
        let mut h = self.lock();
        let end = ptr.0.saturating_add(size as u64);
        let gone: Vec<(u64, u64)> = h
            .mappings
            .range(ptr.0..end)
            .map(|(&at, &(_, handle))| (at, handle))
            .collect();
        // CUDA accepts an unmap of a range with nothing mapped; the simulator does not, and
        // neither does this driver: a caller unmapping what it never mapped has lost track.
        if gone.is_empty() {
            return Err(DriverError::new(
                "cuMemUnmap",
                CudaCode::INVALID_VALUE,
                format!("nothing is mapped at {ptr}+{size}; unmap what mem_map mapped"),
            ));
        }
        vmm::unmap(ptr.0, size)?;
        for (at, handle) in gone {
            h.mappings.remove(&at);
            if let Some(p) = h.phys.get_mut(&handle) {
                p.mappings = p.mappings.saturating_sub(1);
            }
        }
        Ok(())
    }

    fn mem_set_access(&self, ptr: DevicePtr, size: usize, d: DeviceId) -> DriverResult<()> {
        if size == 0 {
            return Err(zero("cuMemSetAccess"));
        }
        self.dev(d)?;
        self.ensure_context()?;
        vmm::set_access(ptr.0, size, d.0 as i32)
    }

    fn mem_alloc_managed(&self, size: usize, attach_global: bool) -> DriverResult<DevicePtr> {
        if size == 0 {
            return Err(zero("cuMemAllocManaged"));
        }
        self.ensure_context()?;
        let (free, _) = mem::get_info()?;
        let cap = (free as f64 * MANAGED_FREE_FRACTION) as usize;
        if size > cap {
            return Err(DriverError::new(
                "cuMemAllocManaged",
                CudaCode::OUT_OF_MEMORY,
                format!(
                    "refused {} of managed memory: more than {:.0} % of the device's {} free; oversubscribing managed memory can hang a real GPU",
                    Bytes(size as u64),
                    MANAGED_FREE_FRACTION * 100.0,
                    Bytes(free as u64)
                ),
            ));
        }
        let p = mem::alloc_managed(size, attach_global)?;
        self.lock().host.managed.insert(p, size);
        Ok(DevicePtr(p))
    }

    fn mem_advise(&self, ptr: DevicePtr, size: usize, a: Advice, l: Location) -> DriverResult<()> {
        if let Location::Device(d) = l {
            self.dev(d)?;
        }
        self.ensure_context()?;
        mem::advise(ptr.0, size, advice(a), location(l))
    }

    fn mem_prefetch(
        &self,
        ptr: DevicePtr,
        size: usize,
        l: Location,
        s: StreamId,
    ) -> DriverResult<()> {
        if let Location::Device(d) = l {
            self.dev(d)?;
        }
        let raw = self.stream(s)?;
        self.ensure_context()?;
        mem::prefetch(ptr.0, size, location(l), raw)
    }

    fn host_alloc(&self, size: usize, f: HostAllocFlags) -> DriverResult<HostPtr> {
        if size == 0 {
            return Err(zero("cuMemHostAlloc"));
        }
        self.ensure_context()?;
        let flags =
            u32::from(f.portable) | u32::from(f.mapped) << 1 | u32::from(f.write_combined) << 2;
        let p = mem::host_alloc(size, flags)?;
        self.lock().host.pinned.insert(p, size);
        Ok(HostPtr(p))
    }

    fn host_free(&self, ptr: HostPtr) -> DriverResult<()> {
        let mut h = self.lock();
        if !h.host.pinned.contains_key(&ptr.0) {
            return Err(DriverError::new(
                "cuMemFreeHost",
                CudaCode::INVALID_VALUE,
                format!("{ptr} is not pinned memory from host_alloc (or was freed already)"),
            ));
        }
        mem::free_host(ptr.0)?;
        h.host.pinned.remove(&ptr.0);
        Ok(())
    }

    fn host_register(&self, ptr: HostPtr, size: usize, mapped: bool) -> DriverResult<()> {
        if size == 0 {
            return Err(zero("cuMemHostRegister"));
        }
        self.ensure_context()?;
        mem::host_register(ptr.0, size, mapped)?;
        self.lock().host.registered.insert(ptr.0, size);
        Ok(())
    }

    fn host_unregister(&self, ptr: HostPtr) -> DriverResult<()> {
        self.ensure_context()?;
        mem::host_unregister(ptr.0)?;
        self.lock().host.registered.remove(&ptr.0);
        Ok(())
    }

    fn host_device_pointer(&self, ptr: HostPtr) -> DriverResult<DevicePtr> {
        self.ensure_context()?;
        mem::host_device_pointer(ptr.0).map(DevicePtr)
    }

    fn pageable_alloc(&self, size: usize) -> DriverResult<HostPtr> {
        self.lock().host.pageable_alloc(size).map(HostPtr)
    }

    fn pageable_free(&self, ptr: HostPtr) -> DriverResult<()> {
        self.lock().host.pageable_free(ptr.0)
    }

    fn mem_get_info(&self) -> DriverResult<MemInfo> {
        self.ensure_context()?;
        let (free, total) = mem::get_info()?;
        Ok(MemInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    fn mem_get_address_range(&self, ptr: DevicePtr) -> DriverResult<(DevicePtr, usize)> {
        self.ensure_context()?;
        mem::get_address_range(ptr.0).map(|(b, s)| (DevicePtr(b), s))
    }

    fn ipc_get_mem_handle(&self, base: DevicePtr) -> DriverResult<IpcMemHandle> {
        self.ensure_context()?;
        mem::ipc_get_handle(base.0).map(IpcMemHandle)
    }

    fn ipc_open_mem_handle(&self, handle: &IpcMemHandle) -> DriverResult<DevicePtr> {
        self.ensure_context()?;
        mem::ipc_open_handle(&handle.0).map(DevicePtr)
    }

    fn ipc_close_mem_handle(&self, ptr: DevicePtr) -> DriverResult<()> {
        self.ensure_context()?;
        mem::ipc_close_handle(ptr.0)
    }

    fn stream_create(&self, non_blocking: bool) -> DriverResult<StreamId> {
        let d = self.current_device()?;
        let s = stream::create(non_blocking)? as u64;
        self.lock().streams.insert(s, d);
        Ok(StreamId(s))
    }

    fn stream_destroy(&self, s: StreamId) -> DriverResult<()> {
        if s == StreamId::DEFAULT || s == StreamId::PER_THREAD {
            return Err(DriverError::new(
                "cuStreamDestroy",
                CudaCode::INVALID_HANDLE,
                "a default stream (legacy or per-thread) cannot be destroyed",
            ));
        }
        if self.lock().borrowed.contains_key(&s.0) {
            return Err(DriverError::new(
                "cuStreamDestroy",
                CudaCode::INVALID_HANDLE,
                format!(
                    "{s} is borrowed from another library (adopt_stream): emm never destroys \
                     it; call forget_stream and let its owner destroy it"
                ),
            ));
        }
        let raw = self.stream(s)?;
        stream::destroy(raw)?;
        self.lock().streams.remove(&s.0);
        Ok(())
    }

    fn stream_synchronize(&self, s: StreamId) -> DriverResult<()> {
        let raw = self.stream(s)?;
        self.ensure_context()?;
        stream::synchronize(raw)
    }

    fn stream_query(&self, s: StreamId) -> DriverResult<bool> {
        let raw = self.stream(s)?;
        self.ensure_context()?;
        stream::query(raw)
    }

    fn stream_wait_event(&self, s: StreamId, e: EventId) -> DriverResult<()> {
        let (raw, ev) = (self.stream(s)?, self.event(e)?);
        self.ensure_context()?;
        stream::wait_event(raw, ev)
    }

    fn event_create(&self) -> DriverResult<EventId> {
        self.ensure_context()?;
        let e = stream::event_create()? as u64;
        self.lock().events.insert(e);
        Ok(EventId(e))
    }

    fn event_destroy(&self, e: EventId) -> DriverResult<()> {
        let ev = self.event(e)?;
        stream::event_destroy(ev)?;
        self.lock().events.remove(&e.0);
        Ok(())
    }

    fn event_record(&self, e: EventId, s: StreamId) -> DriverResult<()> {
        let (ev, raw) = (self.event(e)?, self.stream(s)?);
        self.ensure_context()?;
        stream::event_record(ev, raw)
    }

    fn event_query(&self, e: EventId) -> DriverResult<bool> {
        stream::event_query(self.event(e)?)
    }

    fn event_synchronize(&self, e: EventId) -> DriverResult<()> {
        stream::event_synchronize(self.event(e)?)
    }

    fn memcpy_htod(&self, dst: DevicePtr, src: &[u8], s: Option<StreamId>) -> DriverResult<()> {
        self.transfer(src.len(), s, |raw| {
            mem::htod(dst.0, src, raw)?;
            // A pinned source is copied by DMA after the call returns: wait, so that `src` may
            // be reused as soon as this returns (a pageable source is staged before it returns).
            if let Some(raw) = raw {
                if self
                    .lock()
                    .host
                    .pinned
                    .range(..=src.as_ptr() as u64)
                    .next_back()
                    .is_some_and(|(b, n)| (src.as_ptr() as u64) < b + *n as u64)
                {
                    stream::synchronize(raw)?;
                }
            }
            Ok(())
        })
    }

    fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr, s: Option<StreamId>) -> DriverResult<()> {
        self.transfer(dst.len(), s, |raw| {
            mem::dtoh(dst, src.0, raw)?;
            match raw {
                Some(raw) => stream::synchronize(raw),
                None => Ok(()),
            }
        })
    }

    fn memcpy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
        s: Option<StreamId>,
    ) -> DriverResult<()> {
        self.transfer(size, s, |raw| mem::copy(dst.0, src.0, size, raw))
    }

    fn memset_d8(
        &self,
        dst: DevicePtr,
        value: u8,
        size: usize,
        s: Option<StreamId>,
    ) -> DriverResult<()> {
        self.transfer(size, s, |raw| mem::set_d8(dst.0, value, size, raw))
    }

    fn host_read(&self, src: HostPtr, dst: &mut [u8]) -> DriverResult<()> {
        self.lock().host.read(src.0, dst)
    }

    fn host_write(&self, dst: HostPtr, src: &[u8]) -> DriverResult<()> {
        self.lock().host.write(dst.0, src)
    }
}
