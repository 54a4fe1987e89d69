//! [`Block`] and [`BlockSlab`]: the host-side records of a suballocator's device memory.
//!
//! Device memory cannot hold allocator metadata (the host cannot touch it), so every block —
//! free or live — is a record in a slab on the host, linked to its physical neighbours inside
//! its upstream chunk (for coalescing) and, while free, to the other blocks of its size class
//! (for the segregated free lists of [`super::tlsf::TlsfIndex`]). Indices are `u32`, so a
//! record is 48 bytes and a slab of a million blocks is 48 MB.

/// "No block": the end of a list, or no physical neighbour (a chunk boundary).
pub(crate) const NIL: u32 = u32::MAX;

/// The owner of a live block (free blocks name the stream slot whose lists hold them).
pub(crate) const LIVE: u32 = u32::MAX;

/// One block of device memory: free (in a free list) or live (handed out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    /// First address.
    pub addr: u64,
    /// Size in bytes (a multiple of the granule).
    pub size: u64,
    /// While live: the bytes the caller asked for, checked on free.
    pub requested: u64,
    /// The block just below in the same chunk, or [`NIL`] at the chunk's start.
    pub prev_phys: u32,
    /// The block just above in the same chunk, or [`NIL`] at the chunk's end.
    pub next_phys: u32,
    /// Free-list links (meaningful only while free).
    pub prev_free: u32,
    /// Free-list links (meaningful only while free).
    pub next_free: u32,
    /// While free, the stream slot whose lists hold it; [`LIVE`] while handed out.
    pub owner: u32,
}

impl Block {
    /// Whether the block is free.
    #[inline]
    pub(crate) fn is_free(&self) -> bool {
        self.owner != LIVE
    }
}

/// A slab of [`Block`] records with a stack of vacant indices.
#[derive(Debug, Default, Clone)]
pub(crate) struct BlockSlab {
    blocks: Vec<Block>,
    vacant: Vec<u32>,
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
        debug_assert!((i as usize) < self.blocks.len());
        self.vacant.push(i);
    }

    /// The records, indexed by block index.
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
