//! [`CoalescingHeap::check`]: every invariant of the heap, checked in O(blocks), for tests and
//! the `emm_expensive_checks` tier.

use crate::mr::detail::record::{NIL, SCRATCH, SCRATCH_NUMBER};

use super::{CoalescingHeap, QUARANTINE, UNMAPPED};

impl CoalescingHeap {
    /// Checks every internal invariant: blocks tile each chunk, free blocks are filed in their
    /// owner's lists, no two same-owner free neighbours are left unmerged, the live map and
    /// byte counts agree. O(blocks); for tests.
    ///
    /// # Errors
    ///
    /// A description of the first broken invariant.
    pub(crate) fn check(&self) -> Result<(), String> {
        let blocks = self.slab.records();
        if *self.slab.get(SCRATCH_NUMBER) != SCRATCH {
            return Err("the scratch record changed: a branchless merge wrote through it".into());
        }
        let mut live = 0;
        let mut live_bytes = 0;
        let mut held = 0;
        for c in &self.chunks {
            held += c.size;
            let mut i = c.first;
            let mut addr = c.base;
            let mut prev = NIL;
            while i != NIL {
                let b = &blocks[i];
                if b.addr != addr || b.prev_phys != prev || b.units == 0 {
                    return Err(format!("chunk {:#x}: block {i} breaks the tiling", c.base));
                }
                if b.is_free() {
                    if b.next_phys != NIL && blocks[b.next_phys].owner == b.owner {
                        return Err(format!("unmerged free neighbours at {:#x}", { b.addr }));
                    }
                } else {
                    live += 1;
                    live_bytes += b.size();
                    if self.live_blocks.get(blocks, b.addr) != Some(i) {
                        return Err(format!("live block at {:#x} not in the map", { b.addr }));
                    }
                }
                addr += b.size();
                prev = i;
                i = b.next_phys;
            }
            if addr != c.base + c.size {
                return Err(format!("chunk {:#x} not fully tiled", c.base));
            }
        }
        // Holes are in the chunk but not held (`heap_holes`).
        let held = held - self.hole_bytes();
        if live != self.live_blocks.len() || held != self.held || live_bytes != self.live_bytes {
            return Err(format!(
                "counts: {live} live blocks seen, {} counted; {held} held, {} counted; \
                 {live_bytes} live bytes seen, {} counted (free bytes are held minus live)",
                self.live_blocks.len(),
                self.held,
                self.live_bytes
            ));
        }
        let indexed = self.live_blocks.records_indexed(blocks);
        if indexed.len() != self.live_blocks.len() || indexed.iter().any(|&j| blocks[j].is_free()) {
            return Err(format!(
                "the live index chains {} records, counts {}, or chains a free one",
                indexed.len(),
                self.live_blocks.len()
            ));
        }
        let mut filed = Vec::new();
        let quarantine = self
            .quarantine
            .as_deref()
            .map(|q| (usize::from(QUARANTINE), q));
        let indexes = self.lists.iter().map(|l| &l.index).enumerate();
        for (slot, index) in indexes.chain(quarantine) {
            let start = filed.len();
            index.collect(blocks, &mut filed);
            if filed[start..]
                .iter()
                .any(|&i| usize::from(blocks[i].owner) != slot)
            {
                return Err(format!("slot {slot} files a block it does not own"));
            }
        }
        let free_in_chunks = self
            .chunks
            .iter()
            .map(|c| {
                let mut n = 0;
                let mut i = c.first;
                while i != NIL {
                    n += usize::from(blocks[i].is_free() && blocks[i].owner != UNMAPPED);
                    i = blocks[i].next_phys;
                }
                n
            })
            .sum::<usize>();
        if let Some(w) = self.wilderness_block {
            let b = &blocks[w];
            if !b.is_free() || b.next_phys != NIL || filed.contains(&w) {
                return Err(format!(
                    "the wilderness at {:#x} is not a free, unlisted last block",
                    { b.addr }
                ));
            }
        }
        let free_in_chunks = free_in_chunks - usize::from(self.wilderness_block.is_some());
        if filed.len() != free_in_chunks {
            return Err(format!(
                "{} blocks filed, {free_in_chunks} free in chunks",
                filed.len()
            ));
        }
        Ok(())
    }
}
