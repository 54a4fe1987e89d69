//! The four ways of managing the workload's memory that the example compares.

use std::collections::BTreeMap;
use std::sync::Arc;

use emm_core::mr::{CudaResource, DeviceMemoryResource, PoolResource};
use emm_core::unified::{CachingManagedAllocator, ManagedBuffer};
use emm_core::{DeviceId, DevicePtr, Driver, HostAllocFlags, HostPtr, Location, StreamId};
use emm_sim::SimDriver;

use crate::workload::{e, Strategy};

const D0: Location = Location::Device(DeviceId(0));

/// Bytes the host reads and writes from (contents are not tracked in these runs).
fn scratch(n: usize) -> Vec<u8> {
    vec![0; n]
}

/// emm's caching managed allocator and `ManagedBuffer`: hints per kind, moves by advice and
/// prefetch, frees to the cache.
pub struct Caching {
    pub g: SimDriver,
    pub cache: Arc<CachingManagedAllocator>,
    pub s: StreamId,
    pub buf: Vec<u8>,
}

impl Strategy for Caching {
    type Buf = ManagedBuffer;
    fn device(&mut self, n: usize) -> Result<ManagedBuffer, String> {
        ManagedBuffer::new(&self.cache, n, D0, self.s).map_err(|x| x.to_string())
    }
    fn host(&mut self, n: usize) -> Result<ManagedBuffer, String> {
        ManagedBuffer::new(&self.cache, n, Location::Host, self.s).map_err(|x| x.to_string())
    }
    fn host_fill(&mut self, b: &ManagedBuffer) -> Result<(), String> {
        b.write(0, &self.buf[..b.size()], self.s)
            .map_err(|x| x.to_string())
    }
    fn host_read(&mut self, b: &ManagedBuffer) -> Result<(), String> {
        b.read(self.s).map(drop).map_err(|x| x.to_string())
    }
    fn to_device(&mut self, b: ManagedBuffer) -> Result<ManagedBuffer, String> {
        b.to(D0, self.s, false).map_err(|x| x.to_string())
    }
    fn to_host(&mut self, b: ManagedBuffer, blocking: bool) -> Result<ManagedBuffer, String> {
        b.to(Location::Host, self.s, !blocking)
            .map_err(|x| x.to_string())
    }
    fn kernel(&mut self, b: &ManagedBuffer, write: bool) -> Result<(), String> {
        let p = b
            .device_ptr()
            .ok_or("managed buffers have a device pointer")?;
        self.g.device_access(p, b.size(), self.s, write).map_err(e)
    }
    fn free(&mut self, b: ManagedBuffer) -> Result<(), String> {
        drop(b);
        Ok(())
    }
    fn size(&self, b: &ManagedBuffer) -> usize {
        b.size()
    }
}

/// `cuMemAllocManaged` and `cuMemFree` per request, no advice; moves are prefetches
/// (`prefetch`) or left to page faults and eviction.
pub struct Plain {
    pub g: SimDriver,
    pub s: StreamId,
    pub prefetch: bool,
    pub buf: Vec<u8>,
}

impl Strategy for Plain {
    type Buf = (DevicePtr, usize);
    fn device(&mut self, n: usize) -> Result<Self::Buf, String> {
        Ok((self.g.mem_alloc_managed(n, true).map_err(e)?, n))
    }
    fn host(&mut self, n: usize) -> Result<Self::Buf, String> {
        self.device(n)
    }
    fn host_fill(&mut self, b: &Self::Buf) -> Result<(), String> {
        self.g
            .host_write(b.0.as_host(), &self.buf[..b.1])
            .map_err(e)
    }
    fn host_read(&mut self, b: &Self::Buf) -> Result<(), String> {
        self.g
            .host_read(b.0.as_host(), &mut self.buf[..b.1])
            .map_err(e)
    }
    fn to_device(&mut self, b: Self::Buf) -> Result<Self::Buf, String> {
        if self.prefetch {
            self.g.mem_prefetch(b.0, b.1, D0, self.s).map_err(e)?;
        }
        Ok(b)
    }
    fn to_host(&mut self, b: Self::Buf, blocking: bool) -> Result<Self::Buf, String> {
        if self.prefetch {
            self.g
                .mem_prefetch(b.0, b.1, Location::Host, self.s)
                .map_err(e)?;
        }
        if blocking {
            self.g.context_synchronize().map_err(e)?;
        }
        Ok(b)
    }
    fn kernel(&mut self, b: &Self::Buf, write: bool) -> Result<(), String> {
        self.g.device_access(b.0, b.1, self.s, write).map_err(e)
    }
    fn free(&mut self, b: Self::Buf) -> Result<(), String> {
        self.g.mem_free(b.0).map_err(e)
    }
    fn size(&self, b: &Self::Buf) -> usize {
        b.1
    }
}

/// Device memory from a pool over `cuMemAlloc`, pinned host staging buffers cached by
/// power-of-two size (as PyTorch's `CachingHostAllocator`), and copies both ways.
pub struct Explicit {
    pub g: SimDriver,
    pub pool: PoolResource<CudaResource<SimDriver>>,
    pub s: StreamId,
    pub staging: BTreeMap<usize, Vec<HostPtr>>,
    pub buf: Vec<u8>,
    /// Bytes copied by `cuMemcpy` either way.
    pub copied: u64,
}

/// A buffer of [`Explicit`]: on the device, or in a pinned staging buffer.
pub enum XBuf {
    Dev(DevicePtr, usize),
    Host(HostPtr, usize),
}

impl Explicit {
    pub fn new(g: &SimDriver, s: StreamId, max: usize) -> Self {
        Explicit {
            g: g.clone(),
            pool: PoolResource::new(CudaResource::new(g.clone())),
            s,
            staging: BTreeMap::new(),
            buf: scratch(max),
            copied: 0,
        }
    }

    fn staging_get(&mut self, n: usize) -> Result<HostPtr, String> {
        let class = n.next_power_of_two();
        if let Some(h) = self.staging.get_mut(&class).and_then(Vec::pop) {
            return Ok(h);
        }
        self.g
            .host_alloc(class, HostAllocFlags::default())
            .map_err(e)
    }

    fn staging_put(&mut self, h: HostPtr, n: usize) {
        self.staging
            .entry(n.next_power_of_two())
            .or_default()
            .push(h);
    }

    /// Frees the staging buffers (after the measurement).
    pub fn teardown(&mut self) -> Result<(), String> {
        for (_, v) in std::mem::take(&mut self.staging) {
            for h in v {
                self.g.host_free(h).map_err(e)?;
            }
        }
        Ok(())
    }
}

impl Strategy for Explicit {
    type Buf = XBuf;
    fn device(&mut self, n: usize) -> Result<XBuf, String> {
        let p = self.pool.allocate(n, self.s).map_err(|x| x.to_string())?;
        Ok(XBuf::Dev(p, n))
    }
    fn host(&mut self, n: usize) -> Result<XBuf, String> {
        Ok(XBuf::Host(self.staging_get(n)?, n))
    }
    fn host_fill(&mut self, b: &XBuf) -> Result<(), String> {
        match *b {
            XBuf::Host(h, n) => self.g.host_write(h, &self.buf[..n]).map_err(e),
            XBuf::Dev(..) => Err("the host cannot store to device memory".into()),
        }
    }
    fn host_read(&mut self, b: &XBuf) -> Result<(), String> {
        match *b {
            XBuf::Host(h, n) => self.g.host_read(h, &mut self.buf[..n]).map_err(e),
            XBuf::Dev(..) => Err("the host cannot load device memory".into()),
        }
    }
    fn to_device(&mut self, b: XBuf) -> Result<XBuf, String> {
        let XBuf::Host(h, n) = b else { return Ok(b) };
        let p = self.pool.allocate(n, self.s).map_err(|x| x.to_string())?;
        self.g
            .memcpy_htod(p, &self.buf[..n], Some(self.s))
            .map_err(e)?;
        self.copied += n as u64;
        self.staging_put(h, n);
        Ok(XBuf::Dev(p, n))
    }
    fn to_host(&mut self, b: XBuf, _blocking: bool) -> Result<XBuf, String> {
        let XBuf::Dev(p, n) = b else { return Ok(b) };
        let h = self.staging_get(n)?;
        // A copy to the host returns once the bytes are there, whatever `blocking` says.
        self.g
            .memcpy_dtoh(&mut self.buf[..n], p, Some(self.s))
            .map_err(e)?;
        self.copied += n as u64;
        self.pool
            .deallocate(p, n, self.s)
            .map_err(|x| x.to_string())?;
        Ok(XBuf::Host(h, n))
    }
    fn kernel(&mut self, b: &XBuf, write: bool) -> Result<(), String> {
        match *b {
            XBuf::Dev(p, n) => self.g.device_access(p, n, self.s, write).map_err(e),
            XBuf::Host(..) => Err("kernels read device copies".into()),
        }
    }
    fn free(&mut self, b: XBuf) -> Result<(), String> {
        match b {
            XBuf::Dev(p, n) => self
                .pool
                .deallocate(p, n, self.s)
                .map_err(|x| x.to_string()),
            XBuf::Host(h, n) => {
                self.staging_put(h, n);
                Ok(())
            }
        }
    }
    fn size(&self, b: &XBuf) -> usize {
        match *b {
            XBuf::Dev(_, n) | XBuf::Host(_, n) => n,
        }
    }
}

/// A scratch host buffer of `n` bytes.
pub fn host_scratch(n: usize) -> Vec<u8> {
    scratch(n)
}

/// The driver as the allocator takes it.
pub fn shared(g: &SimDriver) -> Arc<dyn Driver> {
    Arc::new(g.clone())
}
