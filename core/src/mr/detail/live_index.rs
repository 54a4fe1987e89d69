//! [`LiveIndex`]: the heap's live blocks by address, chained through their own records.
//!
//! A free names only a pointer, so the heap finds the block by address. A live block is in no
//! free list, so its record's `next_free` link is idle: the index chains the live blocks of
//! one hash bucket through it, and the table itself is one `u32` head a bucket. An insert is
//! two stores; a removal reads the record at the head of the bucket — the record the free
//! reads next anyway — and, at under an eighth of a block a bucket ([`MAX_LOAD_LOG2`]),
//! almost always finds the block there. It replaced an open-addressing table of tagged groups ([`super::addr_map`],
//! which the other users keep): the pool's instructions an op went from 259.5 / 262.1 / 245.3
//! to 254.3 / 256.6 / 239.7 on W1 / W2 / W3, and its L1 misses on W3 from 2.30 to 2.09
//! (cachegrind).
//!
//! Every operation is expected O(1); the table doubles when the blocks reach an eighth of its
//! buckets, and never shrinks.

use super::block::{Blocks, Records};
use super::record::NIL;

/// Buckets of a new index: room for 32 live blocks before the first doubling.
const FIRST_BUCKETS_LOG2: u32 = 8;

/// The table doubles when its blocks reach 1/2^this of its buckets. A free whose block is not
/// at its bucket's head takes a branch the CPU mispredicts: at half full that was one free in
/// four on W3 (cachegrind), and at an eighth full the pool ran W1 / W2 / W3 in 54.4 / 48.8 /
/// 49.5 → 50.5 / 51.1 / 47.6 ns an op on an H100 host (medians of 24 processes over
/// two runs, interleaved), for 32–64 bytes of buckets a
/// live block on the host instead of 8–16.
const MAX_LOAD_LOG2: u32 = 3;

/// Live block addresses → record indices, chained through the records' `next_free`.
#[derive(Debug, Clone)]
pub(crate) struct LiveIndex {
    /// Each bucket's first record, or [`NIL`]; a power of two of them.
    heads: Vec<u32>,
    len: usize,
    /// `64 - log2(heads.len())`: the shift that turns a 64-bit hash into a bucket.
    shift: u32,
}

impl Default for LiveIndex {
    fn default() -> Self {
        LiveIndex {
            heads: vec![NIL; 1 << FIRST_BUCKETS_LOG2],
            len: 0,
            shift: 64 - FIRST_BUCKETS_LOG2,
        }
    }
}

impl LiveIndex {
    /// Number of live blocks indexed.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bucket of `addr`.
    #[inline(always)]
    fn bucket(&self, addr: u64) -> usize {
        // Fibonacci hashing on the top bits: the low 8 bits of a 256-aligned address carry
        // nothing.
        ((addr >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The heads, sliced so that an index masked with their length minus one needs no bounds
    /// check (their length is a power of two).
    #[inline(always)]
    fn heads_mut(&mut self) -> &mut [u32] {
        let mask = self.heads.len() - 1;
        &mut self.heads[..=mask]
    }

    /// Indexes live block `i`, which starts at `addr` and is not indexed yet.
    ///
    /// # Time complexity
    ///
    /// O(1) amortized: the table doubles (rehashing every block) at [`MAX_LOAD_LOG2`].
    #[inline(always)]
    pub(crate) fn insert(&mut self, blocks: &mut Blocks<'_>, addr: u64, i: u32) {
        debug_assert_eq!({ blocks[i].addr }, addr);
        if self.len >= self.heads.len() >> MAX_LOAD_LOG2 {
            self.grow(blocks.reborrow());
        }
        let b = self.bucket(addr);
        let heads = self.heads_mut();
        let k = b & (heads.len() - 1);
        blocks[i].next_free = heads[k];
        heads[k] = i;
        self.len += 1;
    }

    /// Removes the block starting at `addr` and returns its record, or `None` (nothing
    /// changed) when no indexed block starts there.
    ///
    /// # Time complexity
    ///
    /// Expected O(1): the bucket holds under one block on average.
    #[inline(always)]
    pub(crate) fn remove(&mut self, blocks: &mut Blocks<'_>, addr: u64) -> Option<u32> {
        let b = self.bucket(addr);
        let heads = self.heads_mut();
        let k = b & (heads.len() - 1);
        let first = heads[k];
        // The sentinel's address is 0, no block's: test NIL apart.
        if first != NIL && blocks[first].addr == addr {
            heads[k] = blocks[first].next_free;
            self.len -= 1;
            return Some(first);
        }
        self.remove_later(blocks.reborrow(), first, addr)
    }

    /// [`Self::remove`] past a bucket's first block (one search in five on W3, or a bad
    /// pointer).
    #[inline(never)]
    fn remove_later(&mut self, mut blocks: Blocks<'_>, first: u32, addr: u64) -> Option<u32> {
        let mut prev = first;
        while prev != NIL {
            let j = blocks[prev].next_free;
            if j != NIL && blocks[j].addr == addr {
                blocks[prev].next_free = blocks[j].next_free;
                self.len -= 1;
                return Some(j);
            }
            prev = j;
        }
        None
    }

    /// The record of the indexed block starting at `addr`.
    ///
    /// # Time complexity
    ///
    /// Expected O(1).
    pub(crate) fn get(&self, records: Records<'_>, addr: u64) -> Option<u32> {
        let mut j = self.heads[self.bucket(addr)];
        while j != NIL {
            if records[j].addr == addr {
                return Some(j);
            }
            j = records[j].next_free;
        }
        None
    }

    /// Doubles the buckets and rehashes every block into them. Where the host refuses the
    /// memory, the table stays as it is: its chains grow longer, and every operation stays
    /// correct (the next insert tries again).
    #[cold]
    #[inline(never)]
    fn grow(&mut self, mut blocks: Blocks<'_>) {
        let mut heads = Vec::new();
        if heads.try_reserve_exact(self.heads.len() * 2).is_err() {
            return;
        }
        heads.resize(self.heads.len() * 2, NIL);
        let old = std::mem::replace(&mut self.heads, heads);
        self.shift -= 1;
        for mut j in old {
            while j != NIL {
                let next = blocks[j].next_free;
                let k = self.bucket(blocks[j].addr);
                blocks[j].next_free = self.heads[k];
                self.heads[k] = j;
                j = next;
            }
        }
    }

    /// Every indexed record, bucket by bucket (for the heap's invariant check).
    pub(crate) fn records_indexed(&self, records: Records<'_>) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len);
        for &head in &self.heads {
            let mut j = head;
            // A cycle would never end: no chain is longer than the whole index.
            while j != NIL && out.len() <= self.len {
                out.push(j);
                j = records[j].next_free;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::block::{number, BlockSlab};
    use super::super::record::{Block, SENTINEL};
    use super::*;

    /// A slab with a record at each of `addrs`, in order from index 1.
    fn slab_at(addrs: &[u64]) -> BlockSlab {
        let blocks: Vec<Block> = addrs
            .iter()
            .map(|&addr| Block {
                addr,
                units: 1,
                ..SENTINEL
            })
            .collect();
        BlockSlab::of(&blocks)
    }

    #[test]
    fn finds_removes_and_refuses_by_address() {
        let addrs: Vec<u64> = (1..=500u64).map(|k| k << 20).collect();
        let mut slab = slab_at(&addrs);
        let mut index = LiveIndex::default();
        for (k, &a) in addrs.iter().enumerate() {
            index.insert(&mut slab.view(), a, number(k + 1));
        }
        assert_eq!(index.len(), 500);
        assert!(
            index.heads.len() >= 500 << MAX_LOAD_LOG2,
            "doubled at an eighth full"
        );
        for (k, &a) in addrs.iter().enumerate() {
            assert_eq!(index.get(slab.records(), a), Some(number(k + 1)));
        }
        // A foreign, an interior and a null pointer: not found, nothing changed.
        for bad in [7 << 40, (3 << 20) + 256, 0] {
            assert_eq!(index.remove(&mut slab.view(), bad), None);
            assert_eq!(index.len(), 500);
        }
        // Remove every other block, from the middle of chains as well as their heads.
        for (k, &a) in addrs.iter().enumerate().step_by(2) {
            assert_eq!(index.remove(&mut slab.view(), a), Some(number(k + 1)));
            assert_eq!(index.remove(&mut slab.view(), a), None, "a double free");
        }
        assert_eq!(index.len(), 250);
        for (k, &a) in addrs.iter().enumerate() {
            let want = (k % 2 == 1).then_some(number(k + 1));
            assert_eq!(index.get(slab.records(), a), want);
        }
        let mut all = index.records_indexed(slab.records());
        all.sort_unstable();
        assert_eq!(
            all,
            (1..=500)
                .filter(|i| i % 2 == 0)
                .map(number)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn blocks_sharing_a_bucket_are_each_found() {
        // Four addresses in each of five buckets of a new index (below its load limit, so it
        // does not grow): chains of four.
        let fresh = LiveIndex::default();
        let mut addrs = Vec::new();
        for bucket in [0, 9, 17, 40, 63] {
            let same = (1..u64::from(u32::MAX))
                .map(|k| k * 256)
                .filter(|&a| fresh.bucket(a) == bucket)
                .take(4);
            addrs.extend(same);
        }
        assert_eq!(addrs.len(), 20);
        let mut slab = slab_at(&addrs);
        let mut index = LiveIndex::default();
        for (k, &a) in addrs.iter().enumerate() {
            index.insert(&mut slab.view(), a, number(k + 1));
        }
        assert_eq!(index.heads.len(), 1 << FIRST_BUCKETS_LOG2, "no growth");
        // A bucket's first block in is last in its chain: these removals walk past the head,
        // to its end; each block is found once.
        for (k, &a) in addrs.iter().enumerate() {
            assert_eq!(index.get(slab.records(), a), Some(number(k + 1)));
            assert_eq!(index.remove(&mut slab.view(), a), Some(number(k + 1)));
            assert_eq!(index.get(slab.records(), a), None);
        }
        assert_eq!(index.len(), 0);
        assert!(index.heads.iter().all(|&h| h == NIL));
    }
}
