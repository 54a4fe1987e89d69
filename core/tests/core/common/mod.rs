//! Test helpers: a suballocating resource, so that pointers lie inside one driver allocation.

#![allow(dead_code, reason = "each test file uses a part")]

use std::sync::{Arc, Mutex};

use emm_core::mr::{CudaResource, DeviceMemoryResource, MrError, MrResult, PoolResource};
use emm_core::workloads::{self, Workload};
use emm_core::{DevicePtr, Driver, MemInfo, StreamId};
use emm_sim::{CallKind, SimConfig, SimDriver, GIB};

/// Two non-blocking streams: nothing orders them with each other or with the legacy default
/// stream.
pub fn two_streams(g: &SimDriver) -> (StreamId, StreamId) {
    (
        g.stream_create(true).unwrap(),
        g.stream_create(true).unwrap(),
    )
}

/// How many calls of `kind` the driver has seen (its trace must be on).
pub fn calls_of(g: &SimDriver, kind: CallKind) -> usize {
    g.trace().iter().filter(|e| e.call == kind).count()
}

/// A device of 80 GiB that keeps neither contents nor a trace: for replaying the standard
/// workloads, whose peaks need tens of GiB, at speed.
pub fn large_untraced_gpu() -> Arc<SimDriver> {
    let config = SimConfig::new(4)
        .memory_per_device(80 * GIB)
        .track_contents(false)
        .record_trace(false);
    Arc::new(SimDriver::new(config).unwrap())
}

/// A pool over `cuMemAlloc`, with the default options.
pub fn pool(g: &Arc<SimDriver>) -> PoolResource<CudaResource<SimDriver>> {
    PoolResource::new(CudaResource::new(Arc::clone(g)))
}

/// Replays `w` through `r` on the default stream; every free must succeed.
///
/// # Errors
///
/// The first allocation `r` refuses.
pub fn replay(r: &(impl DeviceMemoryResource + ?Sized), w: &Workload) -> MrResult<()> {
    workloads::replay(
        w,
        |size| r.allocate(size as usize, StreamId::DEFAULT),
        |p, size| r.deallocate(p, size as usize, StreamId::DEFAULT).unwrap(),
    )
}

/// Hands out 256-byte-aligned slices of one driver allocation (a bump suballocator, the
/// simplest "pool"); frees are only counted. No `memory_info`.
pub struct BumpResource {
    driver: Arc<SimDriver>,
    state: Mutex<(Option<DevicePtr>, u64, usize)>,
    capacity: u64,
}

impl BumpResource {
    pub fn new(driver: Arc<SimDriver>, capacity: u64) -> Self {
        BumpResource {
            driver,
            state: Mutex::new((None, 0, 0)),
            capacity,
        }
    }

    /// The driver allocation all slices come from (once one was handed out).
    pub fn chunk(&self) -> Option<DevicePtr> {
        self.state.lock().unwrap().0
    }

    /// Slices handed out and not returned.
    pub fn live(&self) -> usize {
        self.state.lock().unwrap().2
    }
}

impl DeviceMemoryResource for BumpResource {
    fn name(&self) -> &'static str {
        "BumpResource"
    }

    fn allocate(&self, bytes: usize, _stream: StreamId) -> MrResult<DevicePtr> {
        let mut st = self.state.lock().unwrap();
        let base = match st.0 {
            Some(b) => b,
            None => *st.0.insert(self.driver.mem_alloc(self.capacity as usize)?),
        };
        let size = (bytes as u64).div_ceil(256) * 256;
        if st.1 + size > self.capacity {
            return Err(MrError::OutOfMemory {
                resource: self.name(),
                requested: bytes as u64,
                available: Some(self.capacity - st.1),
            });
        }
        let p = base.offset(st.1);
        st.1 += size;
        st.2 += 1;
        Ok(p)
    }

    fn deallocate(&self, _ptr: DevicePtr, _bytes: usize, _stream: StreamId) -> MrResult<()> {
        self.state.lock().unwrap().2 -= 1;
        Ok(())
    }

    fn memory_info(&self) -> Option<MemInfo> {
        None
    }

    fn driver(&self) -> &dyn Driver {
        &*self.driver
    }
}

impl Drop for BumpResource {
    fn drop(&mut self) {
        if let Some(b) = self.state.get_mut().unwrap().0 {
            let _ = self.driver.mem_free(b);
        }
    }
}
