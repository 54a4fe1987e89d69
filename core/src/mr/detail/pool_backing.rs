//! [`PoolBacking`]: where a pool's memory comes from — chunks from its upstream, or one
//! expandable segment from its upstream's driver — decided when it first takes memory.

use crate::driver::Driver;
use crate::error::DriverResult;
use crate::mr::detail::heap::CoalescingHeap;
use crate::mr::detail::move_budget::MoveBudget;
use crate::mr::detail::record::MAX_CHUNK;
use crate::mr::detail::segment::ExpandableSegment;
use crate::mr::pool_options::{Backing, PoolOptions};

/// Where a pool's memory comes from.
#[derive(Debug, Default)]
pub(crate) enum PoolBacking {
    /// The pool has taken no memory yet.
    #[default]
    Undecided,
    /// Chunks from the upstream resource.
    Chunks,
    /// One expandable segment from the upstream's driver.
    Segment(ExpandableSegment),
}

impl PoolBacking {
    /// Bytes of physical memory held unmapped, kept to be mapped again (a segment's spare
    /// handles); 0 for chunks.
    pub(crate) fn spare_bytes(&self) -> u64 {
        match self {
            PoolBacking::Segment(s) => s.spare_bytes(),
            _ => 0,
        }
    }

    /// The backing in force, once decided.
    pub(crate) fn kind(&self) -> Option<Backing> {
        match self {
            PoolBacking::Undecided => None,
            PoolBacking::Chunks => Some(Backing::Chunks),
            PoolBacking::Segment(s) if s.gives_back() => Some(Backing::ExpandableTight),
            PoolBacking::Segment(_) => Some(Backing::Expandable),
        }
    }

    /// Decides, once: a segment when `options` want [`Backing::Expandable`] (or `Tight`), the
    /// upstream is `driver_backed`, `heap` is empty and `driver` can reserve address space for
    /// the whole device (or the maximum, when smaller); chunks otherwise, also when a driver
    /// call fails.
    pub(crate) fn decide(
        &mut self,
        heap: &mut CoalescingHeap,
        options: &PoolOptions,
        driver_backed: bool,
        driver: &dyn Driver,
    ) {
        if !matches!(self, PoolBacking::Undecided) {
            return;
        }
        *self = PoolBacking::Chunks;
        let (wanted, maximum) = (options.backing, options.maximum_size);
        let expandable = matches!(wanted, Backing::Expandable | Backing::ExpandableTight);
        if !expandable || !driver_backed || !heap.chunks().is_empty() {
            return;
        }
        let Ok(info) = driver.mem_get_info() else {
            return;
        };
        let tight = wanted == Backing::ExpandableTight;
        // A segment that gives back memory in its middle leaves unmapped holes between live
        // blocks, so its address space must outgrow what it maps: with only the maximum
        // reserved, W2 under a maximum of 1.02 × peak live ran out of addresses (the end at
        // the reservation's) with the memory there. Address space costs no memory.
        let span = maximum
            .map_or(info.total, |m| m.min(info.total))
            .saturating_mul(if tight { 2 } else { 1 })
            .min(MAX_CHUNK);
        if let Ok(mut seg) = ExpandableSegment::reserve(driver, span) {
            if tight {
                seg.give_back(MoveBudget::new(options.move_share, driver.host_clock_ns()));
            }
            heap.set_wilderness();
            *self = PoolBacking::Segment(seg);
        }
    }

    /// Gives back the wholly free handles of a segment (nothing for chunks);
    /// returns the bytes given back. `synchronized`: the caller already waited for the device.
    ///
    /// # Errors
    ///
    /// The driver's first error.
    pub(crate) fn release_segment_tail(
        &mut self,
        heap: &mut CoalescingHeap,
        driver: &dyn Driver,
        synchronized: bool,
    ) -> DriverResult<u64> {
        let PoolBacking::Segment(seg) = self else {
            return Ok(0);
        };
        if heap.free_bytes() == 0 && !seg.has_pending() && seg.spare_bytes() == 0 {
            return Ok(0);
        }
        // An unmap is not stream-ordered: the frees into the memory must be complete.
        if !synchronized {
            driver.context_synchronize()?;
        }
        seg.release_free(driver, heap)
    }

    /// Unmaps and releases a segment and frees its reservation, after waiting for the device,
    /// and forgets `heap`'s blocks; returns false, changing nothing, for chunks.
    pub(crate) fn destroy_segment(
        &mut self,
        heap: &mut CoalescingHeap,
        driver: &dyn Driver,
    ) -> bool {
        let PoolBacking::Segment(_) = self else {
            return false;
        };
        if let PoolBacking::Segment(seg) = std::mem::take(self) {
            // Errors have no caller to go to: what the driver refuses stays with it.
            let _ = driver.context_synchronize();
            let _ = seg.destroy(driver);
        }
        *heap = CoalescingHeap::default();
        true
    }
}
