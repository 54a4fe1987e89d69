//! [`Chunk`]: a chunk of upstream memory held for a plugin, with a bitmap of where its live
//! allocations start ([`StartBitmap`]), so that the overlap check of an answer in it costs a
//! few word reads however many allocations are live.

use emm_core::DevicePtr;

use crate::start_bitmap::StartBitmap;

/// log2 of the granule the start bitmap counts in. Every answer is aligned to at least 256
/// bytes, so two live allocations never start in the same granule, and allocations that do
/// not overlap cover granules that do not overlap.
pub(crate) const GRANULE_SHIFT: u32 = 8;

/// A chunk of upstream memory held for a plugin.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// Its device address.
    pub base: DevicePtr,
    /// Its size in bytes.
    pub size: u64,
    /// Live allocations inside it.
    pub live: u32,
    /// The instance generation that holds it; older ones are orphans of a quarantine.
    pub generation: u32,
    /// Where its live allocations start, by granule counted from `base`'s granule.
    starts: StartBitmap,
}

impl Chunk {
    /// The chunk `[base, base + size)` of `generation`, nothing live; `None` when `base + size`
    /// overflows or the chunk is over 1 TiB (the start bitmap's limit).
    pub fn new(base: DevicePtr, size: u64, generation: u32) -> Option<Chunk> {
        let end = base.0.checked_add(size)?;
        let granules = end.div_ceil(1 << GRANULE_SHIFT) - (base.0 >> GRANULE_SHIFT);
        let starts = StartBitmap::new(usize::try_from(granules).ok()?)?;
        Some(Chunk {
            base,
            size,
            live: 0,
            generation,
            starts,
        })
    }

    /// The granule of `addr` (at or after `base`).
    #[inline]
    fn granule(&self, addr: u64) -> usize {
        let g = (addr >> GRANULE_SHIFT) - (self.base.0 >> GRANULE_SHIFT);
        usize::try_from(g).unwrap_or(usize::MAX)
    }

    /// The first granule at or after `end`: where an allocation ending at `end` stops.
    #[inline]
    fn granule_end(&self, end: u64) -> usize {
        let up = end.div_ceil(1 << GRANULE_SHIFT);
        usize::try_from(up - (self.base.0 >> GRANULE_SHIFT)).unwrap_or(usize::MAX)
    }

    /// The address of granule `g`.
    #[inline]
    fn address(&self, g: usize) -> u64 {
        ((self.base.0 >> GRANULE_SHIFT) + g as u64) << GRANULE_SHIFT
    }

    /// The start of a live allocation of this chunk that overlaps `[addr, addr + size)`, if
    /// any. `addr` is aligned to 256 bytes and the range lies inside the chunk; `size_at`
    /// gives the size of the live allocation starting at an address.
    ///
    /// # Time complexity
    ///
    /// Two bitmap queries of O(log64 granules) word reads, and at most one `size_at`.
    #[inline]
    pub fn overlap(
        &self,
        addr: u64,
        size: u64,
        size_at: impl Fn(u64) -> Option<u64>,
    ) -> Option<u64> {
        let first = self.granule(addr);
        let end = self.granule_end(addr.saturating_add(size));
        // Anything starting inside the range overlaps it...
        if let Some(g) = self.starts.next_from(first).filter(|&g| g < end) {
            return Some(self.address(g));
        }
        // ...and so does the allocation before it, if it reaches past the range's start (live
        // allocations never overlap, so no earlier one can).
        let start = self.address(self.starts.last_before(first)?);
        // A start without its allocation cannot happen; count it as overlapping rather than
        // guess.
        let before = size_at(start).unwrap_or(u64::MAX);
        (start.saturating_add(before) > addr).then_some(start)
    }

    /// Records a live allocation at `addr` (checked with [`Chunk::overlap`]).
    #[inline]
    pub fn record(&mut self, addr: u64) {
        self.live = self.live.saturating_add(1);
        let g = self.granule(addr);
        self.starts.set(g);
    }

    /// Forgets the live allocation at `addr`.
    #[inline]
    pub fn forget(&mut self, addr: u64) {
        self.live = self.live.saturating_sub(1);
        let g = self.granule(addr);
        self.starts.clear(g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn granules_count_from_the_base_granule_whatever_the_base() {
        for base in [0x10_0000u64, 0x10_0080] {
            let mut c = Chunk::new(DevicePtr(base), 0x1000, 0).unwrap();
            let a = 0x10_0200;
            c.record(a);
            let size_at = |s: u64| (s == a).then_some(0x101);
            // 0x101 bytes reach one byte into the next granule.
            assert_eq!(c.overlap(0x10_0300, 1, size_at), Some(a));
            assert_eq!(c.overlap(0x10_0400, 0x100, size_at), None);
            // Ending one byte into it, or just before it.
            assert_eq!(c.overlap(0x10_0100, 0x101, size_at), Some(a));
            assert_eq!(c.overlap(0x10_0100, 0x100, size_at), None);
            assert_eq!(c.live, 1);
            c.forget(a);
            assert_eq!((c.overlap(0x10_0200, 1, size_at), c.live), (None, 0));
        }
        assert!(Chunk::new(DevicePtr(u64::MAX - 10), 100, 0).is_none());
    }
}
