//! [`ExpandableSegment`]: one reserved virtual address range that a pool grows by mapping
//! physical memory at its end and shrinks by unmapping wholly free granules there — an
//! expandable segment, as PyTorch's `expandable_segments`.
//!
//! Chunks from an upstream are separate allocations: a free block at the end of one never
//! merges with a free block at the start of the next, and that boundary is where a pool's
//! memory beyond its live bytes goes (the book's "Resources and adaptors"). A segment is one range whose mapped
//! prefix is one chunk of the [`CoalescingHeap`], extended in place, so every free neighbour
//! merges. Physical memory comes in handles (`cuMemCreate`) of one granule, or of 1/64 of a
//! growth when that is more, so a free tail goes back a handle at a time (`cuMemUnmap` takes
//! whole mappings only) and a growth costs at most 64 handles: mapping 78 GB one 2 MiB
//! granule at a time took seconds of driver calls, and as long again to undo.
//!
//! The segment makes the driver calls; the heap stays a pure data structure. Unmapping is not
//! stream-ordered: the caller waits for the device before [`ExpandableSegment::release_free_tail`].

use crate::driver::{DeviceId, Driver, PhysHandle, StreamId};
use crate::error::{CudaCode, DriverError, DriverResult};
use crate::mr::detail::heap::{CoalescingHeap, SlabFull};
use crate::mr::detail::stream_order::StreamOrder;
use crate::mr::pool_options::Growth;
use crate::mr::{MrError, MrResult};
use crate::units::Bytes;

/// One reserved range, its mapped prefix and the physical memory behind it.
#[derive(Debug)]
pub(crate) struct ExpandableSegment {
    device: DeviceId,
    granularity: u64,
    base: u64,
    reserved: u64,
    /// The physical memory mapped at `base` and the bytes of each (granule multiples), in
    /// address order.
    handles: Vec<(PhysHandle, u64)>,
    /// The sum of the handles' bytes.
    mapped: u64,
}

/// A growth maps at most this many handles (more granules each when it is large).
const HANDLES_PER_GROWTH: u64 = 64;

/// Why a segment could not grow.
#[derive(Debug)]
pub(crate) enum GrowError {
    /// The reservation or the pool's maximum leaves less room than the request needs.
    NoRoom {
        /// Bytes that could still be mapped.
        room: u64,
    },
    /// The driver refused (out of memory, or another error).
    Driver(DriverError),
    /// The heap's block slab could not grow to record the new memory; nothing was mapped.
    Records(SlabFull),
}

impl ExpandableSegment {
    /// Reserves `bytes` of address space (rounded up to the granularity) for the current
    /// context's device, mapping nothing.
    ///
    /// # Errors
    ///
    /// The driver's: `NOT_SUPPORTED` where there is no virtual memory management.
    pub(crate) fn reserve(driver: &dyn Driver, bytes: u64) -> DriverResult<Self> {
        let device = driver.context_device(driver.current_context()?)?;
        let granularity = driver.mem_get_allocation_granularity(device)? as u64;
        let reserved = bytes.max(1).div_ceil(granularity) * granularity;
        let base = driver.mem_address_reserve(reserved as usize, 0)?.0;
        Ok(ExpandableSegment {
            device,
            granularity,
            base,
            reserved,
            handles: Vec::new(),
            mapped: 0,
        })
    }

    /// Bytes mapped.
    pub(crate) fn mapped(&self) -> u64 {
        self.mapped
    }

    /// Grows the segment so that `slot`'s wilderness in `heap` holds at least `size` bytes:
    /// maps what it lacks (at least what `growth` asks), within `room` bytes more. The heap's
    /// one chunk is the segment's mapped prefix. On failure nothing is mapped that was not
    /// before.
    ///
    /// # Errors
    ///
    /// [`GrowError::NoRoom`] when the request does not fit; [`GrowError::Driver`] when the
    /// driver refuses (out of memory).
    ///
    /// # Time complexity
    ///
    /// O(1) (O(blocks of the segment) when its last block is live) plus a free-memory query,
    /// two driver calls per handle mapped (at most 64) and one more.
    pub(crate) fn grow_for(
        &mut self,
        driver: &dyn Driver,
        heap: &mut CoalescingHeap,
        slot: usize,
        size: u64,
        growth: Growth,
        room: Option<u64>,
    ) -> Result<(), GrowError> {
        let g = self.granularity;
        let tail = heap
            .wild()
            .filter(|&(_, _, owner)| owner == slot)
            .map_or(0, |(_, n, _)| n);
        let held = self.mapped();
        // Room is whole granules, so what fits rounds up within it (and cannot overflow).
        let room = (self.reserved - held).min(room.map_or(u64::MAX, |r| r / g * g));
        let lack = size.saturating_sub(tail).max(1);
        if lack > room {
            return Err(GrowError::NoRoom { room });
        }
        let want = match growth {
            Growth::Exact => lack,
            Growth::Fraction { divisor } => lack.max(held / divisor.max(1)),
            Growth::Fixed { bytes } => lack.max(bytes),
        };
        let mut bytes = want.min(room).div_ceil(g) * g;
        // Mapping stops at the first handle the device lacks and undoing it costs as much
        // again, so ask first: a request beyond free memory fails at once, and growth beyond
        // what the request lacks is cut to what is free.
        if let Ok(info) = driver.mem_get_info() {
            if bytes > info.free {
                let need = lack.div_ceil(g) * g;
                if need > info.free {
                    return Err(GrowError::Driver(DriverError::new(
                        "cuMemCreate",
                        CudaCode::OUT_OF_MEMORY,
                        format!(
                            "growing the segment by {} needs more than the {} free on device {}",
                            Bytes(need),
                            Bytes(info.free),
                            self.device.0
                        ),
                    )));
                }
                bytes = need.max(info.free / g * g);
            }
        }
        // Records first (the end, and the split of the request from it), so that memory
        // mapped is always recorded.
        heap.reserve_records(2).map_err(GrowError::Records)?;
        let start = self.map_more(driver, bytes).map_err(GrowError::Driver)?;
        if heap.chunks().is_empty() {
            heap.add_chunk(slot, start, bytes)
        } else {
            heap.extend_chunk(slot, bytes)
        }
        .map_err(GrowError::Records)
    }

    /// Maps `bytes` (a granule multiple) more at the end and grants the device access; returns
    /// where the new memory starts. On failure unmaps and releases what it made.
    fn map_more(&mut self, driver: &dyn Driver, bytes: u64) -> DriverResult<u64> {
        let (g, start) = (self.granularity, self.base + self.mapped());
        let before = self.handles.len();
        let each = bytes.div_ceil(HANDLES_PER_GROWTH).div_ceil(g).max(1) * g;
        let mut made = || -> DriverResult<()> {
            let mut at = start;
            while at < start + bytes {
                let n = each.min(start + bytes - at);
                let h = driver.mem_create(n as usize, self.device)?;
                if let Err(e) = driver.mem_map(crate::DevicePtr(at), n as usize, h) {
                    let _ = driver.mem_release(h);
                    return Err(e);
                }
                self.handles.push((h, n));
                self.mapped += n;
                at += n;
            }
            driver.mem_set_access(crate::DevicePtr(start), bytes as usize, self.device)
        };
        match made() {
            Ok(()) => Ok(start),
            Err(e) => {
                // Nothing touched the new memory yet: no wait is needed before unmapping.
                let _ = self.unmap_to(driver, before);
                Err(e)
            }
        }
    }

    /// Unmaps and releases the handles past the first `keep`, last first.
    fn unmap_to(&mut self, driver: &dyn Driver, keep: usize) -> DriverResult<()> {
        while self.handles.len() > keep {
            let Some(&(h, n)) = self.handles.last() else {
                break;
            };
            let at = self.base + self.mapped - n;
            driver.mem_unmap(crate::DevicePtr(at), n as usize)?;
            self.handles.pop();
            self.mapped -= n;
            // Unmapped memory the driver will not release is lost to the pool either way.
            driver.mem_release(h)?;
        }
        Ok(())
    }

    /// Gives back the granules wholly inside the heap's wilderness (the free end of the segment)
    /// and cuts the chunk to match; returns the bytes given back. The caller has waited for the device (an
    /// unmap is not stream-ordered).
    ///
    /// # Errors
    ///
    /// The driver's first error; what was unmapped before it is cut from the heap.
    ///
    /// # Time complexity
    ///
    /// O(blocks of the segment + handles given back) plus two driver calls per handle given
    /// back.
    pub(crate) fn release_free_tail(
        &mut self,
        driver: &dyn Driver,
        heap: &mut CoalescingHeap,
    ) -> DriverResult<u64> {
        let Some((addr, _, _)) = heap.wild() else {
            return Ok(0);
        };
        // The handles that end above the free tail's start stay.
        let mut keep = self.handles.len();
        let mut end = self.base + self.mapped;
        while keep > 0 && end - self.handles[keep - 1].1 >= addr {
            end -= self.handles[keep - 1].1;
            keep -= 1;
        }
        let before = self.mapped();
        let r = self.unmap_to(driver, keep);
        let end = self.base + self.mapped();
        if end < self.base + before {
            heap.cut_chunk(end);
        }
        r.map(|()| before - self.mapped())
    }

    /// Unmaps and releases everything and frees the reservation. The caller has waited for
    /// the device and forgets the heap's blocks.
    ///
    /// # Errors
    ///
    /// The driver's first error; the rest is still attempted.
    pub(crate) fn destroy(mut self, driver: &dyn Driver) -> DriverResult<()> {
        let unmapped = self.unmap_to(driver, 0);
        let freed = driver.mem_address_free(crate::DevicePtr(self.base), self.reserved as usize);
        unmapped.and(freed)
    }
}

/// What [`ExpandableSegment::allocate_growing`] needs of the pool around it.
pub(crate) struct PoolParts<'a> {
    /// The pool's blocks; chunk 0 is the segment's mapped prefix.
    pub heap: &'a mut CoalescingHeap,
    /// The pool's cached events, to order one stream after another.
    pub order: &'a mut StreamOrder,
    /// The driver the segment maps memory from.
    pub driver: &'a dyn Driver,
    /// The pool's growth policy.
    pub growth: Growth,
    /// Bytes the pool may still take under its maximum, if it has one.
    pub room: Option<u64>,
}

impl ExpandableSegment {
    /// Serves a request of `size` bytes (`requested` asked) on `stream`, for which no listed
    /// block and not its own wilderness fit, by growing the segment: first takes the
    /// wilderness another stream left (ordering `stream` after it), so that the growth merges
    /// with it; when the device or the reservation is short, synchronizes, takes every
    /// stream's free blocks, and grows by exactly what the request still lacks. Returns the
    /// block's address.
    ///
    /// # Errors
    ///
    /// [`MrError::OutOfMemory`] when neither the device nor the reservation (or the pool's
    /// maximum) has room; other driver errors.
    pub(crate) fn allocate_growing(
        &mut self,
        parts: PoolParts<'_>,
        resource: &'static str,
        size: u64,
        requested: u64,
        stream: StreamId,
    ) -> MrResult<u64> {
        let PoolParts {
            heap,
            order,
            driver,
            growth,
            room,
        } = parts;
        let slot = heap.slot(stream);
        if let Some((_, _, owner)) = heap.wild() {
            if owner != slot {
                order.order(driver, heap.stream_of(owner), stream)?;
                heap.take_wild(slot);
            }
        }
        if let Some(p) = heap.allocate_wild(slot, size, requested) {
            return Ok(p);
        }
        let oom = |available| MrError::OutOfMemory {
            resource,
            requested,
            available,
        };
        let mut grown = self.grow_for(driver, heap, slot, size, growth, room);
        let short = match &grown {
            Err(GrowError::Driver(e)) => e.is_out_of_memory(),
            Err(GrowError::NoRoom { .. }) => true,
            Err(GrowError::Records(_)) | Ok(()) => false,
        };
        if short {
            if heap.coalesce_streams(stream, || driver.context_synchronize())? {
                // Short of memory: the own class scanned, whatever the pool's search, for the
                // tightest fit.
                let p = heap.allocate(slot, size, requested);
                if let Some(p) = p.or_else(|| heap.allocate_wild(slot, size, requested)) {
                    return Ok(p);
                }
            }
            grown = self.grow_for(driver, heap, slot, size, Growth::Exact, room);
        }
        match grown {
            Ok(()) => heap
                .allocate_wild(slot, size, requested)
                .ok_or_else(|| oom(None)),
            Err(GrowError::NoRoom { room }) => Err(oom(Some(room))),
            Err(GrowError::Driver(e)) if e.is_out_of_memory() => {
                Err(oom(driver.mem_get_info().ok().map(|i| i.free)))
            }
            Err(GrowError::Driver(e)) => Err(MrError::Driver(e)),
            Err(GrowError::Records(full)) => Err(MrError::records_full(resource, requested, full)),
        }
    }
}
