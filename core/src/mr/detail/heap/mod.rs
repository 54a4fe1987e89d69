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
//! Over an expandable segment (one chunk grown and shrunk at its end, `segment_end`), the heap
//! keeps the chunk's free last block out of the lists as the *wilderness*, used only when no
//! listed block fits, as dlmalloc keeps its top chunk: so the segment grows only when nothing
//! below its end fits, however much of it is free.
//!
//! The heap makes no driver calls: the resource owning it records events and talks to its
//! upstream, so the heap stays a pure, testable data structure.
//!
//! Modules: this one holds the heap and its allocate and free paths; `stream_slots` which free
//! lists a stream uses and moving free blocks between streams; `chunks` chunks in and out;
//! `invariants` the O(blocks) check.

mod chunks;
mod invariants;
mod segment_end;
mod stream_slots;

use std::hint::select_unpredictable;

use crate::driver::StreamId;
use crate::mr::detail::addr_map::AddrMap;
pub(crate) use crate::mr::detail::block::SlabFull;
use crate::mr::detail::block::{BlockSlab, Blocks};
use crate::mr::detail::live_index::LiveIndex;
use crate::mr::detail::record::{Block, LIVE, NIL, SCRATCH_NUMBER};
use crate::mr::detail::stream_map::StreamMap;
use crate::mr::detail::tlsf::{OwnClass, TlsfIndex, GRANULE};

/// The owner of a free block in quarantine: set aside from a stream whose slot a new stream
/// took, usable by no stream until a context synchronize ([`CoalescingHeap::unify`]).
pub(crate) const QUARANTINE: u16 = LIVE - 1;

/// The owner of a hole: a range of a segment whose physical memory is given back, in no list
/// and never merged with a free block (`heap_holes`).
pub(crate) const UNMAPPED: u16 = LIVE - 2;

/// Stream slots a heap keeps: a block's owner is 16 bits, and none of [`LIVE`],
/// [`QUARANTINE`] and [`UNMAPPED`] is a slot.
#[cfg(not(test))]
pub(crate) const MAX_SLOTS: usize = UNMAPPED as usize;
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
    /// Every block's record, free or live, and the sentinel and scratch records.
    pub(super) slab: BlockSlab,
    /// Each stream slot's free lists; a free block is in exactly one list (its `owner`'s),
    /// except the wilderness, which is in none.
    pub(super) lists: Vec<StreamLists>,
    /// Every live block by address, and only live blocks.
    pub(super) live_blocks: LiveIndex,
    /// The upstream chunks held; every block lies in one of them.
    pub(super) chunks: Vec<Chunk>,
    /// Bytes of all chunks together.
    pub(super) held: u64,
    /// Bytes in live blocks (granule-rounded).
    pub(super) live_bytes: u64,
    /// Whether the free last block of a chunk is kept as the wilderness (`segment_end`).
    pub(super) keeps_wilderness: bool,
    /// The wilderness: a free last block, in no list; `None` unless `keeps_wilderness`.
    pub(super) wilderness_block: Option<u32>,
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
        self.live_blocks.len()
    }

    /// Number of free blocks, all streams together.
    pub(crate) fn free_blocks(&self) -> usize {
        usize::from(self.wilderness_block.is_some())
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

    /// Makes sure the next `n` records the heap stores need no growth of its slab: the slow
    /// paths call this before they take memory from upstream that must then be recorded.
    ///
    /// # Errors
    ///
    /// [`SlabFull`] when the host will not give the slab the memory; nothing changed.
    ///
    /// # Time complexity
    ///
    /// O(n), plus a growth of the slab (amortized O(1) a record).
    pub(crate) fn reserve_records(&mut self, n: usize) -> Result<(), SlabFull> {
        self.slab.reserve_n(n)
    }

    /// Takes a block of `size` bytes (a positive granule multiple) from `slot`'s lists, splits
    /// off the rest, and records it live with `requested` bytes. `None` if `slot` has no block
    /// large enough, or if no record is vacant and the slab cannot grow (nothing changed:
    /// [`CoalescingHeap::reserve_records`] says why). The search scans the own class ([`OwnClass::Scan`]).
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
            live_blocks,
            live_bytes,
            ..
        } = self;
        // Indexed before the slab may grow (a call): for slot 0, just found by the caller,
        // the compiler then drops the bounds check.
        let index = &mut lists[slot].index;
        // The split below may need a record; the view cannot grow the slab. Where the host
        // refuses the slab more memory, nothing is taken: the caller's slow path reserves
        // records itself ([`CoalescingHeap::reserve_records`]) and reports why.
        if slab.reserve().is_err() {
            return None;
        }
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
        live_blocks.insert(&mut blocks, addr, i);
        *live_bytes += size;
        Some(addr)
    }

    /// Whether a live block starts at `addr`.
    pub(crate) fn is_live(&self, addr: u64) -> bool {
        self.live_blocks.get(self.slab.records(), addr).is_some()
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
            live_blocks,
            live_bytes,
            keeps_wilderness,
            wilderness_block,
            ..
        } = self;
        let index = &mut lists[slot].index;
        let mut blocks = slab.view();
        let i = live_blocks
            .remove(&mut blocks, addr)
            .ok_or(FreeError::NotLive)?;
        let b = &blocks[i];
        if b.requested() != requested {
            // The rare refusal pays for the common case's single search.
            let allocated = b.requested();
            live_blocks.insert(&mut blocks, addr, i);
            return Err(FreeError::WrongSize { allocated });
        }
        let size = b.size();
        *live_bytes -= size;
        let merged = file_free(
            &mut blocks,
            index,
            (*keeps_wilderness, wilderness_block),
            slot,
            i,
        );
        let merged = &blocks[merged];
        let whole = merged.prev_phys == NIL && merged.next_phys == NIL;
        Ok((size, whole.then_some(merged.addr)))
    }

    /// Marks block `i` free in `slot`, merges it with same-slot free neighbours, and files it
    /// (or makes it the wilderness when it ends up last); returns the merged block.
    pub(super) fn file_free(&mut self, slot: usize, i: u32) -> u32 {
        let wild = (self.keeps_wilderness, &mut self.wilderness_block);
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
        h.add_chunk(s, 1 << 20, 64 * GRANULE).unwrap();
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
                keeps_wilderness: wilderness,
                ..CoalescingHeap::default()
            };
            let (s0, s1) = (h.slot(S0), h.slot(S1));
            h.add_chunk(s0, 1 << 20, 16 * GRANULE).unwrap();
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
        h.add_chunk(s0, 1 << 20, 8 * GRANULE).unwrap();
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
    fn random_churn_keeps_every_invariant() {
        let mut h = CoalescingHeap::default();
        let slots = [h.slot(S0), h.slot(S1)];
        for k in 0..4u64 {
            h.add_chunk(slots[(k % 2) as usize], (k + 1) << 30, 1 << 20)
                .unwrap();
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
                    .live_blocks
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
