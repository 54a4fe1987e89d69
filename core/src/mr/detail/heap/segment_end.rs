//! The end of a [`CoalescingHeap`] chunk that is an expandable segment: the wilderness, and
//! growing and cutting the chunk there.
//!
//! With [`CoalescingHeap::set_wilderness`] on, the free last block of the (one) chunk is kept
//! out of the free lists: the fast path never splits it, so requests fill the holes below it
//! first, and it serves a request only when no listed block fits (`allocate_wild`), which is
//! when a pool without it would have grown. This is dlmalloc's top chunk. Measured on W2: held
//! at peak 1.098 × peak live without it after the first pass, 1.084 with it (the
//! book's "Resources and adaptors"). The segment grows by extending the wilderness and shrinks by cutting it.

use super::{CoalescingHeap, SlabFull};
use crate::mr::detail::record::{Block, LIVE, NIL};
use crate::mr::detail::tlsf::GRANULE;

impl CoalescingHeap {
    /// Keeps the free last block of the chunk out of the lists from now on. Call it on an
    /// empty heap that will hold one chunk, grown and cut at its end.
    pub(crate) fn set_wilderness(&mut self) {
        debug_assert!(self.chunks().is_empty());
        self.keeps_wilderness = true;
    }

    /// The wilderness, if there is one: its address, size and owning slot.
    ///
    /// # Time complexity
    ///
    /// O(1).
    pub(crate) fn wild(&self) -> Option<(u64, u64, usize)> {
        let b = self.slab.get(self.wilderness_block?);
        Some((b.addr, b.size(), usize::from(b.owner)))
    }

    /// Gives the wilderness to `slot` (the caller ordered `slot`'s stream after its owner's)
    /// and merges it with `slot`'s free block just below it.
    pub(crate) fn take_wild(&mut self, slot: usize) {
        let Some(w) = self.wilderness_block else {
            return;
        };
        self.slab.get_mut(w).owner = slot as u16;
        let prev = self.slab.get(w).prev_phys;
        // The sentinel (NIL) is never free, so it is never merged (as in `file_free`).
        if usize::from(self.slab.get(prev).owner) == slot {
            self.lists[slot].index.remove(&mut self.slab.view(), prev);
            self.absorb_next(prev, w);
            self.wilderness_block = Some(prev);
        }
    }

    /// Serves `size` bytes (`requested` asked) from the front of the wilderness when `slot`
    /// owns it and it is large enough.
    ///
    /// # Time complexity
    ///
    /// O(1).
    pub(crate) fn allocate_wild(&mut self, slot: usize, size: u64, requested: u64) -> Option<u64> {
        let w = self.wilderness_block?;
        let b = *self.slab.get(w);
        if usize::from(b.owner) != slot || b.size() < size {
            return None;
        }
        // The split needs a record: where the slab cannot grow, nothing is taken (as in
        // `allocate`).
        self.slab.reserve().ok()?;
        self.wilderness_block = None;
        if b.size() > size {
            // Reserved above: the view's insert takes the vacant record.
            let rest = self.slab.view().insert(Block {
                addr: b.addr + size,
                units: Block::units_of(b.size() - size),
                prev_phys: w,
                next_phys: NIL,
                prev_free: NIL,
                next_free: NIL,
                owner: slot as u16,
                class: 0,
            });
            self.slab.get_mut(w).next_phys = rest;
            self.slab.get_mut(w).set_size(size);
            self.wilderness_block = Some(rest);
        }
        let blk = self.slab.get_mut(w);
        blk.owner = LIVE;
        blk.set_requested(requested);
        self.live_blocks.insert(&mut self.slab.view(), b.addr, w);
        self.live_bytes += size;
        Some(b.addr)
    }

    /// The last block of chunk 0.
    fn last_block(&self) -> u32 {
        if let Some(w) = self.wilderness_block {
            return w;
        }
        let mut i = self.chunks()[0].first;
        while self.slab.get(i).next_phys != NIL {
            i = self.slab.get(i).next_phys;
        }
        i
    }

    /// Grows chunk 0 by `bytes` (a positive granule multiple) at its end, as wilderness of
    /// `slot`: the memory behind the chunk is contiguous with it (an expandable segment). A
    /// wilderness of another slot is filed in that slot's lists first.
    ///
    /// # Errors
    ///
    /// [`SlabFull`] when the end needs a record and the slab cannot grow: nothing changed.
    ///
    /// # Time complexity
    ///
    /// O(1) with a wilderness; O(blocks of the chunk) when its last block is live.
    pub(crate) fn extend_chunk(&mut self, slot: usize, bytes: u64) -> Result<(), SlabFull> {
        debug_assert!(self.keeps_wilderness && bytes >= GRANULE && bytes.is_multiple_of(GRANULE));
        self.slab.reserve()?;
        let last = self.last_block();
        let b = *self.slab.get(last);
        if self.wilderness_block == Some(last) && usize::from(b.owner) == slot {
            self.slab.get_mut(last).set_size(b.size() + bytes);
        } else {
            if self.wilderness_block == Some(last) {
                let owner = usize::from(b.owner);
                self.lists[owner].index.insert(&mut self.slab.view(), last);
            }
            let i = self.slab.view().insert(Block {
                addr: b.addr + b.size(),
                units: Block::units_of(bytes),
                prev_phys: last,
                next_phys: NIL,
                prev_free: NIL,
                next_free: NIL,
                owner: slot as u16,
                class: 0,
            });
            self.slab.get_mut(last).next_phys = i;
            self.wilderness_block = Some(i);
        }
        self.chunks[0].size += bytes;
        self.held += bytes;
        Ok(())
    }

    /// Cuts chunk 0 back so that it ends at `end`, a granule multiple inside the wilderness or
    /// at its start (which drops it, and the chunk when `end` is the chunk's base). Returns
    /// the bytes cut off: 0 when `end` is not there.
    ///
    /// # Time complexity
    ///
    /// O(1).
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "the segment cuts its end as a hole now (`heap_holes`)"
        )
    )]
    pub(crate) fn cut_chunk(&mut self, end: u64) -> u64 {
        let (Some(w), Some(c)) = (self.wilderness_block, self.chunks().first().copied()) else {
            return 0;
        };
        let b = *self.slab.get(w);
        let chunk_end = c.base + c.size;
        if end < b.addr || end >= chunk_end || !end.is_multiple_of(GRANULE) {
            return 0;
        }
        let cut = chunk_end - end;
        self.held -= cut;
        if end > b.addr {
            self.slab.get_mut(w).set_size(end - b.addr);
        } else {
            self.wilderness_block = None;
            self.slab.remove(w);
            if b.prev_phys == NIL {
                self.chunks.clear();
                return cut;
            }
            self.slab.get_mut(b.prev_phys).next_phys = NIL;
        }
        self.chunks[0].size -= cut;
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::StreamId;

    const S0: StreamId = StreamId(0);
    const S1: StreamId = StreamId(1);
    const BASE: u64 = 1 << 20;

    fn segment() -> (CoalescingHeap, usize, usize) {
        let mut h = CoalescingHeap::default();
        h.set_wilderness();
        let (s0, s1) = (h.slot(S0), h.slot(S1));
        (h, s0, s1)
    }

    #[test]
    fn the_wilderness_serves_only_what_the_lists_cannot() {
        let (mut h, s0, _) = segment();
        h.add_chunk(s0, BASE, 16 * GRANULE).unwrap();
        assert_eq!(
            h.allocate(s0, GRANULE, 1),
            None,
            "the wilderness is in no list"
        );
        let a = h.allocate_wild(s0, 4 * GRANULE, 1).unwrap();
        let b = h.allocate_wild(s0, 4 * GRANULE, 1).unwrap();
        assert_eq!((a, b), (BASE, BASE + 4 * GRANULE));
        h.deallocate(a, 1, s0).unwrap();
        // A hole below the wilderness serves the next fitting request.
        assert_eq!(h.allocate(s0, 2 * GRANULE, 1), Some(BASE));
        assert_eq!(h.wild(), Some((BASE + 8 * GRANULE, 8 * GRANULE, s0)));
        assert_eq!(h.free_blocks(), 2);
        // Freeing the block next to it merges it, and the hole below, into it.
        h.deallocate(b, 1, s0).unwrap();
        assert_eq!(h.wild(), Some((BASE + 2 * GRANULE, 14 * GRANULE, s0)));
        assert_eq!(h.free_bytes(), 14 * GRANULE);
        assert_eq!(h.free_blocks(), 1);
        h.check().unwrap();
    }

    #[test]
    fn growth_extends_and_cuts_trim_the_wilderness() {
        let (mut h, s0, s1) = segment();
        h.add_chunk(s0, BASE, 8 * GRANULE).unwrap();
        let a = h.allocate_wild(s0, 8 * GRANULE, 1).unwrap();
        assert_eq!(h.wild(), None);
        h.extend_chunk(s1, 4 * GRANULE).unwrap();
        assert_eq!(h.wild(), Some((BASE + 8 * GRANULE, 4 * GRANULE, s1)));
        h.extend_chunk(s1, 2 * GRANULE).unwrap();
        assert_eq!(h.wild(), Some((BASE + 8 * GRANULE, 6 * GRANULE, s1)));
        // Another stream's growth files s1's wilderness and starts its own.
        h.extend_chunk(s0, 2 * GRANULE).unwrap();
        assert_eq!(h.wild(), Some((BASE + 14 * GRANULE, 2 * GRANULE, s0)));
        assert_eq!(h.slots_with_free_blocks(), 2);
        h.check().unwrap();
        // Adopting s1's blocks merges them into s0's wilderness.
        h.adopt(s0, s1);
        assert_eq!(h.wild(), Some((BASE + 8 * GRANULE, 8 * GRANULE, s0)));
        h.check().unwrap();
        assert_eq!(
            h.cut_chunk(BASE + 9 * GRANULE - 1),
            0,
            "not a granule boundary"
        );
        assert_eq!(h.cut_chunk(BASE + 4 * GRANULE), 0, "below the wilderness");
        assert_eq!(h.cut_chunk(BASE + 12 * GRANULE), 4 * GRANULE);
        assert_eq!(
            h.cut_chunk(BASE + 8 * GRANULE),
            4 * GRANULE,
            "the whole wilderness"
        );
        assert_eq!((h.wild(), h.held()), (None, 8 * GRANULE));
        h.check().unwrap();
        h.deallocate(a, 1, s0).unwrap();
        assert_eq!(
            h.wild(),
            Some((BASE, 8 * GRANULE, s0)),
            "the freed last block"
        );
        assert_eq!(h.cut_chunk(BASE), 8 * GRANULE, "the whole chunk");
        assert!(h.chunks().is_empty() && h.held() == 0);
        h.check().unwrap();
    }

    #[test]
    fn another_streams_wilderness_is_taken_and_merged() {
        let (mut h, s0, s1) = segment();
        h.add_chunk(s0, BASE, 8 * GRANULE).unwrap();
        let a = h.allocate_wild(s0, 2 * GRANULE, 1).unwrap();
        let b = h.allocate_wild(s0, 2 * GRANULE, 1).unwrap();
        h.deallocate(b, 1, s1).unwrap();
        assert_eq!(
            h.allocate_wild(s1, GRANULE, 1),
            None,
            "s0's wilderness is not s1's"
        );
        assert_eq!(
            h.free_blocks(),
            2,
            "s1's block beside s0's wilderness stays apart"
        );
        h.check().unwrap();
        h.take_wild(s1);
        assert_eq!(h.wild(), Some((BASE + 2 * GRANULE, 6 * GRANULE, s1)));
        h.check().unwrap();
        assert_eq!(h.allocate_wild(s1, 6 * GRANULE, 1), Some(b));
        h.deallocate(a, 1, s0).unwrap();
        h.check().unwrap();
    }

    #[test]
    fn random_churn_over_a_growing_segment_keeps_every_invariant() {
        let (mut h, s0, s1) = segment();
        let slots = [s0, s1];
        let mut rng = crate::workloads::SplitMix64::new(3);
        let mut live: Vec<(u64, u64)> = Vec::new();
        for step in 0..20_000 {
            let slot = slots[rng.below(2) as usize];
            if rng.below(100) < 55 {
                let size = rng.range(1, 256) * GRANULE;
                let p = h.allocate(slot, size, size).or_else(|| {
                    if h.wild().is_some_and(|(_, _, o)| o != slot) {
                        h.take_wild(slot);
                    }
                    h.allocate_wild(slot, size, size)
                });
                let p = p.or_else(|| {
                    if h.chunks().is_empty() {
                        h.add_chunk(slot, BASE, size).unwrap();
                    } else {
                        h.extend_chunk(slot, size).unwrap();
                    }
                    h.allocate_wild(slot, size, size)
                });
                live.push((p.unwrap(), size));
            } else if !live.is_empty() {
                let (p, n) = live.swap_remove(rng.below(live.len() as u64) as usize);
                h.deallocate(p, n, slot).unwrap();
            }
            if step % 1499 == 0 {
                h.unify(slots[1]);
            }
            if step % 997 == 0 {
                h.adopt(slots[0], slots[1]);
                if let Some((addr, _, _)) = h.wild() {
                    let end = addr.div_ceil(4 * GRANULE) * 4 * GRANULE;
                    h.cut_chunk(end);
                }
            }
            if step % 101 == 0 {
                h.check().unwrap();
            }
        }
        assert_eq!(h.live_count(), live.len());
        h.check().unwrap();
    }
}
