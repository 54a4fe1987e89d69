//! [`Block`]: one host-side record of a block of device memory, its layout and its numbering:
//! the bottom layer of the heap (see [`super`]).
//!
//! Device memory cannot hold allocator metadata (the host cannot touch it), so every block —
//! free or live — is a record on the host, linked to its physical neighbours inside its
//! upstream chunk (for coalescing) and, while free, to the other blocks of its size class. Links
//! are `u32` record numbers (a record's byte offset in its slab, [`STEP`]) and sizes `u32`
//! granules, so a record is 32 bytes and a million blocks take 32 MB. Two records have fixed
//! numbers: [`NIL`] (the sentinel, which takes the writes through empty links) and
//! [`SCRATCH_NUMBER`] (which a branchless merge absorbs when there is no neighbour).

/// "No block": the end of a list, or no physical neighbour (a chunk boundary). Index 0 of every
/// slab is a sentinel record, never a block, so a link to `NIL` can be written through without
/// a branch (the write lands in the sentinel), and the sentinel's owner is [`LIVE`], so it never
/// passes for a free neighbour. The branches this removes from the free lists' links were
/// among the pool's most mispredicted (W1, W3).
pub(crate) const NIL: u32 = 0;

/// The owner of a live block (free blocks name the stream slot whose lists hold them).
pub(crate) const LIVE: u16 = u16::MAX;

/// One block of device memory: free (in a free list) or live (handed out).
///
/// 32 bytes, so that two records share a cache line and none straddles two (at 40 bytes half
/// of them did), and records are numbered by their byte offset ([`STEP`]). Aligned to one
/// byte (`packed`; the slab keeps every record at a multiple of 32 all the same), so that a
/// record may be read at any offset of the [`super::record_space`], whatever number a link
/// holds. Against 40-byte records by index: 254.3 / 239.7 → 247.1 / 232.8 instructions
/// an op and 2.09 → 1.72 L1 misses an op on W3 (cachegrind, W1 / W3); on an H100 host, 54.5
/// / 50.1 / 51.7 → 49.7 / 48.6 / 48.0 ns an op on W1 / W2 / W3 (medians of twelve processes,
/// interleaved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed)]
pub(crate) struct Block {
    /// First address.
    pub addr: u64,
    /// Size in granules ([`super::tlsf::GRANULE`]): a block is below 1 TiB
    /// ([`MAX_BLOCK`]).
    pub units: u32,
    /// The block just below in the same chunk, or [`NIL`] at the chunk's start.
    pub prev_phys: u32,
    /// The block just above in the same chunk, or [`NIL`] at the chunk's end.
    pub next_phys: u32,
    /// Free-list link while free; while live, the low 32 bits of the block's pad
    /// ([`Block::requested`]): a live block is in no list.
    pub prev_free: u32,
    /// Free-list link while free; while live, the next block of its bucket in the heap's
    /// [`super::live_index::LiveIndex`]; while vacant, the next vacant record.
    pub next_free: u32,
    /// While free, the stream slot whose lists hold it; [`LIVE`] while handed out.
    pub owner: u16,
    /// While filed in a free list, that list's index (its size class), so unlinking it does
    /// not compute the class again; while live, the high 16 bits of its pad.
    pub class: u16,
}

const _: () = assert!(std::mem::size_of::<Block>() == 32);

/// log2 of the granule.
pub(crate) const GRANULE_SHIFT: u32 = 8;

/// The largest block, in bytes: 2^32 − 1 granules, just under 1 TiB. Chunks and segments are
/// kept below it.
pub(crate) const MAX_BLOCK: u64 = (u32::MAX as u64) << GRANULE_SHIFT;

/// The largest chunk or segment a heap is given: [`MAX_BLOCK`] rounded down to a GiB, so that
/// rounding to any upstream granularity up to a GiB keeps it a valid block.
pub(crate) const MAX_CHUNK: u64 = 1023 << 30;

/// A live block's pad (its size less the bytes asked for) is below this: 48 bits are kept.
pub(crate) const PAD_LIMIT: u64 = 1 << 48;

impl Block {
    /// Size in bytes.
    #[inline(always)]
    pub(crate) fn size(&self) -> u64 {
        u64::from(self.units) << GRANULE_SHIFT
    }

    /// The granules in `bytes`, a granule multiple of at most [`MAX_BLOCK`]: a size as a
    /// record keeps it.
    #[inline(always)]
    pub(crate) fn units_of(bytes: u64) -> u32 {
        debug_assert!(bytes <= MAX_BLOCK && bytes.is_multiple_of(1 << GRANULE_SHIFT));
        (bytes >> GRANULE_SHIFT) as u32
    }

    /// Sets the size to `bytes`, as [`Block::units_of`] takes it.
    #[inline(always)]
    pub(crate) fn set_size(&mut self, bytes: u64) {
        self.units = Self::units_of(bytes);
    }

    /// While live: the bytes the caller asked for, checked on free. Kept as the pad below the
    /// block's size, in `prev_free` and `class`, which only a free block uses.
    #[inline]
    pub(crate) fn requested(&self) -> u64 {
        self.size() - (u64::from(self.prev_free) | u64::from(self.class) << 32)
    }

    /// Records the bytes asked for, as the block goes live at its final size. Callers round
    /// a request up by less than a granule (the pools) or than
    /// [`crate::unified::MAX_ROUNDING`] (the managed allocator's checked options), so `bytes`
    /// is at most the size and the pad below [`PAD_LIMIT`].
    #[inline]
    pub(crate) fn set_requested(&mut self, bytes: u64) {
        let pad = self.size() - bytes;
        debug_assert!(
            bytes <= self.size() && pad < PAD_LIMIT,
            "{bytes} in {}",
            self.size()
        );
        self.prev_free = pad as u32;
        self.class = (pad >> 32) as u16;
    }

    /// Whether the block is free.
    #[inline]
    pub(crate) fn is_free(&self) -> bool {
        self.owner != LIVE
    }
}

/// A record's number is its index shifted left by this: its byte offset in the slab, which
/// the loads' addresses take as it is (see [`super::record_space`]). Numbers are what the
/// links, the lists and the live index hold; a `u32` numbers 2^27 records.
pub(crate) const STEP: u32 = 5;

/// The record numbered [`NIL`] (index 0): its links take writes that fall through empty lists
/// and chunk ends; its size is 0 and its owner [`LIVE`], so no search or merge takes it.
pub(crate) const SENTINEL: Block = Block {
    addr: 0,
    units: 0,
    prev_phys: NIL,
    next_phys: NIL,
    prev_free: NIL,
    next_free: NIL,
    owner: LIVE,
    class: 0,
};

/// The free-list index ([`Block::class`]) of the scratch record: a list no size class reaches
/// (first level 63 of the index's 32 classes a level, past the largest block), which the index
/// layer (`tlsf::SCRATCH_LIST`) checks at compile time and never searches.
pub(crate) const SCRATCH_CLASS: u16 = 63 * 32;

/// The record numbered [`SCRATCH_NUMBER`] (index 1): a free-list member of its own, linked
/// to itself in a list no search reaches, that a branchless merge unlinks and absorbs when
/// there is no neighbour to merge.
pub(crate) const SCRATCH_NUMBER: u32 = 1 << STEP;
pub(crate) const SCRATCH: Block = Block {
    addr: 0,
    units: 0,
    prev_phys: NIL,
    next_phys: NIL,
    prev_free: SCRATCH_NUMBER,
    next_free: SCRATCH_NUMBER,
    owner: LIVE,
    class: SCRATCH_CLASS,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_32_bytes_and_keeps_a_pad_as_wide_as_its_size() {
        assert_eq!(std::mem::size_of::<Block>(), 32);
        let mut b = Block {
            units: u32::MAX,
            ..SENTINEL
        };
        assert_eq!(b.size(), MAX_BLOCK);
        // A pad of 40 bits: past `prev_free`, into `class`.
        b.set_requested(1);
        assert_eq!((b.requested(), b.class), (1, 0xff));
        b.set_size(MAX_CHUNK);
        assert_eq!(b.size(), MAX_CHUNK);
    }
}
