//! Chunks in and out of the heap: adding an upstream chunk as one free block, finding a chunk by
//! address, and taking wholly free chunks out to give back upstream.

use crate::driver::StreamId;
use crate::mr::detail::record::{Block, MAX_BLOCK, NIL};
use crate::mr::detail::tlsf::GRANULE;

use super::{Chunk, CoalescingHeap, SlabFull, QUARANTINE};

impl CoalescingHeap {
    /// Adds an upstream chunk as one free block in `slot`'s lists.
    ///
    /// # Errors
    ///
    /// [`SlabFull`] when no record is vacant and the slab cannot grow: the chunk was not
    /// added, and the caller still owns it ([`CoalescingHeap::reserve_records`] first makes
    /// sure it will be).
    ///
    /// # Time complexity
    ///
    /// O(1) amortized.
    pub(crate) fn add_chunk(&mut self, slot: usize, base: u64, size: u64) -> Result<(), SlabFull> {
        // Its owner keeps chunks to `MAX_CHUNK` (`growth::chunk_size`, the segment's reserve).
        debug_assert!(
            size >= GRANULE && size.is_multiple_of(GRANULE) && base.is_multiple_of(GRANULE)
        );
        debug_assert!(
            size <= MAX_BLOCK,
            "a chunk of {size} bytes is past a block's limit"
        );
        let i = self.slab.insert(Block {
            addr: base,
            units: Block::units_of(size),
            prev_phys: NIL,
            next_phys: NIL,
            prev_free: NIL,
            next_free: NIL,
            owner: slot as u16,
            class: 0,
        })?;
        if self.keeps_wilderness {
            debug_assert!(self.chunks.is_empty(), "a segment is one chunk");
            self.wilderness_block = Some(i);
        } else {
            self.lists[slot].index.insert(&mut self.slab.view(), i);
        }
        self.chunks.push(Chunk {
            base,
            size,
            first: i,
            mark: 0,
        });
        if !self.keeps_wilderness {
            let chunks = &self.chunks;
            self.chunk_pos
                .insert(base, chunks.len() as u32 - 1, |k| chunks[k as usize].base);
        }
        self.held += size;
        Ok(())
    }

    /// Removes chunk `k` from the list (swap-remove), keeping `chunk_pos` right: entries leave
    /// the map while their indices still name their chunks.
    pub(super) fn remove_chunk(&mut self, k: usize) -> Chunk {
        let chunks = &self.chunks;
        let base_of = |j: u32| chunks[j as usize].base;
        let _ = self.chunk_pos.remove(chunks[k].base, base_of);
        let last = chunks.len() - 1;
        if k != last {
            let _ = self.chunk_pos.remove(chunks[last].base, base_of);
        }
        let c = self.chunks.swap_remove(k);
        if k != last {
            let chunks = &self.chunks;
            self.chunk_pos
                .insert(chunks[k].base, k as u32, |j| chunks[j as usize].base);
        }
        c
    }

    /// The index in `chunks` of the chunk based at `base`.
    #[inline]
    pub(super) fn chunk_at(&self, base: u64) -> Option<usize> {
        let chunks = &self.chunks;
        let k = self
            .chunk_pos
            .get(base, |j| chunks.get(j as usize).map_or(0, |c| c.base))?;
        Some(k as usize)
    }

    /// The chunk based at `base` when it is wholly free: its size, its mark and the stream whose
    /// lists hold it.
    ///
    /// # Time complexity
    ///
    /// O(1) expected: one map lookup.
    pub(crate) fn free_chunk(&self, base: u64) -> Option<(u64, u64, StreamId)> {
        let c = self.chunks.get(self.chunk_at(base)?)?;
        let slot = self.free_slot_of(c)?;
        Some((c.size, c.mark, self.lists[slot].stream))
    }

    /// The slot whose lists hold chunk `c` when it is wholly free (one free block as large as
    /// the chunk), else `None`; `None` too for a chunk in quarantine, which goes back only
    /// after [`CoalescingHeap::unify`].
    pub(super) fn free_slot_of(&self, c: &Chunk) -> Option<usize> {
        let b = self.slab.get(c.first);
        (b.is_free() && b.owner != QUARANTINE && b.size() == c.size).then_some(usize::from(b.owner))
    }

    /// Removes chunk `k` when it is wholly free, and returns it with the stream whose lists
    /// held it.
    pub(super) fn take_chunk_if_free(&mut self, k: usize) -> Option<(Chunk, StreamId)> {
        let c = *self.chunks.get(k)?;
        let slot = self.free_slot_of(&c)?;
        self.lists[slot]
            .index
            .remove(&mut self.slab.view(), c.first);
        self.slab.remove(c.first);
        self.held -= c.size;
        self.remove_chunk(k);
        Some((c, self.lists[slot].stream))
    }

    /// Sets the mark of the chunk based at `base` and returns the mark it had; `None` when no
    /// chunk starts there.
    ///
    /// # Time complexity
    ///
    /// O(1) expected: one map lookup.
    pub(crate) fn mark_chunk(&mut self, base: u64, mark: u64) -> Option<u64> {
        let k = self.chunk_at(base)?;
        Some(std::mem::replace(&mut self.chunks.get_mut(k)?.mark, mark))
    }

    /// Removes the chunk based at `base` when it is wholly free, and returns it with the stream
    /// whose lists held it.
    ///
    /// # Time complexity
    ///
    /// O(1) expected: one map lookup.
    pub(crate) fn take_free_chunk_at(&mut self, base: u64) -> Option<(Chunk, StreamId)> {
        let k = self.chunk_at(base)?;
        self.take_chunk_if_free(k)
    }
    /// Removes every fully free chunk but the first `keep` found and returns them with the
    /// stream whose lists held each, for the caller to give back to its upstream on that
    /// stream.
    ///
    /// # Time complexity
    ///
    /// O(chunks).
    pub(crate) fn take_free_chunks(&mut self, mut keep: usize) -> Vec<(Chunk, StreamId)> {
        let mut out = Vec::new();
        if self.keeps_wilderness {
            // A segment's memory goes back through `segment_end`, never as chunks.
            return out;
        }
        let mut k = 0;
        while k < self.chunks.len() {
            if keep > 0 && self.free_slot_of(&self.chunks[k]).is_some() {
                keep -= 1;
                k += 1;
            } else if let Some(taken) = self.take_chunk_if_free(k) {
                // The last chunk moved into `k`: look at `k` again.
                out.push(taken);
            } else {
                k += 1;
            }
        }
        out
    }

    /// Removes the chunk holding `addr` when it is wholly free, and returns it with the stream
    /// whose lists held it (for a caller that gives back one chunk, not all free ones).
    ///
    /// # Time complexity
    ///
    /// O(chunks).
    pub(crate) fn take_free_chunk(&mut self, addr: u64) -> Option<(Chunk, StreamId)> {
        let k = self
            .chunks
            .iter()
            .position(|c| c.base <= addr && addr - c.base < c.size)?;
        self.take_chunk_if_free(k)
    }

    /// Forgets everything (after the caller has returned every chunk upstream) and returns the
    /// chunks with the stream to free each on: the owning stream's for a fully free chunk,
    /// `None` for one that still had live blocks.
    pub(crate) fn take_all_chunks(&mut self) -> Vec<(Chunk, Option<StreamId>)> {
        debug_assert!(
            !self.keeps_wilderness,
            "a segment is given back whole by its owner"
        );
        let free = self.take_free_chunks(0);
        let mut out: Vec<(Chunk, Option<StreamId>)> =
            free.into_iter().map(|(c, s)| (c, Some(s))).collect();
        out.extend(self.chunks.drain(..).map(|c| (c, None)));
        *self = CoalescingHeap::default();
        out
    }
}
