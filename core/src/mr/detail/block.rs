//! [`Block`] and [`BlockSlab`]: the host-side records of a suballocator's device memory.
//!
//! Device memory cannot hold allocator metadata (the host cannot touch it), so every block —
//! free or live — is a record in a slab on the host, linked to its physical neighbours inside
//! its upstream chunk (for coalescing) and, while free, to the other blocks of its size class
//! (for the segregated free lists of [`super::tlsf::TlsfIndex`]). Indices are `u32`, so a
//! record is 40 bytes and a slab of a million blocks is 40 MB.

/// "No block": the end of a list, or no physical neighbour (a chunk boundary). Index 0 of every
/// slab is a sentinel record, never a block, so a link to `NIL` can be written through without
/// a branch (the write lands in the sentinel), and the sentinel's owner is [`LIVE`], so it never
/// passes for a free neighbour. The branches this removes from the free lists' links were
/// among the pool's most mispredicted (W1, W3).
pub(crate) const NIL: u32 = 0;

/// The owner of a live block (free blocks name the stream slot whose lists hold them).
pub(crate) const LIVE: u32 = u32::MAX;

/// One block of device memory: free (in a free list) or live (handed out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    /// First address.
    pub addr: u64,
    /// Size in bytes (a multiple of the granule).
    pub size: u64,
    /// The block just below in the same chunk, or [`NIL`] at the chunk's start.
    pub prev_phys: u32,
    /// The block just above in the same chunk, or [`NIL`] at the chunk's end.
    pub next_phys: u32,
    /// Free-list links while free; while live, the low half of the bytes the caller asked
    /// for ([`Block::requested`]): a live block is in no list.
    pub prev_free: u32,
    /// Free-list links while free; while live, the high half of the bytes asked for.
    pub next_free: u32,
    /// While free, the stream slot whose lists hold it; [`LIVE`] while handed out.
    pub owner: u32,
    /// While filed in a free list, that list's index (its size class), so unlinking it does
    /// not compute the class again. Fits in the record's padding.
    pub class: u16,
}

// Five records fit in 200 bytes; `Block::requested` shares the links.
const _: () = assert!(std::mem::size_of::<Block>() == 40);

impl Block {
    /// While live: the bytes the caller asked for, checked on free. Kept in the free-list
    /// links, so a record is 40 bytes, not 48 (W3's records fill fewer cache lines).
    #[inline]
    pub(crate) fn requested(&self) -> u64 {
        u64::from(self.prev_free) | u64::from(self.next_free) << 32
    }

    /// Records the bytes asked for, as the block goes live.
    #[inline]
    pub(crate) fn set_requested(&mut self, bytes: u64) {
        self.prev_free = bytes as u32;
        self.next_free = (bytes >> 32) as u32;
    }

    /// Whether the block is free.
    #[inline]
    pub(crate) fn is_free(&self) -> bool {
        self.owner != LIVE
    }
}

/// The record at index [`NIL`]: its links take writes that fall through empty lists and chunk
/// ends; its size is 0 and its owner [`LIVE`], so no search or merge takes it.
pub(crate) const SENTINEL: Block = Block {
    addr: 0,
    size: 0,
    prev_phys: NIL,
    next_phys: NIL,
    prev_free: NIL,
    next_free: NIL,
    owner: LIVE,
    class: 0,
};

/// A slab of [`Block`] records with a stack of vacant indices; index [`NIL`] is the sentinel.
#[derive(Debug, Clone)]
pub(crate) struct BlockSlab {
    blocks: Vec<Block>,
    vacant: Vec<u32>,
}

impl Default for BlockSlab {
    fn default() -> Self {
        BlockSlab {
            blocks: vec![SENTINEL],
            vacant: Vec::new(),
        }
    }
}

impl BlockSlab {
    /// Stores `block`, reusing a vacant record when there is one.
    ///
    /// # Time complexity
    ///
    /// O(1) amortized.
    #[inline]
    pub(crate) fn insert(&mut self, block: Block) -> u32 {
        if let Some(i) = self.vacant.pop() {
            self.blocks[i as usize] = block;
            i
        } else {
            // The slab stays far below 2^32 records: each block is at least one granule of
            // device memory, and no device has 2^40 bytes.
            let i = self.blocks.len() as u32;
            self.blocks.push(block);
            i
        }
    }

    /// Marks record `i` vacant.
    #[inline]
    pub(crate) fn remove(&mut self, i: u32) {
        debug_assert!(i != NIL && (i as usize) < self.blocks.len());
        self.vacant.push(i);
    }

    /// The records, indexed by block index (index [`NIL`] is the sentinel).
    #[inline]
    pub(crate) fn all(&self) -> &[Block] {
        &self.blocks
    }

    /// The records, mutably.
    #[inline]
    pub(crate) fn all_mut(&mut self) -> &mut [Block] {
        &mut self.blocks
    }

    /// Record `i`.
    #[inline]
    pub(crate) fn get(&self, i: u32) -> &Block {
        &self.blocks[i as usize]
    }

    /// Record `i`, mutably.
    #[inline]
    pub(crate) fn get_mut(&mut self, i: u32) -> &mut Block {
        &mut self.blocks[i as usize]
    }
}
