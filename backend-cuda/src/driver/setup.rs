//! Opening the GPU ([`CudaDriver::new`]) and what a [`CudaDriver`] offers beyond
//! [`Driver`](emm_core::Driver): bytes and allocations live, and streams adopted from their owner.

use std::sync::Mutex;

use emm_core::{
    ContextId, CudaCode, DeviceId, DevicePtr, Driver, DriverError, DriverResult, MemPoolId,
    StreamId,
};

use crate::result::{ctx, device, mem, stream};

use super::handles::{Dev, Handles};
use super::{as_stream, CudaDriver};

impl CudaDriver {
    /// Opens the GPU.
    ///
    /// # Errors
    ///
    /// `CUDA_ERROR_NO_DEVICE` when `libcuda` cannot be loaded or no device is visible; any
    /// error `cuInit` returns. Never panics, with or without a GPU.
    pub fn new() -> DriverResult<Self> {
        if !crate::result::driver_present() {
            return Err(DriverError::new(
                "cuInit",
                CudaCode::NO_DEVICE,
                "libcuda could not be loaded: this machine has no NVIDIA driver; use the simulated backend (--backend sim)",
            ));
        }
        crate::result::init()?;
        let n = device::count()?;
        if n == 0 {
            return Err(DriverError::new(
                "cuDeviceGetCount",
                CudaCode::NO_DEVICE,
                "the NVIDIA driver sees no GPU on this machine",
            ));
        }
        let mut devices = Vec::new();
        for ordinal in 0..n {
            let cu = device::get(ordinal)?;
            let c = ctx::primary_retain(cu)?;
            let pool = device::default_mem_pool(cu)?;
            mem::pool_set_release_threshold(pool, u64::MAX)?;
            devices.push(Dev {
                cu,
                ctx: c as u64,
                default_pool: pool as u64,
            });
        }
        let driver = CudaDriver {
            devices,
            handles: Mutex::new(Handles::default()),
        };
        driver.ensure_context()?;
        Ok(driver)
    }

    /// Device memory held through this driver: live allocations it made (device, stream-ordered
    /// and managed) plus what the pools it created keep in reserve beyond what they hand out
    /// (devices' default pools are left out: the driver itself draws on them). Unlike
    /// `cuMemGetInfo` this ignores the driver's own lazy allocations, so a leak check can use it.
    ///
    /// # Errors
    ///
    /// Reading a pool's attributes failed.
    pub fn allocated_bytes(&self) -> DriverResult<u64> {
        let (live, pools): (u64, Vec<u64>) = {
            let h = self.lock();
            let live = h
                .device
                .values()
                .chain(h.host.managed.values())
                .map(|n| *n as u64)
                .sum();
            let pools = h.pools.keys().copied().collect();
            (live, pools)
        };
        let mut spare = 0;
        for p in pools {
            let u = self.mem_pool_usage(MemPoolId(p))?;
            spare += u.reserved.saturating_sub(u.used);
        }
        Ok(live + spare)
    }

    /// Live device and managed allocations made through this driver, lowest address first.
    pub fn live_allocations(&self) -> Vec<(DevicePtr, usize)> {
        let h = self.lock();
        let mut v: Vec<(DevicePtr, usize)> = h
            .device
            .iter()
            .chain(h.host.managed.iter())
            .map(|(p, n)| (DevicePtr(*p), *n))
            .collect();
        v.sort();
        v
    }

    /// Adopts a stream another library created (a raw `CUstream` from CuPy, PyTorch or Numba)
    /// so that stream-ordered calls accept it: checked once with `cuStreamGetCtx`, which also
    /// tells its device. `0` and `1` (`CU_STREAM_LEGACY`) are the legacy default stream, `2` the
    /// per-thread one. The stream stays borrowed: emm never destroys it, and
    /// [`CudaDriver::forget_stream`] drops it from the list.
    ///
    /// # Errors
    ///
    /// `CUDA_ERROR_INVALID_HANDLE` (or the driver's code) for a handle that is not a live
    /// stream; `CUDA_ERROR_INVALID_CONTEXT` for a stream of a context that is not a device's
    /// primary context, or of a device other than `device`.
    pub fn adopt_stream(&self, raw: u64, device: DeviceId) -> DriverResult<StreamId> {
        match raw {
            0 | 1 => return Ok(StreamId::DEFAULT),
            2 => return Ok(StreamId::PER_THREAD),
            _ => {}
        }
        let known = {
            let h = self.lock();
            h.streams
                .get(&raw)
                .or_else(|| h.borrowed.get(&raw))
                .copied()
        };
        let d = match known {
            Some(d) => d,
            None => {
                self.ensure_context()?;
                let c = stream::get_ctx(as_stream(raw))?;
                let d = self.ctx_device(ContextId(c as u64)).map_err(|_| {
                    DriverError::new(
                        "cuStreamGetCtx",
                        CudaCode::INVALID_CONTEXT,
                        format!(
                            "stream {raw:#x} belongs to a context that is not a device's primary \
                             context; emm serves primary contexts only (as Numba, CuPy and \
                             PyTorch use)"
                        ),
                    )
                })?;
                self.lock().borrowed.insert(raw, d);
                d
            }
        };
        if d != device.0 {
            return Err(DriverError::new(
                "cuStreamGetCtx",
                CudaCode::INVALID_CONTEXT,
                format!(
                    "stream {raw:#x} belongs to device {d}, not device {}; pass the stream of \
                     the device you allocate on",
                    device.0
                ),
            ));
        }
        Ok(StreamId(raw))
    }

    /// Forgets a stream adopted with [`CudaDriver::adopt_stream`] (its owner is about to
    /// destroy it); returns whether it was adopted. Never destroys the stream.
    pub fn forget_stream(&self, s: StreamId) -> bool {
        self.lock().borrowed.remove(&s.0).is_some()
    }
}
