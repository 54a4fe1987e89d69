//! Giving back the physical memory of an [`ExpandableSegment`]'s free blocks anywhere in its
//! range, and mapping it again where an allocation lands: trims, deferred unmaps, holes
//! filled.
//!
//! Where the pool would map memory (held grows nowhere else), the segment first gives back
//! what the mapping would take past the most it ever had mapped, or past the most live bytes
//! seen and 1 % ([`TrimPolicy`](super::granules::TrimPolicy)): it carves the handles the
//! largest free blocks wholly cover out as holes (`heap_holes`: in no list, so no allocation
//! lands there) and unmaps them. A request no free block fits then fills the hole that maps
//! the fewest bytes for it (starting in the free block below the hole) when that is no more
//! than growing at the end would map. Only the partial granules at free blocks' edges stay
//! mapped, and held memory stops growing where live memory does.
//!
//! Unmapping is not stream-ordered: a batch of holes goes back once an event recorded on the
//! stream whose lists held them (after every free into them) has completed — at once when the
//! stream is idle, else at the next look (a deferred unmap); before that the holes are in no
//! list, so nothing reuses them. After a context synchronize (`release`, a device short of
//! memory) everything goes back at once.
//!
//! Tried (four PyTorch traces in `bench/traces`, W1–W3): looking whenever the free bytes had
//! grown by 0.5 % of mapped and giving back every free handle held the traces at 1.001–1.016
//! but unmapped and mapped again in every step of a steady loop (W2: 17 µs of driver calls an
//! operation on the simulator); keeping unmapped handles for reuse (up to 0.5 % of mapped)
//! saved 7 % of the `cuMemCreate` calls on the transformer trace and held 1.010 against 1.005;
//! a slack of 2 % over the live peak instead of 1 % cut W2's driver time a quarter (2.0 to 1.6
//! µs an operation) and held the transformer trace at 1.015 against 1.010.

use crate::driver::{Driver, EventId, StreamId};
use crate::error::DriverResult;
use crate::mr::detail::heap::CoalescingHeap;
use crate::mr::detail::heap_holes::FreeRun;

use super::segment::ExpandableSegment;

/// Which free blocks [`ExpandableSegment::trim`] gives the handles of back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Give {
    /// The largest below the free end (and the free end too when the flag says so) until
    /// at least these bytes go back.
    Excess(u64, bool),
    /// Every one below the free end.
    Listed,
    /// Every one.
    All,
}

/// Holes carved together, unmapped once `event` has completed.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) event: Option<EventId>,
    pub(super) ranges: Vec<(u64, u64)>,
}

impl ExpandableSegment {
    /// An event recorded on `stream` now, from the spares or new.
    fn record(&mut self, driver: &dyn Driver, stream: StreamId) -> DriverResult<EventId> {
        let e = match self.more.spare_events.pop() {
            Some(e) => e,
            None => driver.event_create()?,
        };
        driver
            .event_record(e, stream)
            .inspect_err(|_| self.more.spare_events.push(e))?;
        Ok(e)
    }

    /// Looks for free blocks in `heap` that wholly cover mapped handles, carves those handles
    /// out as holes and unmaps them once the device is done with them (see the module docs);
    /// `give` says which blocks and when. `synchronized`: the caller waited for the device,
    /// so everything goes back now.
    ///
    /// # Errors
    ///
    /// The driver's first error unmapping; what it refused stays a hole, still mapped, and is
    /// tried again at the next look.
    ///
    /// # Time complexity
    ///
    /// O(free blocks × log handles) when it looks, plus one event record per stream holding
    /// such blocks and one query, and two driver calls per handle given back; O(1) otherwise.
    pub(crate) fn trim(
        &mut self,
        driver: &dyn Driver,
        heap: &mut CoalescingHeap,
        synchronized: bool,
        give: Give,
    ) -> DriverResult<()> {
        let look = !matches!(give, Give::Excess(0, _));
        if look {
            let mut cuts: Vec<(FreeRun, u64, u64)> = self.cuts(heap, give).collect();
            if let Give::Excess(bytes, _) = give {
                // The largest first, as few as cover the excess.
                cuts.sort_by_key(|&(_, lo, hi)| std::cmp::Reverse(hi - lo));
                let mut sum = 0;
                let n = cuts
                    .iter()
                    .take_while(|&&(_, lo, hi)| {
                        let more = sum < bytes;
                        sum += hi - lo;
                        more
                    })
                    .count();
                cuts.truncate(n);
            }
            cuts.sort_by_key(|c| c.0.slot);
            for same in cuts.chunk_by(|a, b| a.0.slot == b.0.slot) {
                let event = if synchronized {
                    None
                } else {
                    match self.record(driver, heap.stream_of(same[0].0.slot)) {
                        Ok(e) => Some(e),
                        // A stream the user destroyed: its blocks wait for a synchronize.
                        Err(_) => continue,
                    }
                };
                for &(run, lo, hi) in same {
                    self.more.holes.carve(heap, run, lo, hi);
                }
                let ranges = same.iter().map(|&(_, lo, hi)| (lo, hi)).collect();
                self.pending.push(Pending { event, ranges });
            }
        }
        self.settle(driver, heap, synchronized)
    }

    /// The handles each free block `give` names wholly covers, as one run: the block and
    /// the run's ends.
    fn cuts<'a>(
        &'a self,
        heap: &CoalescingHeap,
        give: Give,
    ) -> impl Iterator<Item = (FreeRun, u64, u64)> + 'a {
        let w = heap.wild().map(|(addr, _, _)| addr);
        heap.free_runs()
            .into_iter()
            .filter(move |r| match give {
                Give::Excess(_, wild) => wild || Some(r.addr) != w,
                Give::Listed => Some(r.addr) != w,
                Give::All => true,
            })
            .filter_map(|r| {
                let (lo, hi) = self.more.maps.whole_run(r.addr, r.addr + r.size)?;
                Some((r, lo, hi))
            })
    }

    /// Bytes of the handles the free blocks `give` names wholly cover.
    pub(super) fn whole_free_bytes(&self, heap: &CoalescingHeap, give: Give) -> u64 {
        self.cuts(heap, give).map(|(_, lo, hi)| hi - lo).sum()
    }

    /// Bytes still mapped in holes that wait for the device.
    pub(super) fn pending_bytes(&self) -> u64 {
        self.pending
            .iter()
            .flat_map(|p| &p.ranges)
            .map(|&(lo, hi)| {
                self.more
                    .maps
                    .inside(lo, hi)
                    .iter()
                    .map(|m| m.2)
                    .sum::<u64>()
            })
            .sum()
    }

    /// Unmaps the holes whose batch's event has completed (all of them when `synchronized`),
    /// then cuts a hole at the end of the chunk off it.
    pub(super) fn settle(
        &mut self,
        driver: &dyn Driver,
        heap: &mut CoalescingHeap,
        synchronized: bool,
    ) -> DriverResult<()> {
        let mut first_err = None;
        let mut k = 0;
        while k < self.pending.len() {
            let done = synchronized
                || self.pending[k]
                    .event
                    .is_none_or(|e| driver.event_query(e).unwrap_or(false));
            if !done {
                k += 1;
                continue;
            }
            let p = self.pending.swap_remove(k);
            let mut failed = Vec::new();
            for (lo, hi) in p.ranges {
                if let Err(e) = self.unmap_range(driver, lo, hi) {
                    first_err.get_or_insert(e);
                    failed.push((lo, hi));
                }
            }
            self.more.spare_events.extend(p.event);
            if !failed.is_empty() {
                // Tried again at the next settle; the device is done with it.
                self.pending.push(Pending {
                    event: None,
                    ranges: failed,
                });
                k = self.pending.len();
            }
        }
        while let Some((addr, size)) = self.more.holes.last(heap) {
            if self.more.maps.overlaps(addr, addr + size) {
                break;
            }
            self.more.holes.cut_tail(heap);
            self.end = addr;
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The hole that takes the fewest new bytes for `size` bytes on `slot`: the bytes to map
    /// (what the request lacks beyond the free block just below the hole) and where.
    ///
    /// # Time complexity
    ///
    /// O(holes × log handles).
    pub(super) fn best_fill(
        &self,
        heap: &CoalescingHeap,
        slot: usize,
        size: u64,
    ) -> Option<(u64, u64)> {
        let g = self.granularity;
        let mut best: Option<(u64, u64, u64)> = None;
        for (addr, hsize) in self.more.holes.iter(heap) {
            let unmapped = self
                .more
                .maps
                .first_mapped(addr, addr + hsize)
                .unwrap_or(addr + hsize)
                - addr;
            let need = size
                .saturating_sub(self.more.holes.free_below(heap, addr, slot))
                .div_ceil(g)
                .max(1)
                .saturating_mul(g);
            if need <= unmapped && best.is_none_or(|(n, u, _)| (need, unmapped) < (n, u)) {
                best = Some((need, unmapped, addr));
            }
        }
        best.map(|(need, _, addr)| (need, addr))
    }

    /// Fills the hole [`ExpandableSegment::best_fill`] finds, when that maps no more than
    /// growing at the end would (or `anyway`) and within `room`. Returns whether it filled
    /// one.
    ///
    /// # Errors
    ///
    /// The driver's (out of memory); nothing changed.
    ///
    /// # Time complexity
    ///
    /// O(holes × log handles) plus two driver calls per handle mapped and one more.
    pub(super) fn fill_for(
        &mut self,
        driver: &dyn Driver,
        heap: &mut CoalescingHeap,
        slot: usize,
        size: u64,
        room: Option<u64>,
        anyway: bool,
    ) -> DriverResult<bool> {
        let Some((need, addr)) = self.best_fill(heap, slot, size) else {
            return Ok(false);
        };
        if (need > self.grow_bytes(heap, slot, size) && !anyway) || room.is_some_and(|r| need > r) {
            return Ok(false);
        }
        let need = self.fit_free(driver, need, need)?;
        self.map_range(driver, addr, need)?;
        let filled = self.more.holes.fill(heap, slot, addr, addr + need);
        debug_assert!(filled);
        Ok(true)
    }

    /// The bytes growing at the end would map for `size` bytes on `slot`, at the least.
    pub(super) fn grow_bytes(&self, heap: &CoalescingHeap, slot: usize, size: u64) -> u64 {
        size.saturating_sub(Self::wild_of(heap, slot))
            .div_ceil(self.granularity)
            .saturating_mul(self.granularity)
    }

    /// Gives back every wholly free handle, the holes waiting for the device included, and
    /// cuts the chunk where its free end starts; returns the bytes given back. The caller has
    /// waited for the device (an unmap is not stream-ordered).
    ///
    /// # Errors
    ///
    /// The driver's first error; what was unmapped before it is out of the heap.
    ///
    /// # Time complexity
    ///
    /// O(free blocks × log handles) plus two driver calls per handle given back.
    pub(crate) fn release_free(
        &mut self,
        driver: &dyn Driver,
        heap: &mut CoalescingHeap,
    ) -> DriverResult<u64> {
        let before = self.mapped();
        let r = self.trim(driver, heap, true, Give::All);
        r.map(|()| before - self.mapped())
    }

    /// Whether holes wait for the device before they are unmapped.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}
