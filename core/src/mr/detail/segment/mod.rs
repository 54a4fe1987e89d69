//! [`ExpandableSegment`]: one reserved virtual address range that a pool grows by mapping
//! physical memory at its end, and whose physical memory follows the live blocks — an
//! expandable segment, as PyTorch's `expandable_segments`, that also gives back the middle of
//! its range ([`unmap`]).
//!
//! Chunks from an upstream are separate allocations: a free block at the end of one never
//! merges with a free block at the start of the next, and that boundary is where a pool's
//! memory beyond its live bytes goes (the book's "Resources and adaptors"). A segment is one range, one chunk of
//! the [`CoalescingHeap`] extended in place, so every free neighbour merges. What is mapped,
//! and by which handle, is the [`GranuleMap`]: a mapping is made of handles of one granule,
//! or of 1/64 of it when that is more (`granules`), and only whole handles go back.
//!
//! The segment makes the driver calls; the heap stays a pure data structure.

use crate::driver::{DeviceId, Driver, EventId, PhysHandle, StreamId};
use crate::error::{CudaCode, DriverError, DriverResult};
use crate::mr::detail::granules::{handle_bytes, GranuleMap, TrimPolicy};
use crate::mr::detail::heap::{CoalescingHeap, SlabFull};
use crate::mr::detail::heap_holes::Holes;
use crate::mr::detail::move_budget::MoveBudget;
use crate::mr::detail::stream_order::StreamOrder;
use crate::mr::pool_options::Growth;
use crate::mr::{MrError, MrResult};
use crate::units::Bytes;
use unmap::{Give, Pending};

mod unmap;

/// While a segment grows, it maps up to this over live bytes, in parts per thousand, before it
/// gives free memory back ([`unmap`]).
const SLACK_PERMILLE: u64 = 10;

/// One reserved range, the memory mapped in it and the holes waiting to be unmapped.
#[derive(Debug)]
pub(crate) struct ExpandableSegment {
    pub(super) granularity: u64,
    pub(super) base: u64,
    pub(super) reserved: u64,
    /// Where the heap's chunk ends: every granule below is mapped or a hole.
    pub(super) end: u64,
    /// Holes carved but still mapped, each batch with the event that says the device is
    /// done with it (`None`: the caller synchronized).
    pending: Vec<Pending>,
    /// The rest, apart: see [`SEGMENT_BYTES`].
    pub(super) more: Box<SegmentMaps>,
}

/// What a segment keeps beside its range.
#[derive(Debug)]
pub(crate) struct SegmentMaps {
    pub(super) device: DeviceId,
    /// The other devices that can access `device`'s memory: every mapping grants them access
    /// too, as `cuMemAlloc` memory is open to a peer once it enables access (a mapping's
    /// access is its own, whatever the contexts enabled).
    peers: Vec<DeviceId>,
    /// The physical memory mapped, by address.
    pub(super) maps: GranuleMap,
    /// When to look for memory to give back.
    pub(super) policy: TrimPolicy,
    /// How much of the host's time moving memory may take.
    pub(super) budget: MoveBudget,
    /// Events of settled batches, for the next.
    pub(super) spare_events: Vec<EventId>,
    /// The holes in the heap's chunk.
    pub(super) holes: Holes,
    /// Handles unmapped by a trim, with their sizes, mapped again before any new one is made:
    /// memory moved from a free block to where a request goes costs an unmap and a map, not a
    /// release and a create as well. Kept between requests while what is mapped and kept
    /// stays under the [`TrimPolicy`]'s limit (so held memory stays under it too) and the pool
    /// has no maximum; released by [`ExpandableSegment::release_free`], when the device is
    /// short, and on destroy. `None` where the segment gives nothing back before it maps.
    pub(super) spare: Option<Vec<(PhysHandle, u64)>>,
    /// Handles of holes still mapped, lent to requests (`unmap`'s lending), with their
    /// batch's event and stream and their sizes: mapped where a request goes before any spare
    /// or new handle, its stream first made to wait for the event. Those no request took
    /// become spares when their hole is unmapped.
    pub(super) lent: Vec<(EventId, StreamId, PhysHandle, u64)>,
    /// Lent handles a request took, with their sizes: mapped at a hole and where the request
    /// went both, until one of the two is unmapped (counted once in
    /// [`ExpandableSegment::mapped`]).
    pub(super) taken: Vec<(PhysHandle, u64)>,
}

/// The size of a segment, which sits in the pool's state: the pool's fast paths are compiled
/// against that state's layout, and a segment of 168 bytes reordered it (4.6 instructions more
/// a free on W3, callgrind), so what does not fit stays behind a box.
#[cfg(target_pointer_width = "64")]
const SEGMENT_BYTES: usize = 64;
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<ExpandableSegment>() == SEGMENT_BYTES);

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
        let mut peers = Vec::new();
        for d in (0..driver.device_count()?)
            .map(DeviceId)
            .filter(|&d| d != device)
        {
            if driver.can_access_peer(d, device)? {
                peers.push(d);
            }
        }
        let reserved = bytes.max(1).div_ceil(granularity) * granularity;
        let base = driver.mem_address_reserve(reserved as usize, 0)?.0;
        Ok(ExpandableSegment {
            granularity,
            base,
            reserved,
            end: base,
            pending: Vec::new(),
            more: Box::new(SegmentMaps {
                device,
                peers,
                maps: GranuleMap::default(),
                policy: TrimPolicy::new(SLACK_PERMILLE).keeping(),
                budget: MoveBudget::new(None, 0),
                spare_events: Vec::new(),
                holes: Holes::default(),
                spare: None,
                lent: Vec::new(),
                taken: Vec::new(),
            }),
        })
    }

    /// Free memory anywhere goes back before the segment maps more, moves taking what
    /// `budget` allows ([`Backing::ExpandableTight`](crate::mr::Backing::ExpandableTight));
    /// else only when the device is short of memory.
    pub(crate) fn give_back(&mut self, budget: MoveBudget) {
        self.more.policy.gives_back = true;
        self.more.budget = budget;
        // Only a segment that gives back keeps the handles it unmaps.
        self.more.spare = Some(Vec::new());
    }

    /// Whether free memory anywhere goes back before the segment maps more.
    pub(crate) fn gives_back(&self) -> bool {
        self.more.policy.gives_back
    }

    /// Bytes of physical memory mapped (a handle mapped at two addresses counts once).
    pub(crate) fn mapped(&self) -> u64 {
        let aliased: u64 = self.more.taken.iter().map(|&(_, n)| n).sum();
        self.more.maps.mapped() - aliased
    }

    /// Grows the segment so that `slot`'s wilderness in `heap` holds at least `size` bytes:
    /// maps what it lacks (at least what `growth` asks), within `room` bytes more. The heap's
    /// one chunk ends where the segment's mapped range does. On failure nothing is mapped
    /// that was not before.
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
        let tail = Self::wild_of(heap, slot);
        let held = self.mapped();
        // Room is whole granules, so what fits rounds up within it (and cannot overflow).
        let room =
            (self.reserved - (self.end - self.base)).min(room.map_or(u64::MAX, |r| r / g * g));
        let lack = size.saturating_sub(tail).max(1);
        if lack > room {
            return Err(GrowError::NoRoom { room });
        }
        let want = match growth {
            Growth::Exact => lack,
            Growth::Fraction { divisor } => lack.max(held / divisor.max(1)),
            Growth::Fixed { bytes } => lack.max(bytes),
        };
        let bytes = want.min(room).div_ceil(g) * g;
        let bytes = self
            .fit_free(driver, bytes, lack)
            .map_err(GrowError::Driver)?;
        // Records first (the end, and the split of the request from it), so that memory
        // mapped is always recorded.
        heap.reserve_records(2).map_err(GrowError::Records)?;
        let start = self.end;
        self.map_range(driver, start, bytes, heap.stream_of(slot))
            .map_err(GrowError::Driver)?;
        self.end += bytes;
        if heap.chunks().is_empty() {
            heap.add_chunk(slot, start, bytes)
        } else {
            heap.extend_chunk(slot, bytes)
        }
        .map_err(GrowError::Records)
    }

    /// Bytes of the spare handles (unmapped, kept to be mapped again) and of the lent ones no
    /// request took (mapped only at holes, which the heap no longer counts).
    pub(crate) fn spare_bytes(&self) -> u64 {
        let spare: u64 = self
            .more
            .spare
            .as_ref()
            .map_or(0, |s| s.iter().map(|&(_, n)| n).sum());
        spare + self.more.lent.iter().map(|&(.., n)| n).sum::<u64>()
    }

    /// The size of `slot`'s wilderness in `heap` (0 when another slot has it, or none is).
    pub(super) fn wild_of(heap: &CoalescingHeap, slot: usize) -> u64 {
        heap.wild()
            .filter(|&(_, _, owner)| owner == slot)
            .map_or(0, |(_, n, _)| n)
    }

    /// `bytes` (granules) to map for a request that lacks `lack`, cut to what the device has
    /// free. Mapping stops at the first handle the device lacks and undoing it costs as much
    /// again, so it asks first: a request beyond free memory fails at once, and mapping beyond
    /// what the request lacks is cut to what is free.
    pub(super) fn fit_free(&self, driver: &dyn Driver, bytes: u64, lack: u64) -> DriverResult<u64> {
        let g = self.granularity;
        // A refused query is the driver's error to report (a failed launch leaves the context
        // unusable), not a reason to map blind.
        let mut info = driver.mem_get_info()?;
        info.free = info.free.saturating_add(self.spare_bytes());
        if bytes <= info.free {
            return Ok(bytes);
        }
        let need = lack.div_ceil(g) * g;
        if need > info.free {
            return Err(DriverError::new(
                "cuMemCreate",
                CudaCode::OUT_OF_MEMORY,
                format!(
                    "mapping {} more of the segment needs more than the {} free on device {}",
                    Bytes(need),
                    Bytes(info.free),
                    self.more.device.0
                ),
            ));
        }
        Ok(need.max(info.free / g * g))
    }

    /// Maps `bytes` (a granule multiple) at `start`, which is not mapped, and grants the
    /// device and its peers access; spare handles that fit first (the largest that fits each
    /// time), then new ones. On failure unmaps what it mapped (and releases it, or keeps it
    /// spare).
    pub(super) fn map_range(
        &mut self,
        driver: &dyn Driver,
        start: u64,
        bytes: u64,
        stream: StreamId,
    ) -> DriverResult<()> {
        let each = handle_bytes(bytes, self.granularity);
        // The lent batches' events `stream` already waits for.
        let mut ordered = Vec::new();
        let mut made = || -> DriverResult<()> {
            let mut at = start;
            while at < start + bytes {
                let left = start + bytes - at;
                let (h, n, lent) = match self.take_spare(driver, left, stream, &mut ordered) {
                    Some(spare) => spare,
                    None => {
                        let n = each.min(left);
                        (driver.mem_create(n as usize, self.more.device)?, n, false)
                    }
                };
                if let Err(e) = driver.mem_map(crate::DevicePtr(at), n as usize, h) {
                    // A lent handle is still mapped at its hole, which gives it back.
                    if !lent {
                        let _ = driver.mem_release(h);
                    }
                    return Err(e);
                }
                self.more.maps.insert(at, h, n);
                if lent {
                    self.more.taken.push((h, n));
                }
                at += n;
            }
            for &d in std::iter::once(&self.more.device).chain(&self.more.peers) {
                driver.mem_set_access(crate::DevicePtr(start), bytes as usize, d)?;
            }
            Ok(())
        };
        made().inspect_err(|_| {
            // Nothing touched the new memory yet: no wait is needed before unmapping.
            let _ = self.unmap_range(driver, start, start + bytes);
        })
    }

    /// The largest lent handle of at most `left` bytes that `stream` can be ordered after
    /// (its batch's stream, or one that waits for the batch's event; `ordered` holds the
    /// events it waits for already), out of the lent ones (`true`); else the largest spare
    /// one, out of the spares.
    fn take_spare(
        &mut self,
        driver: &dyn Driver,
        left: u64,
        stream: StreamId,
        ordered: &mut Vec<EventId>,
    ) -> Option<(PhysHandle, u64, bool)> {
        let lent = &mut self.more.lent;
        let mut fits: Vec<usize> = (0..lent.len()).filter(|&k| lent[k].3 <= left).collect();
        fits.sort_unstable_by_key(|&k| std::cmp::Reverse(lent[k].3));
        for k in fits {
            let (event, from, _, _) = lent[k];
            if from != stream && !ordered.contains(&event) {
                // A stream the wait cannot be queued on leaves the handle to another request.
                if driver.stream_wait_event(stream, event).is_err() {
                    continue;
                }
                ordered.push(event);
            }
            let (_, _, h, n) = lent.swap_remove(k);
            return Some((h, n, true));
        }
        let spare = self.more.spare.as_mut()?;
        let k = (0..spare.len())
            .filter(|&k| spare[k].1 <= left)
            .max_by_key(|&k| spare[k].1)?;
        let (h, n) = spare.swap_remove(k);
        Some((h, n, false))
    }

    /// Unmaps and releases every handle wholly inside `lo..hi`, one unmap per contiguous run.
    ///
    /// # Errors
    ///
    /// The driver's first error; what it refused to unmap stays mapped.
    pub(super) fn unmap_range(
        &mut self,
        driver: &dyn Driver,
        lo: u64,
        hi: u64,
    ) -> DriverResult<()> {
        let inside = self.more.maps.inside(lo, hi);
        let mut first_err = None;
        let mut k = 0;
        while k < inside.len() {
            let mut j = k + 1;
            while j < inside.len() && inside[j].0 == inside[j - 1].0 + inside[j - 1].2 {
                j += 1;
            }
            let (at, end) = (inside[k].0, inside[j - 1].0 + inside[j - 1].2);
            match driver.mem_unmap(crate::DevicePtr(at), (end - at) as usize) {
                Ok(()) => {
                    for &(a, h, n) in &inside[k..j] {
                        self.more.maps.remove(a);
                        if let Err(e) = self.unmapped(driver, h, n) {
                            first_err.get_or_insert(e);
                        }
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
            k = j;
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Where handle `h` (`n` bytes) goes once unmapped: a handle lent and taken lives on at
    /// its other mapping; else to the spares, or released where none are kept.
    ///
    /// # Errors
    ///
    /// The driver's, releasing: unmapped memory it will not release is lost either way.
    fn unmapped(&mut self, driver: &dyn Driver, h: PhysHandle, n: u64) -> DriverResult<()> {
        let more = &mut *self.more;
        // Mapped at two addresses (a hole's and a request's): it lives on at the other.
        if let Some(k) = more.taken.iter().position(|t| t.0 == h) {
            more.taken.swap_remove(k);
            return Ok(());
        }
        more.lent.retain(|l| l.2 != h);
        match more.spare.as_mut() {
            Some(spare) => {
                spare.push((h, n));
                Ok(())
            }
            None => driver.mem_release(h),
        }
    }

    /// Unmaps and releases everything and frees the reservation. The caller has waited for
    /// the device and forgets the heap's blocks.
    ///
    /// # Errors
    ///
    /// The driver's first error; the rest is still attempted.
    pub(crate) fn destroy(mut self, driver: &dyn Driver) -> DriverResult<()> {
        self.release_spares(driver);
        let mut first_err = None;
        // Everything unmapped first: a lent handle is mapped twice, and goes back once.
        let mut handles = Vec::new();
        for (at, h, n) in self.more.maps.drain_from_top() {
            match driver.mem_unmap(crate::DevicePtr(at), n as usize) {
                Ok(()) => handles.push(h),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        handles.sort_unstable_by_key(|h| h.0);
        handles.dedup();
        for h in handles {
            if let Err(e) = driver.mem_release(h) {
                first_err.get_or_insert(e);
            }
        }
        let events = self.pending.drain(..).filter_map(|p| p.event);
        for e in events.chain(self.more.spare_events.drain(..)) {
            let _ = driver.event_destroy(e);
        }
        let freed = driver.mem_address_free(crate::DevicePtr(self.base), self.reserved as usize);
        first_err.map_or(freed, Err)
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
    /// block and not its own wilderness fit, by mapping memory: first takes the wilderness
    /// another stream left (ordering `stream` after it), so that a growth merges with it;
    /// gives back free blocks' memory when a look is due, then fills a hole or grows
    /// ([`unmap`]); when the device or the reservation is short, synchronizes, takes
    /// every stream's free blocks, gives back the memory of those below the free end if that
    /// lets the request map what it lacks, and maps exactly that. Returns the block's address.
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
        let driver = parts.driver;
        // Under a pool maximum the room a request may map is the maximum less what is mapped,
        // so handles kept beside it could take the device past the maximum: none are kept.
        let bounded = parts.room.is_some();
        let r = self.allocate_mapping(parts, resource, size, requested, stream);
        let keep = if bounded {
            0
        } else {
            self.more.policy.limit().saturating_sub(self.mapped())
        };
        self.release_spares_beyond(driver, keep);
        r
    }

    /// Releases the spare handles.
    pub(super) fn release_spares(&mut self, driver: &dyn Driver) {
        self.release_spares_beyond(driver, 0);
    }

    /// Releases spare handles, the largest first, until they hold at most `keep` bytes.
    fn release_spares_beyond(&mut self, driver: &dyn Driver, keep: u64) {
        let Some(spare) = self.more.spare.as_mut() else {
            return;
        };
        let mut held: u64 = spare.iter().map(|&(_, n)| n).sum();
        if held <= keep {
            return;
        }
        // Sorted by size (the largest last), so that what is kept serves the most requests.
        spare.sort_unstable_by_key(|&(_, n)| n);
        while held > keep {
            let Some((h, n)) = spare.pop() else { break };
            held -= n;
            // Unmapped memory the driver will not release is lost either way.
            let _ = driver.mem_release(h);
        }
    }

    /// [`ExpandableSegment::allocate_growing`], handles unmapped on the way kept for reuse.
    fn allocate_mapping(
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
        // The pool's maximum (the room it gave, over what it held) as a ceiling on what is
        // mapped, holes waiting to be unmapped included: what a trim unmaps is room again.
        let ceiling = room.map(|r| r.saturating_add(heap.held()));
        let room = |seg: &Self| ceiling.map(|c| c.saturating_sub(seg.mapped()));
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
        // Memory is about to be mapped: first give back what the policy says, then fill a
        // hole if that maps no more than growing would. An unmap the driver refuses leaves
        // a hole mapped, tried again later; the request goes on.
        if let Some(p) = heap.allocate(slot, size, requested) {
            return Ok(p);
        }
        // Before mapping, give back what it would take past the mark, none of the free blocks
        // the request is to take; the free end too when holes are to be filled (a growth
        // maps it again).
        let grow = self.grow_bytes(heap, slot, size);
        let window = self
            .best_window(heap, slot, size, room(self))
            .filter(|w| w.cost <= grow);
        let need = window.as_ref().map_or(grow, |w| w.cost);
        let live = heap.live_bytes().saturating_add(size);
        let mut excess = self.more.policy.excess(self.mapped(), need, live);
        // Moving memory spends from the budget what it took: a trim, the unmaps it left
        // waiting, and the mapping of holes (a move's other half). A trim the budget refuses
        // leaves the memory mapped, and the request maps more.
        let clock = self.gives_back().then(|| driver.host_clock_ns());
        if excess > 0 && clock.is_some_and(|now| !self.more.budget.allows(now)) {
            excess = 0;
        }
        let settling = self.has_pending();
        let give = Give::Excess {
            bytes: excess,
            wild: window.is_some(),
            keep: window.map_or((0, 0), |w| (w.start, w.start + size)),
        };
        let _ = self.trim(driver, heap, false, give);
        // What the trim carved moves to the request now, ordered after the device is done
        // with it; where the lent handles cannot cover what the request maps (a handle maps
        // whole), the host waits for the device and the holes go back first.
        if excess > 0 && self.lend_pending(driver, heap, need) < need {
            self.wait_pending(driver, heap);
        }
        let filled = self.fill_for(driver, heap, slot, size, room(self), false);
        let moved = excess > 0 || settling || matches!(filled, Ok(true));
        let mut grown = match filled {
            Ok(true) => Ok(()),
            Ok(false) => self.grow_for(driver, heap, slot, size, growth, room(self)),
            Err(e) => Err(GrowError::Driver(e)),
        };
        if let (Some(t0), true) = (clock, moved) {
            let took = driver.host_clock_ns().saturating_sub(t0);
            self.more.budget.spend(took);
        }
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
                    self.more.policy.served(live);
                    return Ok(p);
                }
            } else {
                driver.context_synchronize()?;
            }
            // The device is done with every free block: the holes waiting for it go back now.
            // When no window fits what the device has free, every wholly free handle goes
            // back, the free end's too, if that lets the request map what it lacks.
            let _ = self.settle(driver, heap, true);
            // Spares of the wrong sizes would sit beside a mapping that cannot be made.
            self.release_spares(driver);
            let free = driver.mem_get_info()?.free;
            let fits = self
                .best_window(heap, slot, size, room(self))
                .is_some_and(|w| w.cost <= free);
            let back = self.whole_free_bytes(heap, Give::All);
            if !fits && back > 0 && free.saturating_add(back) >= size {
                let _ = self.trim(driver, heap, true, Give::All);
            }
            grown = match self.fill_for(driver, heap, slot, size, room(self), true) {
                Ok(true) => Ok(()),
                Ok(false) => self.grow_for(driver, heap, slot, size, Growth::Exact, room(self)),
                Err(e) => Err(GrowError::Driver(e)),
            };
        }
        self.more.policy.mapped(self.mapped());
        match grown {
            Ok(()) => {
                let p = heap
                    .allocate(slot, size, requested)
                    .or_else(|| heap.allocate_wild(slot, size, requested))
                    .ok_or_else(|| oom(None))?;
                self.more.policy.served(live);
                Ok(p)
            }
            Err(GrowError::NoRoom { room }) => Err(oom(Some(room))),
            Err(GrowError::Driver(e)) if e.is_out_of_memory() => {
                Err(oom(driver.mem_get_info().ok().map(|i| i.free)))
            }
            Err(GrowError::Driver(e)) => Err(MrError::Driver(e)),
            Err(GrowError::Records(full)) => Err(MrError::records_full(resource, requested, full)),
        }
    }
}
