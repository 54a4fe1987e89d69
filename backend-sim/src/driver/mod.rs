//! [`SimDriver`]: one simulated process on a simulated machine, implementing [`Driver`].
//!
//! Modules: this one holds the driver calls; `inspect` the simulator-only API (reports,
//! traces, faults, virtual time).

mod inspect;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use emm_core::attribution::current_caller;
use emm_core::{
    Advice, CudaCode, DeviceId, DeviceProperties, DevicePtr, Driver, DriverResult, EventId,
    HostAllocFlags, HostPtr, IpcMemHandle, Location, MemInfo, MemPoolId, MemPoolUsage, PhysHandle,
    StreamId,
};

use crate::allocation_table::AllocKind;
use crate::config::SimConfig;
use crate::state::State;
use crate::trace::{CallKind, TraceEvent};

static NEXT_MACHINE: AtomicU64 = AtomicU64::new(1);

/// A simulated machine: devices, memory and streams shared by its processes.
struct SimMachine {
    state: Mutex<State>,
}

/// One process on a simulated machine; implements [`Driver`].
///
/// Cloning gives another handle to the same process (for other threads). [`SimDriver::process`]
/// starts another process on the same machine, for IPC.
///
/// # Examples
///
/// ```
/// use emm_core::Driver;
/// use emm_sim::{SimConfig, SimDriver};
///
/// let gpu = SimDriver::new(SimConfig::new(7)).unwrap();
/// let ptr = gpu.mem_alloc(4096).unwrap();
/// gpu.memcpy_htod(ptr, b"hello", None).unwrap();
/// let mut back = [0u8; 5];
/// gpu.memcpy_dtoh(&mut back, ptr, None).unwrap();
/// assert_eq!(&back, b"hello");
/// gpu.mem_free(ptr).unwrap();
/// assert!(gpu.report().is_clean());
/// ```
#[derive(Clone)]
pub struct SimDriver {
    machine: Arc<SimMachine>,
    process: u32,
}

impl std::fmt::Debug for SimDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDriver")
            .field("process", &self.process)
            .finish_non_exhaustive()
    }
}

/// A value a call returns, as the trace records it.
trait Traced {
    fn traced(&self) -> u64;
}

macro_rules! traced {
    ($($t:ty => |$v:ident| $e:expr;)*) => { $(impl Traced for $t { fn traced(&self) -> u64 { let $v = self; $e } })* };
}

traced! {
    () => |_v| 0;
    bool => |v| u64::from(*v);
    u32 => |v| u64::from(*v);
    u64 => |v| *v;
    MemInfo => |v| v.free;
    MemPoolUsage => |v| v.reserved;
    (u64, u64) => |v| v.0;
    IpcMemHandle => |v| u64::from_le_bytes(v.0[16..24].try_into().unwrap_or_default());
    DeviceProperties => |v| v.total_memory;
}

impl SimDriver {
    /// A new machine built from `config`, and its first process.
    ///
    /// # Errors
    ///
    /// The configuration is invalid; the message names the field.
    pub fn new(config: SimConfig) -> Result<Self, String> {
        config.validate()?;
        let id = NEXT_MACHINE.fetch_add(1, Ordering::Relaxed);
        // The machine id goes into IPC handles only (never into the trace), so that a handle
        // from another machine is refused.
        let mut state = State::new(config, id);
        state.add_process();
        Ok(SimDriver {
            machine: Arc::new(SimMachine {
                state: Mutex::new(state),
            }),
            process: 0,
        })
    }

    /// Starts another process on the same machine: it shares devices and memory, and has its
    /// own contexts, host memory and IPC mappings.
    pub fn process(&self) -> SimDriver {
        let p = self.lock().add_process();
        SimDriver {
            machine: Arc::clone(&self.machine),
            process: p,
        }
    }

    /// This process's number on its machine (0 for the first).
    pub fn process_id(&self) -> u32 {
        self.process
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held would be a simulator bug; the state is still usable.
        self.machine.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one driver call: fault injection, the operation, and its trace event.
    #[inline]
    fn call<T: Traced>(
        &self,
        call: CallKind,
        args: [u64; 3],
        op: impl FnOnce(&mut State, u32) -> DriverResult<T>,
    ) -> DriverResult<T> {
        let mut st = self.lock();
        st.call = call;
        st.caller = current_caller();
        let result = match st.injected_fault(call) {
            Some(code) => Err(st.err(
                code,
                "injected fault: the simulator was configured to fail this call",
            )),
            None => op(&mut st, self.process),
        };
        let event = TraceEvent {
            seq: 0,
            process: self.process,
            caller: st.caller,
            call,
            args,
            result: result.as_ref().map(Traced::traced).map_err(|e| e.code),
            time_ns: st.processes[self.process as usize].now,
        };
        st.audit.trace(event);
        result
    }
}

impl Driver for SimDriver {
    fn backend_name(&self) -> &'static str {
        "sim"
    }

    fn is_simulated(&self) -> bool {
        // A test machine may present itself as hardware, to exercise the plugin gate.
        !self.lock().cfg.present_as_hardware
    }

    fn host_clock_ns(&self) -> u64 {
        self.now_ns()
    }

    fn host_sleep(&self, ns: u64) {
        self.lock().charge(self.process, ns);
    }

    fn device_count(&self) -> DriverResult<u32> {
        self.call(CallKind::DeviceCount, [0; 3], |st, _| Ok(st.cfg.devices))
    }

    fn device_properties(&self, device: DeviceId) -> DriverResult<DeviceProperties> {
        self.call(
            CallKind::DeviceProperties,
            [u64::from(device.0), 0, 0],
            |st, _| {
                let d = st.device(device)?;
                Ok(DeviceProperties {
                    name: format!("emm-sim GPU {d}"),
                    total_memory: st.devices[d as usize].total,
                    can_map_host_memory: true,
                    concurrent_managed_access: st.cfg.concurrent_managed_access,
                    supports_ipc: st.cfg.supports_ipc,
                    supports_memory_pools: true,
                })
            },
        )
    }

    fn primary_context(&self, device: DeviceId) -> DriverResult<emm_core::ContextId> {
        self.call(
            CallKind::PrimaryContext,
            [u64::from(device.0), 0, 0],
            |st, p| {
                let d = st.device(device)?;
                Ok(u64::from(st.processes[p as usize].primary[d as usize]) + 1)
            },
        )
        .map(emm_core::ContextId)
    }

    fn set_current_context(&self, ctx: emm_core::ContextId) -> DriverResult<()> {
        self.call(CallKind::SetCurrentContext, [ctx.0, 0, 0], |st, p| {
            let c = st.context(p, ctx.0)?;
            st.processes[p as usize]
                .thread_ctx
                .insert(crate::state::thread_key(), c);
            Ok(())
        })
    }

    fn current_context(&self) -> DriverResult<emm_core::ContextId> {
        self.call(CallKind::CurrentContext, [0; 3], |st, p| {
            Ok(u64::from(st.current_ctx(p)) + 1)
        })
        .map(emm_core::ContextId)
    }

    fn context_device(&self, ctx: emm_core::ContextId) -> DriverResult<DeviceId> {
        self.call(CallKind::ContextDevice, [ctx.0, 0, 0], |st, p| {
            let c = st.context(p, ctx.0)?;
            Ok(st.contexts[c as usize].device)
        })
        .map(DeviceId)
    }

    fn context_synchronize(&self) -> DriverResult<()> {
        self.call(CallKind::ContextSynchronize, [0; 3], |st, p| {
            st.charge(p, st.cfg.costs.query_ns);
            let d = st.current_device(p);
            st.host_wait_device(p, d);
            Ok(())
        })
    }

    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> DriverResult<bool> {
        self.call(
            CallKind::CanAccessPeer,
            [u64::from(device.0), u64::from(peer.0), 0],
            |st, _| {
                let (a, b) = (st.device(device)?, st.device(peer)?);
                Ok(a != b && st.cfg.peer_access)
            },
        )
    }

    fn enable_peer_access(&self, peer: emm_core::ContextId) -> DriverResult<()> {
        self.call(CallKind::EnablePeerAccess, [peer.0, 0, 0], |st, p| {
            let pc = st.context(p, peer.0)?;
            let c = st.current_ctx(p);
            let (me, other) = (
                st.contexts[c as usize].device,
                st.contexts[pc as usize].device,
            );
            if me == other {
                return Err(st.err(
                    CudaCode::INVALID_DEVICE,
                    format!("device {me} cannot enable peer access to itself"),
                ));
            }
            if !st.cfg.peer_access {
                return Err(st.err(
                    CudaCode::PEER_ACCESS_UNSUPPORTED,
                    format!("device {me} cannot access device {other} on this machine"),
                ));
            }
            if st.contexts[c as usize].peers.contains(&other) {
                return Err(st.err(
                    CudaCode::PEER_ACCESS_ALREADY_ENABLED,
                    format!("device {me} already has access to device {other}"),
                ));
            }
            st.contexts[c as usize].peers.push(other);
            st.devices[other as usize].peer_mappings += 1;
            st.charge(p, st.cfg.costs.call_ns);
            Ok(())
        })
    }

    fn mem_alloc(&self, size: usize) -> DriverResult<DevicePtr> {
        self.call(CallKind::MemAlloc, [size as u64, 0, 0], |st, p| {
            st.mem_alloc(p, size)
        })
        .map(DevicePtr)
    }

    fn mem_free(&self, ptr: DevicePtr) -> DriverResult<()> {
        self.call(CallKind::MemFree, [ptr.0, 0, 0], |st, p| {
            st.mem_free(p, ptr.0)
        })
    }

    fn mem_alloc_async(&self, size: usize, stream: StreamId) -> DriverResult<DevicePtr> {
        self.call(
            CallKind::MemAllocAsync,
            [size as u64, stream.0, 0],
            |st, p| {
                let s = st.stream(p, stream)?;
                let pool = st.devices[st.streams[s].device as usize].current_pool;
                st.alloc_from_pool(p, size, pool, stream)
            },
        )
        .map(DevicePtr)
    }

    fn mem_alloc_from_pool_async(
        &self,
        size: usize,
        pool: MemPoolId,
        stream: StreamId,
    ) -> DriverResult<DevicePtr> {
        self.call(
            CallKind::MemAllocFromPoolAsync,
            [size as u64, pool.0, stream.0],
            |st, p| st.alloc_from_pool(p, size, pool.0, stream),
        )
        .map(DevicePtr)
    }

    fn mem_free_async(&self, ptr: DevicePtr, stream: StreamId) -> DriverResult<()> {
        self.call(CallKind::MemFreeAsync, [ptr.0, stream.0, 0], |st, p| {
            st.mem_free_async(p, ptr.0, stream)
        })
    }

    fn mem_pool_create(&self, device: DeviceId) -> DriverResult<MemPoolId> {
        self.call(
            CallKind::MemPoolCreate,
            [u64::from(device.0), 0, 0],
            |st, p| {
                let d = st.device(device)?;
                st.charge(p, st.cfg.costs.call_ns);
                Ok(st.mem_pool_create(d))
            },
        )
        .map(MemPoolId)
    }

    fn mem_pool_destroy(&self, pool: MemPoolId) -> DriverResult<()> {
        self.call(CallKind::MemPoolDestroy, [pool.0, 0, 0], |st, _| {
            st.mem_pool_destroy(pool.0)
        })
    }

    fn device_default_mem_pool(&self, device: DeviceId) -> DriverResult<MemPoolId> {
        self.call(
            CallKind::DeviceDefaultMemPool,
            [u64::from(device.0), 0, 0],
            |st, _| {
                let d = st.device(device)?;
                Ok(st.devices[d as usize].default_pool)
            },
        )
        .map(MemPoolId)
    }

    fn mem_pool_set_release_threshold(&self, pool: MemPoolId, bytes: u64) -> DriverResult<()> {
        self.call(
            CallKind::MemPoolSetReleaseThreshold,
            [pool.0, bytes, 0],
            |st, _| {
                st.pool(pool.0)?;
                if let Some(pl) = st.pools.get_mut(pool.0) {
                    pl.release_threshold = bytes;
                }
                Ok(())
            },
        )
    }

    fn mem_pool_trim_to(&self, pool: MemPoolId, min_bytes_to_keep: u64) -> DriverResult<()> {
        self.call(
            CallKind::MemPoolTrimTo,
            [pool.0, min_bytes_to_keep, 0],
            |st, _| {
                st.pool(pool.0)?;
                st.trim_pool(pool.0, min_bytes_to_keep);
                Ok(())
            },
        )
    }

    fn mem_pool_usage(&self, pool: MemPoolId) -> DriverResult<MemPoolUsage> {
        self.call(CallKind::MemPoolUsage, [pool.0, 0, 0], |st, _| {
            st.pool(pool.0)?;
            let pl = st.pools.live(pool.0).expect("checked");
            Ok(MemPoolUsage {
                reserved: pl.reserved,
                used: pl.used,
            })
        })
    }

    fn mem_get_allocation_granularity(&self, device: DeviceId) -> DriverResult<usize> {
        self.call(
            CallKind::MemGetAllocationGranularity,
            [u64::from(device.0), 0, 0],
            |st, p| st.mem_get_allocation_granularity(p, device),
        )
        .map(|g| g as usize)
    }

    fn mem_address_reserve(&self, size: usize, alignment: usize) -> DriverResult<DevicePtr> {
        self.call(
            CallKind::MemAddressReserve,
            [size as u64, alignment as u64, 0],
            |st, p| st.mem_address_reserve(p, size as u64, alignment as u64),
        )
        .map(DevicePtr)
    }

    fn mem_address_free(&self, ptr: DevicePtr, size: usize) -> DriverResult<()> {
        self.call(
            CallKind::MemAddressFree,
            [ptr.0, size as u64, 0],
            |st, p| st.mem_address_free(p, ptr.0, size as u64),
        )
    }

    fn mem_create(&self, size: usize, device: DeviceId) -> DriverResult<PhysHandle> {
        self.call(
            CallKind::MemCreate,
            [size as u64, u64::from(device.0), 0],
            |st, p| st.mem_create(p, size as u64, device),
        )
        .map(PhysHandle)
    }

    fn mem_release(&self, handle: PhysHandle) -> DriverResult<()> {
        self.call(CallKind::MemRelease, [handle.0, 0, 0], |st, p| {
            st.mem_release(p, handle.0)
        })
    }

    fn mem_map(&self, ptr: DevicePtr, size: usize, handle: PhysHandle) -> DriverResult<()> {
        self.call(CallKind::MemMap, [ptr.0, size as u64, handle.0], |st, p| {
            st.mem_map(p, ptr.0, size as u64, handle.0)
        })
    }

    fn mem_unmap(&self, ptr: DevicePtr, size: usize) -> DriverResult<()> {
        self.call(CallKind::MemUnmap, [ptr.0, size as u64, 0], |st, p| {
            st.mem_unmap(p, ptr.0, size as u64)
        })
    }

    fn mem_set_access(&self, ptr: DevicePtr, size: usize, device: DeviceId) -> DriverResult<()> {
        self.call(
            CallKind::MemSetAccess,
            [ptr.0, size as u64, u64::from(device.0)],
            |st, p| st.mem_set_access(p, ptr.0, size as u64, device),
        )
    }

    fn mem_alloc_managed(&self, size: usize, attach_global: bool) -> DriverResult<DevicePtr> {
        self.call(
            CallKind::MemAllocManaged,
            [size as u64, u64::from(attach_global), 0],
            |st, p| st.mem_alloc_managed(p, size, attach_global),
        )
        .map(DevicePtr)
    }

    fn mem_advise(
        &self,
        ptr: DevicePtr,
        size: usize,
        advice: Advice,
        location: Location,
    ) -> DriverResult<()> {
        self.call(
            CallKind::MemAdvise,
            [ptr.0, size as u64, advice as u64],
            |st, p| st.mem_advise(p, ptr.0, size as u64, advice, location),
        )
    }

    fn mem_prefetch(
        &self,
        ptr: DevicePtr,
        size: usize,
        location: Location,
        stream: StreamId,
    ) -> DriverResult<()> {
        let loc = match location {
            Location::Host => u64::MAX,
            Location::Device(d) => u64::from(d.0),
        };
        self.call(CallKind::MemPrefetch, [ptr.0, size as u64, loc], |st, p| {
            st.mem_prefetch(p, ptr.0, size as u64, location, stream)
        })
    }

    fn host_alloc(&self, size: usize, flags: HostAllocFlags) -> DriverResult<HostPtr> {
        let f = u64::from(flags.mapped)
            | u64::from(flags.portable) << 1
            | u64::from(flags.write_combined) << 2;
        self.call(CallKind::HostAlloc, [size as u64, f, 0], |st, p| {
            st.host_alloc(p, size, flags)
        })
        .map(HostPtr)
    }

    fn host_free(&self, ptr: HostPtr) -> DriverResult<()> {
        self.call(CallKind::HostFree, [ptr.0, 0, 0], |st, p| {
            st.host_free(p, ptr.0, true)
        })
    }

    fn host_register(&self, ptr: HostPtr, size: usize, mapped: bool) -> DriverResult<()> {
        self.call(
            CallKind::HostRegister,
            [ptr.0, size as u64, u64::from(mapped)],
            |st, p| st.host_register(p, ptr.0, size, mapped),
        )
    }

    fn host_unregister(&self, ptr: HostPtr) -> DriverResult<()> {
        self.call(CallKind::HostUnregister, [ptr.0, 0, 0], |st, p| {
            st.host_unregister(p, ptr.0)
        })
    }

    fn host_device_pointer(&self, ptr: HostPtr) -> DriverResult<DevicePtr> {
        self.call(CallKind::HostDevicePointer, [ptr.0, 0, 0], |st, p| {
            st.host_device_pointer(p, ptr.0)
        })
        .map(DevicePtr)
    }

    fn pageable_alloc(&self, size: usize) -> DriverResult<HostPtr> {
        self.call(CallKind::PageableAlloc, [size as u64, 0, 0], |st, p| {
            st.host_allocation(p, size, AllocKind::Pageable)
        })
        .map(HostPtr)
    }

    fn pageable_free(&self, ptr: HostPtr) -> DriverResult<()> {
        self.call(CallKind::PageableFree, [ptr.0, 0, 0], |st, p| {
            st.host_free(p, ptr.0, false)
        })
    }

    fn mem_get_info(&self) -> DriverResult<MemInfo> {
        self.call(CallKind::MemGetInfo, [0; 3], |st, p| Ok(st.mem_get_info(p)))
    }

    fn mem_get_address_range(&self, ptr: DevicePtr) -> DriverResult<(DevicePtr, usize)> {
        self.call(CallKind::MemGetAddressRange, [ptr.0, 0, 0], |st, p| {
            st.mem_get_address_range(p, ptr.0)
        })
        .map(|(b, s)| (DevicePtr(b), s as usize))
    }

    fn ipc_get_mem_handle(&self, base: DevicePtr) -> DriverResult<IpcMemHandle> {
        self.call(CallKind::IpcGetMemHandle, [base.0, 0, 0], |st, p| {
            st.ipc_get_mem_handle(p, base.0)
        })
    }

    fn ipc_open_mem_handle(&self, handle: &IpcMemHandle) -> DriverResult<DevicePtr> {
        self.call(CallKind::IpcOpenMemHandle, [0; 3], |st, p| {
            st.ipc_open_mem_handle(p, handle)
        })
        .map(DevicePtr)
    }

    fn ipc_close_mem_handle(&self, ptr: DevicePtr) -> DriverResult<()> {
        self.call(CallKind::IpcCloseMemHandle, [ptr.0, 0, 0], |st, p| {
            st.ipc_close_mem_handle(p, ptr.0)
        })
    }

    fn stream_create(&self, non_blocking: bool) -> DriverResult<StreamId> {
        self.call(
            CallKind::StreamCreate,
            [u64::from(non_blocking), 0, 0],
            |st, p| st.stream_create(p, non_blocking),
        )
        .map(StreamId)
    }

    fn stream_destroy(&self, stream: StreamId) -> DriverResult<()> {
        self.call(CallKind::StreamDestroy, [stream.0, 0, 0], |st, p| {
            st.stream_destroy(p, stream)
        })
    }

    fn stream_synchronize(&self, stream: StreamId) -> DriverResult<()> {
        self.call(CallKind::StreamSynchronize, [stream.0, 0, 0], |st, p| {
            st.stream_synchronize(p, stream)
        })
    }

    fn stream_query(&self, stream: StreamId) -> DriverResult<bool> {
        self.call(CallKind::StreamQuery, [stream.0, 0, 0], |st, p| {
            st.stream_query(p, stream)
        })
    }

    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> DriverResult<()> {
        self.call(
            CallKind::StreamWaitEvent,
            [stream.0, event.0, 0],
            |st, p| st.stream_wait_event(p, stream, event.0),
        )
    }

    fn event_create(&self) -> DriverResult<EventId> {
        self.call(CallKind::EventCreate, [0; 3], |st, p| st.event_create(p))
            .map(EventId)
    }

    fn event_destroy(&self, event: EventId) -> DriverResult<()> {
        self.call(CallKind::EventDestroy, [event.0, 0, 0], |st, p| {
            st.event_destroy(p, event.0)
        })
    }

    fn event_record(&self, event: EventId, stream: StreamId) -> DriverResult<()> {
        self.call(CallKind::EventRecord, [event.0, stream.0, 0], |st, p| {
            st.event_record(p, event.0, stream)
        })
    }

    fn event_query(&self, event: EventId) -> DriverResult<bool> {
        self.call(CallKind::EventQuery, [event.0, 0, 0], |st, p| {
            st.event_query(p, event.0)
        })
    }

    fn event_synchronize(&self, event: EventId) -> DriverResult<()> {
        self.call(CallKind::EventSynchronize, [event.0, 0, 0], |st, p| {
            st.event_synchronize(p, event.0)
        })
    }

    fn memcpy_htod(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        let s = stream.map_or(u64::MAX, |s| s.0);
        self.call(
            CallKind::MemcpyHtoD,
            [dst.0, src.len() as u64, s],
            |st, p| st.memcpy_htod(p, dst.0, src, stream),
        )
    }

    fn memcpy_dtoh(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        let s = stream.map_or(u64::MAX, |s| s.0);
        self.call(
            CallKind::MemcpyDtoH,
            [src.0, dst.len() as u64, s],
            |st, p| st.memcpy_dtoh(p, dst, src.0, stream),
        )
    }

    fn memcpy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        self.call(
            CallKind::MemcpyDtoD,
            [dst.0, src.0, size as u64],
            |st, p| st.memcpy_dtod(p, dst.0, src.0, size as u64, stream),
        )
    }

    fn memset_d8(
        &self,
        dst: DevicePtr,
        value: u8,
        size: usize,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        self.call(
            CallKind::MemsetD8,
            [dst.0, u64::from(value), size as u64],
            |st, p| st.memset_d8(p, dst.0, value, size as u64, stream),
        )
    }

    fn host_read(&self, src: HostPtr, dst: &mut [u8]) -> DriverResult<()> {
        self.call(CallKind::HostRead, [src.0, dst.len() as u64, 0], |st, p| {
            st.host_read(p, src.0, dst)
        })
    }

    fn host_write(&self, dst: HostPtr, src: &[u8]) -> DriverResult<()> {
        self.call(
            CallKind::HostWrite,
            [dst.0, src.len() as u64, 0],
            |st, p| st.host_write(p, dst.0, src),
        )
    }
}
