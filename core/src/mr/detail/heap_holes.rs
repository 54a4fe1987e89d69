//! Holes in a [`CoalescingHeap`] chunk that is an expandable segment: ranges whose physical
//! memory the segment gave back (or is about to), kept as blocks of owner [`UNMAPPED`].
//!
//! A hole is in no free list and is never the wilderness, so no allocation — the fast path
//! included — can land on it, and it never merges with a free block (a free block's owner is
//! a stream slot); adjacent holes merge with each other. Its bytes are in the chunk but not
//! held: [`CoalescingHeap::held`] counts what is mapped. The segment (`segment`) keeps the
//! [`Holes`] beside its heap (so that the heap, whose layout the fast paths are compiled
//! against, is unchanged), decides what to carve ([`Holes::carve`]) and maps memory before it
//! fills a hole again ([`Holes::fill`]); neither makes a driver call.

use std::collections::BTreeMap;

use super::heap::{CoalescingHeap, QUARANTINE, UNMAPPED};
use super::record::{Block, NIL};

/// A free block a segment may carve a hole from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FreeRun {
    /// Its record.
    pub(crate) record: u32,
    /// Its first address.
    pub(crate) addr: u64,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// The slot whose lists hold it (or whose wilderness it is).
    pub(crate) slot: usize,
}

impl CoalescingHeap {
    /// Every free block in a stream slot's lists, and the wilderness: what a segment may give
    /// the memory of back. Blocks in quarantine are left out (no stream to wait for).
    ///
    /// # Time complexity
    ///
    /// O(free blocks).
    pub(crate) fn free_runs(&self) -> Vec<FreeRun> {
        let mut records = Vec::new();
        for l in &self.lists {
            l.index.collect(self.slab.records(), &mut records);
        }
        records.extend(self.wilderness_block);
        records
            .into_iter()
            .map(|record| {
                let b = self.slab.get(record);
                FreeRun {
                    record,
                    addr: b.addr,
                    size: b.size(),
                    slot: usize::from(b.owner),
                }
            })
            .collect()
    }

    /// Splits block `i` at `at` (inside it): `i` keeps the lower part, and the record of the
    /// upper part, of the same owner and in no list, is returned. A record is vacant: the
    /// caller reserved it ([`CoalescingHeap::reserve_records`]).
    fn split_at(&mut self, i: u32, at: u64) -> u32 {
        let b = *self.slab.get(i);
        debug_assert!(at > b.addr && at < b.addr + b.size());
        let upper = self.slab.view().insert(Block {
            addr: at,
            units: Block::units_of(b.addr + b.size() - at),
            prev_phys: i,
            next_phys: b.next_phys,
            prev_free: NIL,
            next_free: NIL,
            owner: b.owner,
            class: 0,
        });
        if b.next_phys != NIL {
            self.slab.get_mut(b.next_phys).prev_phys = upper;
        }
        let lower = self.slab.get_mut(i);
        lower.next_phys = upper;
        lower.set_size(at - b.addr);
        upper
    }

    /// Bytes in holes, found by walking the blocks. O(blocks): for `check`.
    pub(super) fn hole_bytes(&self) -> u64 {
        let mut bytes = 0;
        for c in &self.chunks {
            let mut i = c.first;
            while i != NIL {
                let b = self.slab.get(i);
                if b.owner == UNMAPPED {
                    bytes += b.size();
                }
                i = b.next_phys;
            }
        }
        bytes
    }
}

/// The holes of a segment's chunk: first address → record in its heap.
#[derive(Debug, Default)]
pub(crate) struct Holes(BTreeMap<u64, u32>);

impl Holes {
    /// The holes, `(address, size)`, in address order.
    ///
    /// # Time complexity
    ///
    /// O(holes) to go through them all.
    #[cfg(test)]
    pub(crate) fn iter<'a>(
        &'a self,
        heap: &'a CoalescingHeap,
    ) -> impl Iterator<Item = (u64, u64)> + 'a {
        self.0
            .iter()
            .map(|(&addr, &i)| (addr, heap.slab.get(i).size()))
    }

    /// The holes, `(address, record)`, in address order.
    pub(crate) fn records(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.0.iter().map(|(&addr, &i)| (addr, i))
    }

    /// The hole at the end of the chunk, if its last block is one: `(address, size)`.
    pub(crate) fn last(&self, heap: &CoalescingHeap) -> Option<(u64, u64)> {
        let (&addr, &i) = self.0.last_key_value()?;
        let b = heap.slab.get(i);
        (b.next_phys == NIL).then(|| (addr, b.size()))
    }

    /// Takes `lo..hi` (granule multiples inside it) out of the free block `run` found by
    /// [`CoalescingHeap::free_runs`] as a hole; the parts below and above stay free in the same
    /// slot (the part above as the wilderness when it is last). The caller has made sure no
    /// other carve changed the block since, and reserved two records.
    ///
    /// # Time complexity
    ///
    /// O(log holes).
    pub(crate) fn carve(&mut self, heap: &mut CoalescingHeap, run: FreeRun, lo: u64, hi: u64) {
        let FreeRun {
            record: i, slot, ..
        } = run;
        let b = *heap.slab.get(i);
        debug_assert!(
            b.is_free() && usize::from(b.owner) == slot && slot < usize::from(QUARANTINE)
        );
        debug_assert!(b.addr <= lo && lo < hi && hi <= b.addr + b.size());
        if heap.wilderness_block == Some(i) {
            heap.wilderness_block = None;
        } else {
            heap.lists[slot].index.remove(&mut heap.slab.view(), i);
        }
        let hole = if lo > b.addr {
            let h = heap.split_at(i, lo);
            heap.lists[slot].index.insert(&mut heap.slab.view(), i);
            h
        } else {
            i
        };
        if hi < b.addr + b.size() {
            let up = heap.split_at(hole, hi);
            if heap.keeps_wilderness && heap.slab.get(up).next_phys == NIL {
                heap.wilderness_block = Some(up);
            } else {
                heap.lists[slot].index.insert(&mut heap.slab.view(), up);
            }
        }
        heap.slab.get_mut(hole).owner = UNMAPPED;
        self.0.insert(lo, hole);
        heap.held -= hi - lo;
        self.merge(heap, hole);
    }

    /// Merges hole `h` with the holes just below and above it.
    fn merge(&mut self, heap: &mut CoalescingHeap, mut h: u32) {
        let prev = heap.slab.get(h).prev_phys;
        if prev != NIL && heap.slab.get(prev).owner == UNMAPPED {
            let addr = heap.slab.get(h).addr;
            self.0.remove(&addr);
            heap.absorb_next(prev, h);
            h = prev;
        }
        let next = heap.slab.get(h).next_phys;
        if next != NIL && heap.slab.get(next).owner == UNMAPPED {
            let addr = heap.slab.get(next).addr;
            self.0.remove(&addr);
            heap.absorb_next(h, next);
        }
    }

    /// Makes `lo..hi` (granule multiples inside one hole) free in `slot` again, merged with
    /// `slot`'s free neighbours: the caller has mapped it and reserved two records. Returns
    /// false, changing nothing, when no hole holds the range.
    ///
    /// # Time complexity
    ///
    /// O(log holes).
    pub(crate) fn fill(
        &mut self,
        heap: &mut CoalescingHeap,
        slot: usize,
        lo: u64,
        hi: u64,
    ) -> bool {
        let Some((&addr, &h)) = self.0.range(..=lo).next_back() else {
            return false;
        };
        let end = addr + heap.slab.get(h).size();
        if hi > end || lo >= hi {
            return false;
        }
        let r = if lo > addr {
            heap.split_at(h, lo)
        } else {
            self.0.remove(&addr);
            h
        };
        if hi < end {
            let up = heap.split_at(r, hi);
            self.0.insert(hi, up);
        }
        heap.held += hi - lo;
        let _ = heap.file_free(slot, r);
        true
    }

    /// Drops the hole at the end of the chunk (the chunk ends where it starts then), and
    /// makes the free block below it the wilderness; returns the bytes dropped (0 when the
    /// last block is no hole).
    ///
    /// # Time complexity
    ///
    /// O(log holes).
    pub(crate) fn cut_tail(&mut self, heap: &mut CoalescingHeap) -> u64 {
        let Some((addr, size)) = self.last(heap) else {
            return 0;
        };
        let Some(h) = self.0.remove(&addr) else {
            return 0;
        };
        let prev = heap.slab.get(h).prev_phys;
        heap.slab.remove(h);
        if prev == NIL {
            heap.chunks.clear();
            return size;
        }
        heap.chunks[0].size -= size;
        heap.slab.get_mut(prev).next_phys = NIL;
        let b = *heap.slab.get(prev);
        if heap.keeps_wilderness && b.is_free() && b.owner < UNMAPPED {
            let slot = usize::from(b.owner);
            heap.lists[slot].index.remove(&mut heap.slab.view(), prev);
            heap.wilderness_block = Some(prev);
        }
        size
    }

    /// Checks the map against `heap`'s blocks: every hole named, and named where it starts.
    ///
    /// # Errors
    ///
    /// The first disagreement.
    #[cfg(test)]
    pub(crate) fn check(&self, heap: &CoalescingHeap) -> Result<(), String> {
        let mut bytes = 0;
        for (&addr, &i) in &self.0 {
            let b = heap.slab.get(i);
            if b.owner != UNMAPPED || b.addr != addr {
                return Err(format!("the hole map names {addr:#x}, not a hole there"));
            }
            bytes += b.size();
        }
        if bytes != heap.hole_bytes() {
            return Err(format!(
                "the hole map names {bytes} bytes of holes, not all"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::StreamId;
    use crate::mr::detail::tlsf::GRANULE;

    const BASE: u64 = 1 << 30;
    /// A segment granule in heap granules, small for the tests.
    const G: u64 = 16 * GRANULE;

    fn segment(bytes: u64) -> (CoalescingHeap, Holes, usize) {
        let mut h = CoalescingHeap::default();
        h.set_wilderness();
        let s = h.slot(StreamId(0));
        h.add_chunk(s, BASE, bytes).unwrap();
        // Carves and fills take reserved records, as a segment reserves them: enough for
        // every test here.
        h.reserve_records(32).unwrap();
        (h, Holes::default(), s)
    }

    fn check(h: &CoalescingHeap, holes: &Holes) {
        h.check().unwrap();
        holes.check(h).unwrap();
    }

    fn run_at(h: &CoalescingHeap, addr: u64) -> FreeRun {
        h.free_runs().into_iter().find(|r| r.addr == addr).unwrap()
    }

    #[test]
    fn a_hole_is_never_allocated_and_refills_merged() {
        let (mut h, mut holes, s) = segment(8 * G);
        let a = h.allocate_wild(s, G + GRANULE, 1).unwrap();
        let b = h.allocate_wild(s, 3 * G, 1).unwrap();
        let c = h.allocate_wild(s, GRANULE, 1).unwrap();
        h.deallocate(b, 1, s).unwrap();
        // The free block b.. spans granules 2..4 wholly (its first granule is shared with a).
        let run = run_at(&h, b);
        assert_eq!((run.size, run.slot), (3 * G, s));
        holes.carve(&mut h, run, BASE + 2 * G, BASE + 4 * G);
        check(&h, &holes);
        assert_eq!(h.held(), 6 * G);
        assert_eq!(holes.iter(&h).collect::<Vec<_>>(), [(BASE + 2 * G, 2 * G)]);
        assert_eq!(h.allocate(s, 2 * G, 1), None, "only the edges are free");
        // Filling half of it merges with the free block below.
        assert!(holes.fill(&mut h, s, BASE + 2 * G, BASE + 3 * G));
        check(&h, &holes);
        assert_eq!(holes.iter(&h).collect::<Vec<_>>(), [(BASE + 3 * G, G)]);
        assert_eq!(h.allocate(s, 2 * G - GRANULE, 1), Some(b));
        assert!(
            !holes.fill(&mut h, s, BASE + 2 * G, BASE + 3 * G),
            "not a hole"
        );
        h.deallocate(a, 1, s).unwrap();
        h.deallocate(c, 1, s).unwrap();
        check(&h, &holes);
    }

    #[test]
    fn adjacent_holes_merge_and_a_hole_at_the_end_is_cut() {
        let (mut h, mut holes, s) = segment(8 * G);
        let a = h.allocate_wild(s, 2 * G, 1).unwrap();
        let run = run_at(&h, BASE + 2 * G);
        assert_eq!(h.wild().map(|w| w.0), Some(run.addr));
        holes.carve(&mut h, run, BASE + 4 * G, BASE + 6 * G);
        assert_eq!(h.wild().map(|w| w.0), Some(BASE + 6 * G), "the part above");
        let run = run_at(&h, BASE + 6 * G);
        holes.carve(&mut h, run, BASE + 6 * G, BASE + 8 * G);
        let run = run_at(&h, BASE + 2 * G);
        holes.carve(&mut h, run, BASE + 2 * G, BASE + 4 * G);
        check(&h, &holes);
        assert_eq!(holes.iter(&h).collect::<Vec<_>>(), [(BASE + 2 * G, 6 * G)]);
        assert_eq!((h.wild(), h.held()), (None, 2 * G));
        assert_eq!(holes.cut_tail(&mut h), 6 * G);
        assert_eq!(h.chunks()[0].size, 2 * G);
        check(&h, &holes);
        h.deallocate(a, 1, s).unwrap();
        assert_eq!(h.wild(), Some((BASE, 2 * G, s)));
        h.extend_chunk(s, G).unwrap();
        check(&h, &holes);
    }
}
