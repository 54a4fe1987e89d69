//! Which free lists a stream uses: each stream gets a slot of its own lists, up to
//! [`MAX_SLOTS`]; past that, a new stream takes over a slot with no free block, or puts one in
//! quarantine. Moving a stream's free blocks to another (`adopt`, `unify`) is here too.

use crate::driver::StreamId;
use crate::mr::detail::record::NIL;
use crate::mr::detail::tlsf::TlsfIndex;

use super::{
    file_free, CoalescingHeap, StreamLists, MAX_SLOTS, QUARANTINE, SLOT_SWEEP_MIN, VACANT,
};

impl CoalescingHeap {
    /// The slot of `stream`'s free lists, if it has any.
    ///
    /// # Time complexity
    ///
    /// O(1) expected: one comparison for the first stream, else one hash lookup.
    #[inline]
    pub(crate) fn slot_of(&self, stream: StreamId) -> Option<usize> {
        // The first stream is looked at inline: most users have one.
        if self.is_first(stream) {
            Some(0)
        } else {
            self.slot_of_later(stream)
        }
    }

    /// Whether `stream`'s lists are slot 0 (the resources' fast paths then pass slot 0 as a
    /// constant, which needs no bounds check or scaling).
    #[inline(always)]
    pub(crate) fn is_first(&self, stream: StreamId) -> bool {
        self.lists.first().is_some_and(|l| l.stream == stream)
    }

    #[inline(never)]
    pub(super) fn slot_of_later(&self, stream: StreamId) -> Option<usize> {
        self.slot_map.get(&stream).copied()
    }

    /// The slot of `stream`'s free lists, created empty on first use.
    #[inline]
    pub(crate) fn slot(&mut self, stream: StreamId) -> usize {
        match self.slot_of(stream) {
            Some(s) => s,
            None => self.new_slot(stream),
        }
    }

    /// A slot for a stream not seen yet. Past [`MAX_SLOTS`] (a block record keeps its owner
    /// in 16 bits) it takes over a slot holding no free block: nothing of the old stream's is
    /// in it, so nothing needs ordering. When every slot holds free blocks (over half a
    /// gigabyte of free lists on the host), it takes over one that does not hold the
    /// wilderness and puts that slot's free blocks in quarantine: no stream allocates from
    /// them until a context synchronize lets [`CoalescingHeap::unify`] hand them on, as the
    /// resources' release and out-of-memory paths do. Nothing is lost, and no block is reused
    /// unordered.
    #[cold]
    pub(super) fn new_slot(&mut self, stream: StreamId) -> usize {
        let slot = self.free_slot();
        self.lists[slot].stream = stream;
        self.slot_map.insert(stream, slot);
        slot
    }

    /// A slot for a new stream to take: a vacant one, a new one, or past [`MAX_SLOTS`] one
    /// taken over (see [`CoalescingHeap::new_slot`]); its old stream is forgotten.
    pub(super) fn free_slot(&mut self) -> usize {
        if let Some(slot) = self.vacant_slots.pop() {
            return slot;
        }
        if self.lists.len() < MAX_SLOTS {
            self.lists.push(StreamLists {
                stream: VACANT,
                index: TlsfIndex::default(),
            });
            return self.lists.len() - 1;
        }
        let wild = self
            .wilderness_block
            .map(|w| usize::from(self.slab.get(w).owner));
        let free = |s: &usize| wild != Some(*s);
        let slot = match (0..self.lists.len()).find(|s| self.lists[*s].index.is_empty() && free(s))
        {
            Some(slot) => slot,
            None => {
                // MAX_SLOTS >= 2, and one slot at most holds the wilderness.
                let victim = (0..self.lists.len()).find(free).unwrap_or(0);
                self.quarantine_slot(victim);
                victim
            }
        };
        self.slot_map.remove(&self.lists[slot].stream);
        slot
    }

    /// When the heap has gone through many streams, makes every slot that holds no free block
    /// (and not the wilderness) vacant, for new streams to reuse: a stream whose free blocks
    /// another took, or that allocated them all, keeps no lists. Slot 0 stays, so the first
    /// stream keeps its constant slot. Due only when no slot is vacant and the slots have
    /// doubled since the last sweep, so its O(slots) is constant per new stream, amortized.
    ///
    /// The caller must hold no slot number across this call: a slot it names may go to
    /// another stream.
    pub(crate) fn sweep_slots_if_due(&mut self) {
        if !self.vacant_slots.is_empty() || self.lists.len() < self.sweep_at.max(SLOT_SWEEP_MIN) {
            return;
        }
        let wild = self
            .wilderness_block
            .map(|w| usize::from(self.slab.get(w).owner));
        for (slot, l) in self.lists.iter_mut().enumerate().skip(1) {
            if l.stream != VACANT && l.index.is_empty() && wild != Some(slot) {
                self.slot_map.remove(&l.stream);
                l.stream = VACANT;
                self.vacant_slots.push(slot);
            }
        }
        self.sweep_at = 2 * (self.lists.len() - self.vacant_slots.len());
    }

    /// Slots holding a stream's lists, vacant ones not counted.
    pub(crate) fn slot_count(&self) -> usize {
        self.lists.len() - self.vacant_slots.len()
    }

    /// Moves every free block of `slot` into quarantine, merging it with quarantined
    /// neighbours.
    ///
    /// # Time complexity
    ///
    /// O(free blocks of `slot`).
    pub(super) fn quarantine_slot(&mut self, slot: usize) {
        let mut moved = Vec::new();
        self.lists[slot]
            .index
            .collect(self.slab.records(), &mut moved);
        let quarantine = self.quarantine.get_or_insert_with(Default::default);
        let mut blocks = self.slab.view();
        for i in moved {
            self.lists[slot].index.remove(&mut blocks, i);
            // Never the wilderness: that slot's last block is not free, or is another's.
            file_free(
                &mut blocks,
                quarantine,
                (false, &mut None),
                usize::from(QUARANTINE),
                i,
            );
        }
    }

    /// The stream of `slot`.
    pub(crate) fn stream_of(&self, slot: usize) -> StreamId {
        self.lists[slot].stream
    }
    /// Another stream's slot holding a block of at least `size` bytes that an
    /// [`OwnClass::Scan`] search finds, if any.
    ///
    /// # Time complexity
    ///
    /// O(streams seen).
    pub(crate) fn find_elsewhere(&self, slot: usize, size: u64) -> Option<usize> {
        self.lists
            .iter()
            .enumerate()
            .find(|(s, l)| *s != slot && l.index.find(self.slab.records(), size).is_some())
            .map(|(s, _)| s)
    }

    /// Moves every free block of slot `from` into slot `to`, coalescing with `to`'s. The caller
    /// must first have ordered `to`'s stream after `from`'s (event record and wait).
    ///
    /// # Time complexity
    ///
    /// O(free blocks of `from`).
    pub(crate) fn adopt(&mut self, to: usize, from: usize) {
        self.adopt_noting(to, from, |_| {});
    }

    /// [`CoalescingHeap::adopt`], calling `whole` with the base of each chunk the merges
    /// leave wholly free (one free block as large as the chunk), once each.
    ///
    /// # Time complexity
    ///
    /// O(free blocks of `from`).
    pub(crate) fn adopt_noting(&mut self, to: usize, from: usize, mut whole: impl FnMut(u64)) {
        if self
            .wilderness_block
            .is_some_and(|w| usize::from(self.slab.get(w).owner) == from)
        {
            self.take_wild(to);
        }
        let mut moved = Vec::new();
        self.lists[from]
            .index
            .collect(self.slab.records(), &mut moved);
        for i in moved {
            self.lists[from].index.remove(&mut self.slab.view(), i);
            let merged = self.file_free(to, i);
            // A block with no physical neighbour is its whole chunk: it merges no further.
            let b = self.slab.get(merged);
            if b.prev_phys == NIL && b.next_phys == NIL {
                whole(b.addr);
            }
        }
    }

    /// Moves every other slot's free blocks, and those in quarantine, into `to`, coalescing
    /// across streams. The caller must first have ordered `to`'s stream after every other (a
    /// context synchronize).
    ///
    /// # Time complexity
    ///
    /// O(free blocks).
    pub(crate) fn unify(&mut self, to: usize) {
        let wild = self
            .wilderness_block
            .map(|w| self.slab.get(w).owner as usize);
        for from in 0..self.lists.len() {
            if from != to && (!self.lists[from].index.is_empty() || wild == Some(from)) {
                self.adopt(to, from);
            }
        }
        if let Some(mut quarantine) = self.quarantine.take() {
            let mut moved = Vec::new();
            quarantine.collect(self.slab.records(), &mut moved);
            for i in moved {
                quarantine.remove(&mut self.slab.view(), i);
                let _ = self.file_free(to, i);
            }
        }
    }

    /// Coalesces free blocks across streams into stream `to`'s lists when more than one stream
    /// holds some: first runs `synchronize`, which must order `to` after every other stream (a
    /// context synchronize). Returns whether it synchronized; with one stream or none it does
    /// nothing.
    ///
    /// # Time complexity
    ///
    /// O(streams seen), plus O(free blocks) and the synchronize when it coalesces.
    pub(crate) fn coalesce_streams<E>(
        &mut self,
        to: StreamId,
        synchronize: impl FnOnce() -> Result<(), E>,
    ) -> Result<bool, E> {
        if self.slots_with_free_blocks() <= 1 {
            return Ok(false);
        }
        synchronize()?;
        let slot = self.slot(to);
        self.unify(slot);
        Ok(true)
    }

    /// How many streams' lists hold a free block, counting the quarantine as one.
    pub(crate) fn slots_with_free_blocks(&self) -> usize {
        let wild = self
            .wilderness_block
            .map(|w| self.slab.get(w).owner as usize);
        usize::from(self.quarantine.is_some())
            + self
                .lists
                .iter()
                .enumerate()
                .filter(|&(slot, l)| !l.index.is_empty() || wild == Some(slot))
                .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::detail::tlsf::GRANULE;

    #[test]
    fn past_the_slot_limit_a_new_stream_takes_over_a_slot_with_no_free_block() {
        let mut h = CoalescingHeap::default();
        let streams: Vec<StreamId> = (0..MAX_SLOTS as u64).map(StreamId).collect();
        let slots: Vec<usize> = streams.iter().map(|&s| h.slot(s)).collect();
        assert_eq!(slots, (0..MAX_SLOTS).collect::<Vec<_>>());
        // Slot 0 holds a free block; slot 1 none; slot 2 the only other free block.
        h.add_chunk(0, 1 << 20, 8 * GRANULE).unwrap();
        let a = h.allocate(0, 4 * GRANULE, 1).unwrap();
        let b = h.allocate(0, 4 * GRANULE, 1).unwrap();
        h.deallocate(a, 1, 0).unwrap();
        h.deallocate(b, 1, 2).unwrap();
        let late = StreamId(100);
        assert_eq!(h.slot(late), 1, "the first slot holding nothing");
        assert_eq!(
            (h.stream_of(1), h.slot_of(streams[1])),
            (late, None),
            "the old stream has no slot now; it gets one when it frees again"
        );
        assert_eq!(h.slot(late), 1, "found, not taken over again");
        h.check().unwrap();
    }

    #[test]
    fn past_the_slot_limit_with_every_slot_holding_free_blocks_one_goes_to_quarantine() {
        let mut h = CoalescingHeap::default();
        let s0 = h.slot(StreamId(0));
        h.add_chunk(s0, 1 << 20, 8 * GRANULE).unwrap();
        let held: Vec<u64> = (0..MAX_SLOTS)
            .map(|_| h.allocate(0, GRANULE, 1).unwrap())
            .collect();
        for (k, p) in held.into_iter().enumerate() {
            let slot = h.slot(StreamId(k as u64));
            h.deallocate(p, 1, slot).unwrap();
        }
        let (blocks, free) = (h.free_blocks(), h.free_bytes());
        let late = StreamId(100);
        let slot = h.slot(late);
        assert_eq!(slot, 0, "the first slot, its free blocks set aside");
        assert_eq!(
            (h.stream_of(0), h.slot_of(StreamId(0))),
            (late, None),
            "the old stream has no slot now"
        );
        h.check().unwrap();
        assert_eq!(
            (h.free_blocks(), h.free_bytes()),
            (blocks, free),
            "nothing lost"
        );
        assert_eq!(
            h.slots_with_free_blocks(),
            MAX_SLOTS,
            "the quarantine counts, so a coalesce synchronizes"
        );
        // Slot 0 held the first granule and the chunk's rest (merged): neither is the new
        // stream's.
        assert_eq!(h.allocate(slot, GRANULE, 1), None);
        // After a context synchronize every free block may go anywhere.
        assert_eq!(h.coalesce_streams(late, || Ok::<(), ()>(())), Ok(true));
        assert_eq!(h.slots_with_free_blocks(), 1);
        h.check().unwrap();
        let p = h.allocate(slot, 5 * GRANULE, 1).unwrap();
        assert_eq!(
            p,
            1 << 20,
            "the quarantined blocks merged back with the others"
        );
        h.check().unwrap();
    }

    #[test]
    fn the_slot_holding_the_wilderness_is_never_put_in_quarantine() {
        let mut h = CoalescingHeap {
            keeps_wilderness: true,
            ..CoalescingHeap::default()
        };
        let s0 = h.slot(StreamId(0));
        h.add_chunk(s0, 1 << 20, 16 * GRANULE).unwrap();
        let held: Vec<u64> = (0..MAX_SLOTS)
            .map(|_| h.allocate_wild(s0, GRANULE, 1).unwrap())
            .collect();
        for (k, p) in held.into_iter().enumerate() {
            let slot = h.slot(StreamId(k as u64));
            h.deallocate(p, 1, slot).unwrap();
        }
        assert_eq!(h.wild().map(|(_, _, owner)| owner), Some(0));
        let slot = h.slot(StreamId(100));
        assert_eq!(slot, 1, "the first slot not holding the wilderness");
        assert_eq!(h.wild().map(|(_, _, owner)| owner), Some(0));
        h.check().unwrap();
    }
}
