//! The handles a [`CudaDriver`] made, and the checks that every handle a caller passes is one of
//! them: devices and their primary contexts, streams, events, pools, reservations, physical memory
//! and its mappings. A stale or foreign handle is an error, never a crash.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::MutexGuard;

use cudarc::driver::sys;
use emm_core::units::Bytes;
use emm_core::{
    Advice, ContextId, CudaCode, DeviceId, Driver, DriverError, DriverResult, EventId, Location,
    MemPoolId, StreamId,
};

use crate::host::HostRegions;
use crate::result::{ctx, mem};

use super::{as_stream, CudaDriver, HAS_CONTEXT};

pub(super) struct Dev {
    pub(super) cu: sys::CUdevice,
    pub(super) ctx: u64,
    pub(super) default_pool: u64,
}

/// Physical memory from `cuMemCreate`: its size and how many mappings it has.
pub(super) struct Phys {
    pub(super) size: usize,
    pub(super) mappings: u32,
}

#[derive(Default)]
pub(super) struct Handles {
    /// Live device allocations this driver made (`cuMemAlloc`, stream-ordered): base → bytes.
    pub(super) device: BTreeMap<u64, usize>,
    pub(super) streams: BTreeMap<u64, u32>,
    /// Streams of other libraries (CuPy, PyTorch, Numba) adopted with `adopt_stream`: raw
    /// handle → device. Borrowed: emm uses them and never destroys them.
    pub(super) borrowed: BTreeMap<u64, u32>,
    pub(super) events: BTreeSet<u64>,
    pub(super) pools: BTreeMap<u64, u32>,
    pub(super) host: HostRegions,
    /// Address reservations: base → size.
    pub(super) reservations: BTreeMap<u64, usize>,
    /// Physical allocations by handle.
    pub(super) phys: BTreeMap<u64, Phys>,
    /// Mappings: address → (size, physical handle).
    pub(super) mappings: BTreeMap<u64, (usize, u64)>,
}

pub(super) fn location(l: Location) -> sys::CUmemLocation {
    match l {
        Location::Host => mem::location(None),
        Location::Device(d) => mem::location(Some(d.0 as i32)),
    }
}

pub(super) fn advice(a: Advice) -> sys::CUmem_advise {
    use sys::CUmem_advise as A;
    match a {
        Advice::SetReadMostly => A::CU_MEM_ADVISE_SET_READ_MOSTLY,
        Advice::UnsetReadMostly => A::CU_MEM_ADVISE_UNSET_READ_MOSTLY,
        Advice::SetPreferredLocation => A::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
        Advice::UnsetPreferredLocation => A::CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
        Advice::SetAccessedBy => A::CU_MEM_ADVISE_SET_ACCESSED_BY,
        Advice::UnsetAccessedBy => A::CU_MEM_ADVISE_UNSET_ACCESSED_BY,
    }
}

pub(super) fn zero(call: &'static str) -> DriverError {
    DriverError::new(
        call,
        CudaCode::INVALID_VALUE,
        "size 0 was requested; ask for at least 1 byte",
    )
}

impl CudaDriver {
    pub(super) fn lock(&self) -> MutexGuard<'_, Handles> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes device 0's primary context current on a thread that has none, as the runtime API
    /// does.
    #[inline]
    pub(super) fn ensure_context(&self) -> DriverResult<()> {
        if HAS_CONTEXT.with(Cell::get) {
            return Ok(());
        }
        if ctx::get_current()?.is_null() {
            ctx::set_current(self.devices[0].ctx as sys::CUcontext)?;
        }
        HAS_CONTEXT.with(|c| c.set(true));
        Ok(())
    }

    pub(super) fn dev(&self, device: DeviceId) -> DriverResult<&Dev> {
        self.devices.get(device.0 as usize).ok_or_else(|| {
            DriverError::new(
                "cuDeviceGet",
                CudaCode::INVALID_DEVICE,
                format!(
                    "device {} does not exist; this machine has {} device(s)",
                    device.0,
                    self.devices.len()
                ),
            )
        })
    }

    pub(super) fn ctx_device(&self, c: ContextId) -> DriverResult<u32> {
        self.devices
            .iter()
            .position(|d| d.ctx == c.0)
            .map(|i| i as u32)
            .ok_or_else(|| {
                DriverError::new(
                    "cuCtxSetCurrent",
                    CudaCode::INVALID_CONTEXT,
                    format!(
                        "{c} is not a primary context of this driver; use primary_context(device)"
                    ),
                )
            })
    }

    pub(super) fn current_device(&self) -> DriverResult<u32> {
        self.ensure_context()?;
        let c = ctx::get_current()? as u64;
        self.ctx_device(ContextId(c))
    }

    /// Refuses a large stream-ordered request that cannot fit, before the driver sees it: one
    /// that exceeds the device's free memory plus what `pool` holds unused. On an H200 a
    /// refused near-total `cuMemAllocAsync` was followed by a sticky
    /// `CUDA_ERROR_ILLEGAL_ADDRESS` on the next copy of managed memory; the check keeps such
    /// requests away from the driver's failure path. Callers ask only for requests of at least
    /// [`LARGE_REQUEST`], so small ones cost one branch and no driver call.
    pub(super) fn refuse_beyond_reach(
        &self,
        call: &'static str,
        size: usize,
        pool: MemPoolId,
    ) -> DriverResult<()> {
        let usage = self.mem_pool_usage(pool)?;
        let idle = usage.reserved.saturating_sub(usage.used);
        let (free, _) = mem::get_info()?;
        let reach = (free as u64).saturating_add(idle);
        if size as u64 > reach {
            return Err(DriverError::new(
                call,
                CudaCode::OUT_OF_MEMORY,
                format!(
                    "requested {}: more than the device's {} free plus the pool's {} unused; free memory first",
                    Bytes(size as u64),
                    Bytes(free as u64),
                    Bytes(idle)
                ),
            ));
        }
        Ok(())
    }

    /// The raw stream for `s`, checked: the legacy default stream, or one this driver made.
    pub(super) fn stream(&self, s: StreamId) -> DriverResult<sys::CUstream> {
        if s == StreamId::DEFAULT || s == StreamId::PER_THREAD || {
            let h = self.lock();
            h.streams.contains_key(&s.0) || h.borrowed.contains_key(&s.0)
        } {
            Ok(as_stream(s.0))
        } else {
            Err(DriverError::new(
                "cuStream*",
                CudaCode::INVALID_HANDLE,
                format!("{s} is not a live stream of this driver (destroyed, or never created)"),
            ))
        }
    }

    pub(super) fn opt_stream(&self, s: Option<StreamId>) -> DriverResult<Option<sys::CUstream>> {
        s.map(|s| self.stream(s)).transpose()
    }

    /// Runs a copy or set of `size` bytes through `run`, on `s`'s raw stream (`None`: the
    /// synchronous call) with a context current. An empty one does nothing, not even check `s`.
    pub(super) fn transfer(
        &self,
        size: usize,
        s: Option<StreamId>,
        run: impl FnOnce(Option<sys::CUstream>) -> DriverResult<()>,
    ) -> DriverResult<()> {
        if size == 0 {
            return Ok(());
        }
        let raw = self.opt_stream(s)?;
        self.ensure_context()?;
        run(raw)
    }

    pub(super) fn event(&self, e: EventId) -> DriverResult<sys::CUevent> {
        if self.lock().events.contains(&e.0) {
            Ok(e.0 as sys::CUevent)
        } else {
            Err(DriverError::new(
                "cuEvent*",
                CudaCode::INVALID_HANDLE,
                format!("{e} is not a live event of this driver (destroyed, or never created)"),
            ))
        }
    }

    pub(super) fn pool(&self, p: MemPoolId) -> DriverResult<sys::CUmemoryPool> {
        if self.devices.iter().any(|d| d.default_pool == p.0)
            || self.lock().pools.contains_key(&p.0)
        {
            Ok(p.0 as sys::CUmemoryPool)
        } else {
            Err(DriverError::new(
                "cuMemPool*",
                CudaCode::INVALID_VALUE,
                format!("{p} is not a live memory pool of this driver"),
            ))
        }
    }
}
