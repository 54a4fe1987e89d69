//! [`CoalescingHeap`]: a coalescing suballocator over upstream chunks, with one set of TLSF
//! free lists per stream.
//!
//! This is the algorithm of `PoolResource` and of `ArenaResource`'s arenas. Live blocks are
//! found by address in a [`LiveIndex`]; free blocks sit in the [`TlsfIndex`] of the stream that
//! freed them, so memory freed on stream A is found at once by allocations on A and never by
//! allocations on B. A block freed on A merges with free physical neighbours that are also A's
//! (merging with B's would hand B's memory to A unordered). [`CoalescingHeap::adopt`] moves a
//! whole stream's free blocks to another once the caller has ordered the streams.
//!
//! Over an expandable segment (one chunk grown and shrunk at its end, `heap_tail`), the heap
//! keeps the chunk's free last block out of the lists as the *wilderness*, used only when no
//! listed block fits, as dlmalloc keeps its top chunk: so the segment grows only when nothing
//! below its end fits, however much of it is free.
//!
//! The heap makes no driver calls: the resource owning it records events and talks to its
//! upstream, so the heap stays a pure, testable data structure.

use std::hint::select_unpredictable;

use crate::driver::StreamId;

use super::addr_map::AddrMap;
use super::block::{Block, BlockSlab, Blocks, LIVE, MAX_BLOCK, NIL, SCRATCH, SCRATCH_NUMBER};
use super::live_index::LiveIndex;
use super::stream_map::StreamMap;
use super::tlsf::{OwnClass, TlsfIndex, GRANULE};

/// The owner of a free block in quarantine: set aside from a stream whose slot a new stream
/// took, usable by no stream until a context synchronize ([`CoalescingHeap::unify`]).
pub(crate) const QUARANTINE: u16 = LIVE - 1;

/// Stream slots a heap keeps: a block's owner is 16 bits, and neither [`LIVE`] nor
/// [`QUARANTINE`] is a slot.
#[cfg(not(test))]
pub(crate) const MAX_SLOTS: usize = QUARANTINE as usize;
/// A few, so that the tests reach the limit (65 534 sets of lists would take 550 MB).
#[cfg(test)]
pub(crate) const MAX_SLOTS: usize = 3;

/// The stream of a slot that [`CoalescingHeap::sweep_slots_if_due`] emptied, waiting in
/// `vacant_slots` for a new stream: no handle is all ones.
const VACANT: StreamId = StreamId(u64::MAX);

/// Slots a heap keeps before it looks for empty ones to reuse: a program's few streams never
/// pay for a sweep, and a program that goes through thousands of streams keeps about twice as
/// many sets of lists (8 KiB each) as streams holding free blocks.
const SLOT_SWEEP_MIN: usize = 64;

/// One upstream allocation the heap carves blocks from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Its base address.
    pub base: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its lowest block: never merged away, as merges keep the lower block.
    pub(super) first: u32,
    /// Its owner's mark (0 when unset): the sharded pool stamps a chunk a free left wholly
    /// free, so that it lists the chunk as spare once, however often it becomes whole.
    pub(super) mark: u64,
}

/// The free lists of one stream.
#[derive(Debug, Clone)]
pub(super) struct StreamLists {
    stream: StreamId,
    pub(super) index: TlsfIndex,
}

/// Why the heap refused a free; nothing was changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FreeError {
    /// No live block starts at that address: foreign pointer, interior pointer or double free.
    NotLive,
    /// The block is live but was allocated with another size.
    WrongSize {
        /// The size it was allocated with.
        allocated: u64,
    },
}

impl FreeError {
    /// The reason, for [`crate::mr::MrError::InvalidFree`].
    pub(crate) fn reason(self) -> String {
        match self {
            FreeError::NotLive => {
                "no live allocation starts there: the pointer came from elsewhere, points \
                 inside an allocation, or was already freed"
                    .to_string()
            }
            FreeError::WrongSize { allocated } => format!(
                "it was allocated with {allocated} bytes; free it with the size it was \
                 allocated with"
            ),
        }
    }
}

/// Rounds `bytes` up to the granule, or `None` when that overflows.
#[inline]
pub(crate) fn round_to_granule(bytes: u64) -> Option<u64> {
    Some(bytes.checked_add(GRANULE - 1)? & !(GRANULE - 1))
}

/// A coalescing suballocator with per-stream TLSF free lists.
#[derive(Debug, Default)]
pub(crate) struct CoalescingHeap {
    pub(super) slab: BlockSlab,
    pub(super) lists: Vec<StreamLists>,
    pub(super) live: LiveIndex,
    pub(super) chunks: Vec<Chunk>,
    pub(super) held: u64,
    /// Bytes in live blocks (granule-rounded).
    pub(super) live_bytes: u64,
    /// Whether the free last block of a chunk is kept as the wilderness (`heap_tail`).
    pub(super) wilderness: bool,
    /// The wilderness: a free last block, in no list.
    pub(super) wild: Option<u32>,
    /// Chunk base → index in `chunks` (chunks only, not a segment), for giving one chunk back
    /// in O(1).
    chunk_pos: AddrMap,
    /// Free blocks of streams whose slots were taken over past [`MAX_SLOTS`] (owner
    /// [`QUARANTINE`]); made only then.
    quarantine: Option<Box<TlsfIndex>>,
    /// Stream → its slot in `lists`, for every slot but the vacant ones.
    slot_map: StreamMap<usize>,
    /// Slots emptied by a sweep, their stream [`VACANT`], for new streams to take.
    vacant_slots: Vec<usize>,
    /// `lists.len()` at which the next sweep is due (0: [`SLOT_SWEEP_MIN`]).
    sweep_at: usize,
}

impl CoalescingHeap {
    /// Bytes held from upstream (the sum of chunk sizes).
    pub(crate) fn held(&self) -> u64 {
        self.held
    }

    /// Bytes in free blocks, all streams together.
    pub(crate) fn free_bytes(&self) -> u64 {
        // Blocks tile the chunks, so every held byte is in a live block or a free one.
        self.held - self.live_bytes
    }

    /// Bytes in live blocks (granule-rounded).
    pub(crate) fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Number of live blocks.
    pub(crate) fn live_count(&self) -> usize {
        self.live.len()
    }

    /// Number of free blocks, all streams together.
    pub(crate) fn free_blocks(&self) -> usize {
        usize::from(self.wild.is_some())
            + self
                .quarantine
                .as_ref()
                .map_or(0, |q| q.free_blocks(self.slab.records()))
            + self
                .lists
                .iter()
                .map(|l| l.index.free_blocks(self.slab.records()))
                .sum::<usize>()
    }

    /// The chunks held.
    pub(crate) fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

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
    fn slot_of_later(&self, stream: StreamId) -> Option<usize> {
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
    fn new_slot(&mut self, stream: StreamId) -> usize {
        let slot = self.free_slot();
        self.lists[slot].stream = stream;
        self.slot_map.insert(stream, slot);
        slot
    }

    /// A slot for a new stream to take: a vacant one, a new one, or past [`MAX_SLOTS`] one
    /// taken over (see [`CoalescingHeap::new_slot`]); its old stream is forgotten.
    fn free_slot(&mut self) -> usize {
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
        let wild = self.wild.map(|w| usize::from(self.slab.get(w).owner));
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
        let wild = self.wild.map(|w| usize::from(self.slab.get(w).owner));
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
    fn quarantine_slot(&mut self, slot: usize) {
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

    /// Takes a block of `size` bytes (a positive granule multiple) from `slot`'s lists, splits
    /// off the rest, and records it live with `requested` bytes. `None` if `slot` has no block
    /// large enough. The search scans the own class ([`OwnClass::Scan`]).
    ///
    /// # Time complexity
    ///
    /// O(1): a TLSF search, one unlink, at most one split and re-file, one map insert.
    #[inline(always)]
    pub(crate) fn allocate(&mut self, slot: usize, size: u64, requested: u64) -> Option<u64> {
        self.allocate_with(OwnClass::Scan, slot, size, requested)
    }

    /// [`CoalescingHeap::allocate`], looking at the own class as `own` says (a constant at
    /// the call, so that the search's other form is compiled away).
    ///
    /// # Time complexity
    ///
    /// O(1), as `allocate`.
    // Inlined into the resources' allocate: as a call of its own, with the free's, it cost 23
    // instructions an op (callgrind, W3).
    #[inline(always)]
    pub(crate) fn allocate_with(
        &mut self,
        own: OwnClass,
        slot: usize,
        size: u64,
        requested: u64,
    ) -> Option<u64> {
        // One view of the records for the whole operation, apart from the other fields: the
        // compiler then keeps the slab's base and length in registers.
        let CoalescingHeap {
            slab,
            lists,
            live,
            live_bytes,
            ..
        } = self;
        // Indexed before the slab may grow (a call): for slot 0, just found by the caller,
        // the compiler then drops the bounds check.
        let index = &mut lists[slot].index;
        // The split below may need a record; the view cannot grow the slab.
        slab.reserve();
        let mut blocks = slab.view();
        let i = index.take(&mut blocks, size, own)?;
        let Block {
            addr,
            units: found,
            next_phys,
            ..
        } = blocks[i];
        // The block found holds `size`, so `size` is below `MAX_BLOCK` and its units fit.
        let units = Block::units_of(size);
        if found > units {
            let rest = blocks.insert(Block {
                addr: addr + size,
                units: found - units,
                prev_phys: i,
                next_phys,
                prev_free: NIL,
                next_free: NIL,
                owner: slot as u16,
                class: 0,
            });
            // The sentinel's link at a chunk's end.
            blocks[next_phys].prev_phys = rest;
            let blk = &mut blocks[i];
            blk.next_phys = rest;
            blk.units = units;
            index.insert(&mut blocks, rest);
        }
        let blk = &mut blocks[i];
        blk.owner = LIVE;
        blk.set_requested(requested);
        live.insert(&mut blocks, addr, i);
        *live_bytes += size;
        Some(addr)
    }

    /// Whether a live block starts at `addr`.
    pub(crate) fn is_live(&self, addr: u64) -> bool {
        self.live.get(self.slab.records(), addr).is_some()
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
        if self
            .wild
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
            let _ = self.file_free(to, i);
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
        let wild = self.wild.map(|w| self.slab.get(w).owner as usize);
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
        let wild = self.wild.map(|w| self.slab.get(w).owner as usize);
        usize::from(self.quarantine.is_some())
            + self
                .lists
                .iter()
                .enumerate()
                .filter(|&(slot, l)| !l.index.is_empty() || wild == Some(slot))
                .count()
    }

    /// Adds an upstream chunk as one free block in `slot`'s lists.
    ///
    /// # Time complexity
    ///
    /// O(1) amortized.
    pub(crate) fn add_chunk(&mut self, slot: usize, base: u64, size: u64) {
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
        });
        if self.wilderness {
            debug_assert!(self.chunks.is_empty(), "a segment is one chunk");
            self.wild = Some(i);
        } else {
            self.lists[slot].index.insert(&mut self.slab.view(), i);
        }
        self.chunks.push(Chunk {
            base,
            size,
            first: i,
            mark: 0,
        });
        if !self.wilderness {
            let chunks = &self.chunks;
            self.chunk_pos
                .insert(base, chunks.len() as u32 - 1, |k| chunks[k as usize].base);
        }
        self.held += size;
    }

    /// Removes chunk `k` from the list (swap-remove), keeping `chunk_pos` right: entries leave
    /// the map while their indices still name their chunks.
    fn remove_chunk(&mut self, k: usize) -> Chunk {
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
    fn chunk_at(&self, base: u64) -> Option<usize> {
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
    fn free_slot_of(&self, c: &Chunk) -> Option<usize> {
        let b = self.slab.get(c.first);
        (b.is_free() && b.owner != QUARANTINE && b.size() == c.size).then_some(usize::from(b.owner))
    }

    /// Removes chunk `k` when it is wholly free, and returns it with the stream whose lists
    /// held it.
    fn take_chunk_if_free(&mut self, k: usize) -> Option<(Chunk, StreamId)> {
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

    /// Frees the live block at `addr`, allocated with `requested` bytes, into `slot`'s lists,
    /// merging it with free neighbours of the same slot. Returns the block's size, and whether
    /// its chunk is now wholly free.
    ///
    /// # Errors
    ///
    /// [`FreeError`] when no live block starts at `addr` or the size differs; nothing changes.
    ///
    /// # Time complexity
    ///
    /// O(1): one map lookup and removal, at most two merges, one filing.
    #[inline]
    pub(crate) fn deallocate(
        &mut self,
        addr: u64,
        requested: u64,
        slot: usize,
    ) -> Result<(u64, bool), FreeError> {
        self.deallocate_in_chunk(addr, requested, slot)
            .map(|(size, whole)| (size, whole.is_some()))
    }

    /// [`CoalescingHeap::deallocate`], returning the base of the block's chunk instead of
    /// `true` when the free leaves that chunk wholly free.
    ///
    /// # Errors
    ///
    /// As [`CoalescingHeap::deallocate`].
    ///
    /// # Time complexity
    ///
    /// O(1).
    // Inlined into the resources' free, as `allocate` is.
    #[inline(always)]
    pub(crate) fn deallocate_in_chunk(
        &mut self,
        addr: u64,
        requested: u64,
        slot: usize,
    ) -> Result<(u64, Option<u64>), FreeError> {
        let CoalescingHeap {
            slab,
            lists,
            live,
            live_bytes,
            wilderness,
            wild,
            ..
        } = self;
        let index = &mut lists[slot].index;
        let mut blocks = slab.view();
        let i = live.remove(&mut blocks, addr).ok_or(FreeError::NotLive)?;
        let b = &blocks[i];
        if b.requested() != requested {
            // The rare refusal pays for the common case's single search.
            let allocated = b.requested();
            live.insert(&mut blocks, addr, i);
            return Err(FreeError::WrongSize { allocated });
        }
        let size = b.size();
        *live_bytes -= size;
        let merged = file_free(&mut blocks, index, (*wilderness, wild), slot, i);
        let merged = &blocks[merged];
        let whole = merged.prev_phys == NIL && merged.next_phys == NIL;
        Ok((size, whole.then_some(merged.addr)))
    }

    /// Marks block `i` free in `slot`, merges it with same-slot free neighbours, and files it
    /// (or makes it the wilderness when it ends up last); returns the merged block.
    pub(super) fn file_free(&mut self, slot: usize, i: u32) -> u32 {
        let wild = (self.wilderness, &mut self.wild);
        file_free(
            &mut self.slab.view(),
            &mut self.lists[slot].index,
            wild,
            slot,
            i,
        )
    }

    /// Merges block `hi` (the physical successor of `lo`) into `lo` and drops `hi`'s record.
    pub(super) fn absorb_next(&mut self, lo: u32, hi: u32) {
        absorb_next(&mut self.slab.view(), lo, hi);
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
        if self.wilderness {
            // A segment's memory goes back through `heap_tail`, never as chunks.
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
            !self.wilderness,
            "a segment is given back whole by its owner"
        );
        let free = self.take_free_chunks(0);
        let mut out: Vec<(Chunk, Option<StreamId>)> =
            free.into_iter().map(|(c, s)| (c, Some(s))).collect();
        out.extend(self.chunks.drain(..).map(|c| (c, None)));
        *self = CoalescingHeap::default();
        out
    }

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
                    if self.live.get(blocks, b.addr) != Some(i) {
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
        if live != self.live.len() || held != self.held || live_bytes != self.live_bytes {
            return Err(format!(
                "counts: {live} live blocks seen, {} counted; {held} held, {} counted; \
                 {live_bytes} live bytes seen, {} counted (free bytes are held minus live)",
                self.live.len(),
                self.held,
                self.live_bytes
            ));
        }
        let indexed = self.live.records_indexed(blocks);
        if indexed.len() != self.live.len() || indexed.iter().any(|&j| blocks[j].is_free()) {
            return Err(format!(
                "the live index chains {} records, counts {}, or chains a free one",
                indexed.len(),
                self.live.len()
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
                    n += usize::from(blocks[i].is_free());
                    i = blocks[i].next_phys;
                }
                n
            })
            .sum::<usize>();
        if let Some(w) = self.wild {
            let b = &blocks[w];
            if !b.is_free() || b.next_phys != NIL || filed.contains(&w) {
                return Err(format!(
                    "the wilderness at {:#x} is not a free, unlisted last block",
                    { b.addr }
                ));
            }
        }
        let free_in_chunks = free_in_chunks - usize::from(self.wild.is_some());
        if filed.len() != free_in_chunks {
            return Err(format!(
                "{} blocks filed, {free_in_chunks} free in chunks",
                filed.len()
            ));
        }
        Ok(())
    }
}

/// Marks block `i` free in `slot`, whose lists are `index`, merges it with same-slot free
/// neighbours, and files it — or makes it the wilderness when it ends up last, given
/// `(wilderness, wild)`: whether the heap keeps one, and where. Returns the merged block.
#[inline(always)]
fn file_free(
    blocks: &mut Blocks<'_>,
    index: &mut TlsfIndex,
    (wilderness, wild): (bool, &mut Option<u32>),
    slot: usize,
    mut i: u32,
) -> u32 {
    let owner = slot as u16;
    let (prev, next) = {
        let b = &mut blocks[i];
        b.owner = owner;
        (b.prev_phys, b.next_phys)
    };
    let mut last = wilderness && next == NIL;
    // Both merges without a branch on the neighbours, which mispredicted about one free in two
    // each: a neighbour that stays apart is unlinked as the scratch record, which no list
    // holds and whose unlink changes nothing, and absorbed as zero units. The sentinel (NIL)
    // is never free, so it is never merged.
    let merge_next = blocks[next].owner == owner;
    let merge_prev = blocks[prev].owner == owner;
    // Not `*wild == Some(next)`: that comparison compiled to a branch on the neighbour.
    let next_is_wild = wild.unwrap_or(NIL) == next;
    last |= merge_next & next_is_wild;
    let listed_next = select_unpredictable(merge_next & !next_is_wild, next, SCRATCH_NUMBER);
    index.remove(blocks, listed_next);
    absorb_next_if(blocks, i, next, merge_next);
    index.remove(
        blocks,
        select_unpredictable(merge_prev, prev, SCRATCH_NUMBER),
    );
    i = absorb_next_if(blocks, prev, i, merge_prev);
    if last {
        *wild = Some(i);
    } else {
        index.insert(blocks, i);
    }
    i
}

/// Merges block `hi` (the physical successor of `lo`) into `lo` and drops `hi`'s record.
#[inline(always)]
fn absorb_next(blocks: &mut Blocks<'_>, lo: u32, hi: u32) {
    debug_assert_ne!(hi, NIL);
    absorb_next_if(blocks, lo, hi, true);
}

/// [`absorb_next`] if `merge`, without a branch on it; else nothing changes (`hi` is rewritten
/// with its own links and size, through the sentinel where `hi` is [`NIL`]). Returns the
/// block that now ends where `hi` ends: `lo` if merged, else `hi`.
#[inline(always)]
fn absorb_next_if(blocks: &mut Blocks<'_>, lo: u32, hi: u32, merge: bool) -> u32 {
    let to = select_unpredictable(merge, lo, hi);
    let Block {
        units, next_phys, ..
    } = blocks[hi];
    let b = &mut blocks[to];
    b.units += select_unpredictable(merge, units, 0);
    b.next_phys = next_phys;
    blocks[next_phys].prev_phys = to;
    blocks.remove_if(hi, merge);
    to
}

#[cfg(test)]
mod tests {
    use super::*;

    const S0: StreamId = StreamId(0);
    const S1: StreamId = StreamId(1);

    #[test]
    fn splits_coalesces_and_releases() {
        let mut h = CoalescingHeap::default();
        let s = h.slot(S0);
        h.add_chunk(s, 1 << 20, 64 * GRANULE);
        let a = h.allocate(s, 4 * GRANULE, 1000).unwrap();
        let b = h.allocate(s, 4 * GRANULE, 1024).unwrap();
        let c = h.allocate(s, 56 * GRANULE, 56 * 256).unwrap();
        assert_eq!((a, b, c), (1 << 20, (1 << 20) + 1024, (1 << 20) + 2048));
        assert!(h.allocate(s, GRANULE, 1).is_none());
        h.check().unwrap();
        assert_eq!(
            h.deallocate(b, 1000, s),
            Err(FreeError::WrongSize { allocated: 1024 })
        );
        assert_eq!(h.deallocate(b + 256, 1024, s), Err(FreeError::NotLive));
        for (p, n, whole) in [(b, 1024, false), (a, 1000, false), (c, 56 * 256, true)] {
            assert_eq!(h.deallocate(p, n, s).unwrap().1, whole);
            h.check().unwrap();
        }
        assert_eq!(h.deallocate(a, 1000, s), Err(FreeError::NotLive));
        assert_eq!(h.free_blocks(), 1, "everything merged back into one block");
        let freed = h.take_free_chunks(0);
        assert_eq!(freed.len(), 1);
        assert_eq!((freed[0].0.base, freed[0].1), (1 << 20, S0));
        assert_eq!(h.held(), 0);
        h.check().unwrap();
    }

    /// Every case of the free's branchless merges: no free neighbour, the previous, the next,
    /// both, a neighbour of another stream, and the chunk's free end (the wilderness, or a
    /// listed block), each checked against the heap's invariants (the scratch record's too).
    #[test]
    fn a_free_merges_exactly_its_same_stream_free_neighbours() {
        for wilderness in [false, true] {
            let mut h = CoalescingHeap {
                wilderness,
                ..CoalescingHeap::default()
            };
            let (s0, s1) = (h.slot(S0), h.slot(S1));
            h.add_chunk(s0, 1 << 20, 16 * GRANULE);
            // Blocks 0..7 of 2 granules each; the chunk's last 2 granules stay free.
            let p: Vec<u64> = (0..7)
                .map(|_| {
                    let p = if wilderness {
                        h.allocate_wild(s0, 2 * GRANULE, 512)
                    } else {
                        h.allocate(s0, 2 * GRANULE, 512)
                    };
                    p.unwrap()
                })
                .collect();
            assert_eq!(h.wild().is_some(), wilderness);
            let mut free = |k: usize, slot: usize| {
                h.deallocate(p[k], 512, slot).unwrap();
                h.check().unwrap();
                (h.free_blocks(), h.free_bytes() / GRANULE)
            };
            assert_eq!(free(1, s0), (2, 4), "no neighbour free: a block of its own");
            assert_eq!(free(2, s0), (2, 6), "merged into the previous");
            assert_eq!(free(4, s0), (3, 8), "no neighbour free");
            assert_eq!(free(3, s0), (2, 10), "merged with both");
            assert_eq!(free(5, s1), (3, 12), "another stream's stays apart");
            assert_eq!(free(6, s0), (3, 14), "merged with the free end");
            assert_eq!(free(0, s0), (3, 16), "merged into the next");
            if wilderness {
                assert_eq!(h.wild().map(|(_, size, _)| size), Some(4 * GRANULE));
            }
            h.adopt(s0, s1);
            h.check().unwrap();
            assert_eq!(h.free_blocks(), 1, "all one block again");
            assert_eq!(h.wild().is_some(), wilderness);
        }
    }

    #[test]
    fn streams_keep_their_own_free_blocks_until_adopted() {
        let mut h = CoalescingHeap::default();
        let (s0, s1) = (h.slot(S0), h.slot(S1));
        h.add_chunk(s0, 1 << 20, 8 * GRANULE);
        let a = h.allocate(s0, 4 * GRANULE, 1).unwrap();
        let b = h.allocate(s0, 4 * GRANULE, 1).unwrap();
        h.deallocate(a, 1, s1).unwrap();
        assert!(
            h.allocate(s0, GRANULE, 1).is_none(),
            "s1's block is not s0's"
        );
        assert_eq!(h.find_elsewhere(s0, GRANULE), Some(s1));
        h.deallocate(b, 1, s0).unwrap();
        assert_eq!(
            h.free_blocks(),
            2,
            "neighbours of different streams stay apart"
        );
        h.check().unwrap();
        h.adopt(s0, s1);
        assert_eq!(h.free_blocks(), 1, "adopted and merged");
        h.check().unwrap();
        assert_eq!(h.allocate(s0, 8 * GRANULE, 1), Some(1 << 20));
        let all = h.take_all_chunks();
        assert_eq!(all.len(), 1);
        assert_eq!(
            all[0].1, None,
            "a chunk with a live block has no stream to free on"
        );
    }

    #[test]
    fn past_the_slot_limit_a_new_stream_takes_over_a_slot_with_no_free_block() {
        let mut h = CoalescingHeap::default();
        let streams: Vec<StreamId> = (0..MAX_SLOTS as u64).map(StreamId).collect();
        let slots: Vec<usize> = streams.iter().map(|&s| h.slot(s)).collect();
        assert_eq!(slots, (0..MAX_SLOTS).collect::<Vec<_>>());
        // Slot 0 holds a free block; slot 1 none; slot 2 the only other free block.
        h.add_chunk(0, 1 << 20, 8 * GRANULE);
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
        h.add_chunk(s0, 1 << 20, 8 * GRANULE);
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
            wilderness: true,
            ..CoalescingHeap::default()
        };
        let s0 = h.slot(StreamId(0));
        h.add_chunk(s0, 1 << 20, 16 * GRANULE);
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

    #[test]
    fn random_churn_keeps_every_invariant() {
        let mut h = CoalescingHeap::default();
        let slots = [h.slot(S0), h.slot(S1)];
        for k in 0..4u64 {
            h.add_chunk(slots[(k % 2) as usize], (k + 1) << 30, 1 << 20);
        }
        let mut rng = crate::workloads::SplitMix64::new(9);
        let mut live: Vec<(u64, u64)> = Vec::new();
        for step in 0..20_000 {
            let slot = slots[rng.below(2) as usize];
            if rng.below(100) < 55 {
                let req = rng.range(1, 64 << 10);
                let size = round_to_granule(req).unwrap();
                if let Some(p) = h.allocate(slot, size, req) {
                    assert!(live.iter().all(|&(q, n)| p + size <= q || q + n <= p));
                    live.push((p, round_to_granule(req).unwrap()));
                }
            } else if !live.is_empty() {
                let (p, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
                let req = h
                    .live
                    .get(h.slab.records(), p)
                    .map(|i| h.slab.get(i).requested())
                    .unwrap();
                h.deallocate(p, req, slot).unwrap();
            }
            if step % 500 == 0 {
                h.check().unwrap();
            }
            if step % 5000 == 0 {
                h.adopt(slots[0], slots[1]);
            }
        }
        assert_eq!(h.live_count(), live.len());
        h.check().unwrap();
    }
}
