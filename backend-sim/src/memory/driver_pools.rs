//! Stream-ordered allocation from driver memory pools (`cuMemAllocAsync`, `cuMemFreeAsync`,
//! `cuMemPoolCreate`): free blocks kept per pool, reused on the freeing stream at once and on
//! another stream once it is ordered after the free, released above the pool's threshold.
//!
//! The pools' blocks and counts are the `driver_pool_table` part; these operations add the
//! allocations, the devices' accounting and the streams' ordering.

use emm_core::{CudaCode, DriverResult, StreamId};

use crate::address_space::round_up;
use crate::allocation_table::AllocKind;
use crate::state::State;
use crate::stream_table::Accessor;

use super::Region;

impl State {
    pub(crate) fn pool(&self, pool: u64) -> DriverResult<()> {
        match self.pools.live(pool) {
            Some(_) => Ok(()),
            None => Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("mempool:{pool} is not a live memory pool"),
            )),
        }
    }

    /// `cuMemAllocFromPoolAsync`: reuses a free block the stream is ordered after, or reserves
    /// new memory from the device.
    pub(crate) fn alloc_from_pool(
        &mut self,
        p: u32,
        size: usize,
        pool: u64,
        stream: StreamId,
    ) -> DriverResult<u64> {
        let size = size as u64;
        let s = self.stream(p, stream)?;
        self.pool(pool)?;
        if size == 0 {
            return Err(self.zero_size());
        }
        let device = self.pools.live(pool).expect("checked").device;
        if self.streams[s].device != device {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!(
                    "{stream} is on device {} but mempool:{pool} on device {device}",
                    self.streams[s].device
                ),
            ));
        }
        self.charge(p, self.cfg.costs.alloc_async_ns);
        let reserved =
            round_up(size, self.cfg.granularity).ok_or_else(|| self.oom(device, size, 0))?;
        let (actor, clock) = {
            let st = &self.streams[s];
            (st.actor, &st.clock)
        };
        let races = self.cfg.track_races;
        let reuse = self.pools.take_free_block(pool, reserved, |fb| {
            fb.freed_on
                .is_none_or(|(a, e)| !races || a == actor || clock.has_seen(a, e))
        });
        let (block_size, base) = match reuse {
            Some(key) => key,
            None => {
                if let Err(avail) = self.reserve_device(device, reserved) {
                    return Err(self.oom(device, size, avail));
                }
                let base = match self.take_va(Region::Device(device), reserved) {
                    Ok(b) => b,
                    Err(e) => {
                        self.devices[device as usize].used -= reserved;
                        return Err(e);
                    }
                };
                self.pools.get_mut(pool).expect("checked").reserved += reserved;
                self.charge(p, self.cfg.costs.alloc_ns(size));
                (reserved, base)
            }
        };
        self.pools.get_mut(pool).expect("checked").used += block_size;
        self.insert_alloc(
            base,
            size,
            block_size,
            AllocKind::PoolBlock { device, pool },
            p,
        );
        // The allocation happens in stream order: until another stream (or the host) is ordered
        // after it, the memory may not even be mapped there (a real GPU faults).
        let (actor, epoch) = self.enqueue(p, s, 0);
        self.check_races(
            base,
            base,
            base + size,
            actor,
            epoch,
            true,
            "cuMemAllocAsync",
            Accessor::Stream(s),
        );
        Ok(base)
    }

    /// `cuMemFreeAsync`: the block returns to its pool, reusable on `stream` at once and on
    /// other streams once they are ordered after this point.
    pub(crate) fn mem_free_async(
        &mut self,
        p: u32,
        addr: u64,
        stream: StreamId,
    ) -> DriverResult<()> {
        let s = self.stream(p, stream)?;
        let pool = match self.allocs.get(addr) {
            Some(a) if a.process == p => match a.kind {
                AllocKind::PoolBlock { pool, .. } => pool,
                AllocKind::Device { .. } | AllocKind::Managed(_) => {
                    // CUDA accepts cuMemAlloc'd memory here and frees it synchronously.
                    self.host_wait_stream(p, s);
                    return self.mem_free(p, addr);
                }
                _ => return Err(self.bad_free(p, addr, "stream-ordered device memory")),
            },
            _ => return Err(self.bad_free(p, addr, "stream-ordered device memory")),
        };
        self.charge(p, self.cfg.costs.alloc_async_ns);
        let (size, reserved) = (self.allocs[addr].size, self.allocs[addr].reserved);
        // The free is the stream's last use of the block: it must be ordered after every other use.
        let (actor, epoch) = self.enqueue(p, s, 0);
        self.check_races(
            addr,
            addr,
            addr + size,
            actor,
            epoch,
            true,
            "cuMemFreeAsync",
            Accessor::Stream(s),
        );
        self.allocs.remove(addr);
        let done_at = self.streams[s].busy_until;
        self.return_to_pool(pool, addr, reserved, Some((actor, epoch, done_at)));
        self.retire(addr, size);
        Ok(())
    }

    pub(super) fn return_to_pool(
        &mut self,
        pool: u64,
        base: u64,
        reserved: u64,
        freed_on: Option<(u32, u64, u64)>,
    ) {
        let (device, released) = self.pools.give_back(pool, base, reserved, freed_on);
        if released > 0 {
            self.devices[device as usize].used -= released;
        }
    }

    /// The latest virtual time of any process's host.
    fn latest_host_time(&self) -> u64 {
        self.processes.iter().map(|p| p.now).max().unwrap_or(0)
    }

    /// Releases free blocks of `device`'s pools down to each pool's release threshold (or to
    /// `keep` with `force`), if their frees have completed.
    pub(crate) fn release_free_pool_blocks(&mut self, device: u32, keep: u64, force: bool) {
        let now = self.latest_host_time();
        let released = self.pools.release_free(
            |_, pl| pl.device == device,
            |pl| if force { keep } else { pl.release_threshold },
            force,
            now,
        );
        self.devices[device as usize].used -= released;
    }

    /// `cuMemPoolTrimTo`: releases live pool `pool`'s free blocks whose frees completed, down
    /// to `keep` bytes; the other pools keep theirs.
    pub(crate) fn trim_pool(&mut self, pool: u64, keep: u64) {
        let device = self.pools.live(pool).expect("checked").device;
        let now = self.latest_host_time();
        let released = self
            .pools
            .release_free(|id, _| id == pool, |_| keep, false, now);
        self.devices[device as usize].used -= released;
    }

    pub(crate) fn release_pools_over_threshold(&mut self, device: u32) {
        if self.pools.has_free_blocks(device) {
            self.release_free_pool_blocks(device, 0, false);
        }
    }

    pub(crate) fn mem_pool_create(&mut self, device: u32) -> u64 {
        let id = self.handle();
        self.pools.create(id, device, false);
        id
    }

    pub(crate) fn mem_pool_destroy(&mut self, pool: u64) -> DriverResult<()> {
        self.pool(pool)?;
        if self.pools.live(pool).expect("checked").is_default {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("mempool:{pool} is a device's default pool and cannot be destroyed"),
            ));
        }
        let (device, free) = self.pools.destroy(pool);
        self.devices[device as usize].used -= free;
        for d in &mut self.devices {
            if d.current_pool == pool {
                d.current_pool = d.default_pool;
            }
        }
        Ok(())
    }
}
