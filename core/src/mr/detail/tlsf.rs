//! [`TlsfIndex`]: two-level segregated fit (TLSF) free lists with constant-time search.
//!
//! Free blocks are kept in size classes: a first level by power of two and a second level
//! splitting each power of two into [`SL_COUNT`] equal classes (so a class is at most 1/32 ≈ 3 %
//! wide), with exact classes below 32 granules (8 KiB). Two bitmap levels say which classes are
//! non-empty, so finding a block of at least `n` bytes is two masked find-first-set operations,
//! whatever the number of free blocks — the design of Masmano et al. (2004) and of the `rlsf`
//! crate, over host-side block records instead of in-band headers.
//!
//! A search first looks in the request's own class for a block that fits (the tightest fit
//! there is, short of a full best-fit search), then rounds the request up to the next class
//! start ("good fit"), where any block is large enough. How far it looks in the own class is
//! its owner's choice ([`OwnClass`]): the first [`EXACT_CLASS_SCAN`] blocks, or the head
//! alone without a branch. Either keeps the search constant-time; against good fit alone it
//! measured 1.14 → 1.08 held over peak live on W3.

use std::hint::select_unpredictable;

use super::block::{Blocks, Records};
use super::record::{GRANULE_SHIFT, NIL, SCRATCH_CLASS};

/// Granule: every block size is a multiple of this (the resources' minimum alignment).
pub(crate) const GRANULE: u64 = 1 << GRANULE_SHIFT;
/// log2 of the number of second-level classes per power of two.
const SL_LOG2: u32 = 5;
/// Second-level classes per power of two.
pub(crate) const SL_COUNT: usize = 1 << SL_LOG2;
/// First-level classes: sizes up to 2^64 bytes.
const FL_COUNT: usize = 64 - GRANULE_SHIFT as usize - SL_LOG2 as usize + 2;
/// List heads kept: a power of two at least `FL_COUNT * SL_COUNT`, so that a list index masked
/// with `LISTS - 1` needs no bounds check; the first-level bitmaps likewise number 64.
const LISTS: usize = 2048;
const _: () = assert!(FL_COUNT * SL_COUNT <= LISTS && FL_COUNT <= 64);
// A list index is stored in `Block::class`.
/// The list of the scratch record ([`SCRATCH_CLASS`], fixed by the record layer): first
/// level 63, which no block reaches.
pub(crate) const SCRATCH_LIST: usize = SCRATCH_CLASS as usize;
const _: () = assert!(SCRATCH_LIST == 63 * SL_COUNT && SCRATCH_LIST / SL_COUNT >= FL_COUNT);
const _: () = assert!(LISTS <= u16::MAX as usize);
/// How many blocks of the request's own class an [`OwnClass::Scan`] search looks at before the
/// good fit. Held over peak live with 0 / 1 / 4 (`emm bench` on the simulated GPU):
/// `pool` W3 1.140 / 1.080 / 1.080, `pool-vmm` W2 1.102 / 1.081 / 1.083, `sharded` W2
/// 1.176 / 1.187 / 1.127.
pub(crate) const EXACT_CLASS_SCAN: usize = 4;

/// How a search looks at the request's own size class before the good fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnClass {
    /// The first [`EXACT_CLASS_SCAN`] blocks, the first that fits: for heaps whose held
    /// memory the extra steps keep down (the sharded pool's W2 1.187 → 1.127 held over peak
    /// live against the head alone).
    Scan,
    /// The head alone, taken over the good fit's block by a select when it fits: no branch on
    /// the own class, which mispredicted about one search in two on W3. The pool's choice:
    /// held over peak live within 0.01 of the scan's (`pool-vmm` W1 / W2 / W3 1.072 / 1.081 /
    /// 1.080 against 1.064 / 1.083 / 1.080), and faster on W1 / W2 / W3 by 1.6 / 4.1 / 0.0 %,
    /// 5.2 / 0.8 / 2.0 % and 5.9 / −0.3 / 1.3 % in three A/Bs on H100 hosts, 0.9 / 0.3 /
    /// 3.8 % in one on an H200 host.
    Head,
}

/// The size class of a block of `size` bytes (rounding down): the class it is filed in.
#[cfg(test)]
fn class_of(size: u64) -> (usize, usize) {
    class_of_units(size >> GRANULE_SHIFT)
}

#[cfg(test)]
fn class_of_units(units: u64) -> (usize, usize) {
    let (list, _) = list_of_units(units);
    (list / SL_COUNT, list % SL_COUNT)
}

/// The list (`first level * SL_COUNT + second level`) of a block of `units` granules
/// (rounding down), and the class's width in granules minus one (a class of `units`' power of
/// two spans 2^(msb − 5) of them; an exact class, one).
///
/// With `w` = max(msb, 5) − 5, the list is `32 w + (units >> w)`: below 32 granules that is
/// `units` itself (first level 0, exact classes), above it `units >> w` lies in 32..64 and
/// carries the first level's step. No branch on the exact classes: the size of a request is
/// random, so such a branch mispredicted often (W3: 1 in 8 requests is small).
#[inline(always)]
fn list_of_units(units: u64) -> (usize, u64) {
    debug_assert!(units > 0);
    let msb = 63 - (units | 1).leading_zeros();
    let w = msb.saturating_sub(SL_LOG2);
    let list = ((w as usize) << SL_LOG2) + (units >> w) as usize;
    (list, (1u64 << w) - 1)
}

/// The list a free block of `units` granules is filed in.
#[inline(always)]
fn list_of(units: u32) -> usize {
    list_of_units(u64::from(units)).0
}

/// The first class whose every block holds at least `size` bytes (rounding up), or `None` past
/// the largest class: [`TlsfIndex::find`]'s rule, spelled out for the tests.
#[cfg(test)]
fn class_at_least(size: u64) -> Option<(usize, usize)> {
    let units = size >> GRANULE_SHIFT;
    let msb = 63 - units.leading_zeros();
    // Round up to the next class start; exact classes (msb below SL_LOG2) need no rounding.
    // `units` < 2^56, so the sum cannot overflow.
    let rounded = units + (1u64 << (msb.max(SL_LOG2) - SL_LOG2)) - 1;
    let (fl, sl) = class_of_units(rounded);
    (fl < FL_COUNT).then_some((fl, sl))
}

/// The segregated free lists of one owner (one stream's free blocks).
#[derive(Debug, Clone)]
pub(crate) struct TlsfIndex {
    fl_bitmap: u64,
    sl_bitmap: [u32; 64],
    heads: [u32; LISTS],
}

impl Default for TlsfIndex {
    fn default() -> Self {
        TlsfIndex {
            fl_bitmap: 0,
            sl_bitmap: [0; 64],
            heads: [NIL; LISTS],
        }
    }
}

impl TlsfIndex {
    /// Whether the lists hold no block. (No counts are kept: the hot path updates only
    /// links, heads and bitmaps; the heap knows its free bytes as held minus live.)
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.fl_bitmap == 0
    }

    /// Number of blocks in the lists, counted.
    ///
    /// # Time complexity
    ///
    /// O(classes + blocks): for statistics and tests.
    pub(crate) fn free_blocks(&self, blocks: Records<'_>) -> usize {
        let mut all = Vec::new();
        self.collect(blocks, &mut all);
        all.len()
    }

    /// Files block `i` (free, size set) at the head of its class list.
    ///
    /// # Time complexity
    ///
    /// O(1).
    #[inline(always)]
    pub(crate) fn insert(&mut self, blocks: &mut Blocks<'_>, i: u32) {
        let list = list_of(blocks[i].units) & (LISTS - 1);
        let (fl, sl) = (list / SL_COUNT, list % SL_COUNT);
        let head = self.heads[list];
        {
            let b = &mut blocks[i];
            b.prev_free = NIL;
            b.next_free = head;
            // Below LISTS <= 2^16.
            b.class = list as u16;
        }
        // The sentinel's link when the list was empty.
        blocks[head].prev_free = i;
        self.heads[list] = i;
        self.fl_bitmap |= 1 << fl;
        self.sl_bitmap[fl] |= 1 << sl;
    }

    /// Unlinks block `i`, which must be in these lists.
    ///
    /// # Time complexity
    ///
    /// O(1).
    #[inline(always)]
    pub(crate) fn remove(&mut self, blocks: &mut Blocks<'_>, i: u32) {
        let b = &blocks[i];
        let (prev_free, next_free, class) = (b.prev_free, b.next_free, b.class);
        // Links to NIL land in the sentinel; the head and the bitmaps are updated without a
        // branch on whether `i` was the head or the last of its class.
        blocks[next_free].prev_free = prev_free;
        blocks[prev_free].next_free = next_free;
        let list = class as usize & (LISTS - 1);
        debug_assert!(prev_free != NIL || self.heads[list] == i);
        let head = self.heads[list];
        self.set_head(list, select_unpredictable(head == i, next_free, head));
    }

    /// Makes `head` the head of `list` (`list` below [`LISTS`]), clearing the list's bit, and
    /// its first level's when that empties the level, if `head` is [`NIL`].
    #[inline(always)]
    fn set_head(&mut self, list: usize, head: u32) {
        let (fl, sl) = (list / SL_COUNT, list % SL_COUNT);
        self.heads[list] = head;
        self.sl_bitmap[fl] &= !(u32::from(head == NIL) << sl);
        self.fl_bitmap &= !(u64::from(self.sl_bitmap[fl] == 0) << fl);
    }

    /// A free block of at least `size` bytes (a positive multiple of [`GRANULE`]), still
    /// linked, or `None`.
    ///
    /// # Time complexity
    ///
    /// O(1): at most [`EXACT_CLASS_SCAN`] list steps, then two find-first-set operations.
    #[inline]
    pub(crate) fn find(&self, blocks: Records<'_>, size: u64) -> Option<u32> {
        self.search(blocks, size, OwnClass::Scan).map(|(i, _)| i)
    }

    /// A free block of at least `size` bytes, looked for as `own` says, unlinked; or `None`.
    ///
    /// # Time complexity
    ///
    /// O(1), as `find`.
    #[inline(always)]
    pub(crate) fn take(
        &mut self,
        blocks: &mut Blocks<'_>,
        size: u64,
        own: OwnClass,
    ) -> Option<u32> {
        let (i, head_of) = self.search(blocks.records(), size, own)?;
        match head_of {
            // Found by the bitmaps: the head of a list just read, so the unlink needs neither
            // its back link nor the list's head again (on W1, nine searches in ten).
            Some(list) => self.pop_head(blocks, list, i),
            None => self.remove(blocks, i),
        }
        Some(i)
    }

    /// Unlinks block `i`, the head of `list`.
    #[inline(always)]
    fn pop_head(&mut self, blocks: &mut Blocks<'_>, list: usize, i: u32) {
        debug_assert_eq!(self.heads[list], i);
        let next = blocks[i].next_free;
        // The sentinel's link when `i` was the list's only block.
        blocks[next].prev_free = NIL;
        self.set_head(list, next);
    }

    /// The search: the block, and its list when it is that list's head.
    #[inline(always)]
    fn search(
        &self,
        blocks: Records<'_>,
        size: u64,
        own: OwnClass,
    ) -> Option<(u32, Option<usize>)> {
        // Budget: the request's own class (closest to best fit, which measured 1.14 → 1.08
        // held over peak live on W3), then two find-first-set operations.
        let units = size >> GRANULE_SHIFT;
        let (own_list, width) = list_of_units(units);
        if own_list >= FL_COUNT * SL_COUNT {
            return None;
        }
        let own_list = own_list & (LISTS - 1);
        // Blocks of the own class may be large enough although the class as a whole is not,
        // and fit more tightly than any block of a larger class. With `OwnClass::Head`, its
        // head when it fits, chosen over the good fit's block by the selects below; with
        // `Scan`, `fits` is a constant false and the selects fold away. (One search written
        // for both: as two, the compiler put a branch on `fits` back, and the head alone ran
        // 3 % slower on W1 on an H100 host.)
        let (head, fits) = match own {
            OwnClass::Scan => {
                // (The fit test first, standing for the emptiness test too as the sentinel's
                // size is 0, cost 3 instructions an op and measured the same.)
                let mut i = self.heads[own_list];
                for _ in 0..EXACT_CLASS_SCAN {
                    if i == NIL {
                        break;
                    }
                    let b = &blocks[i];
                    if u64::from(b.units) >= units {
                        return Some((i, None));
                    }
                    i = b.next_free;
                }
                (NIL, false)
            }
            OwnClass::Head => {
                let head = self.heads[own_list];
                // The sentinel's size is 0: an empty list's head never fits.
                (head, u64::from(blocks[head].units) >= units)
            }
        };
        // The first class whose every block is large enough: the own class when `size` starts
        // it, else the next (class indices are consecutive across first levels).
        let start = own_list + usize::from(units & width != 0);
        let (fl, sl) = (start / SL_COUNT, start % SL_COUNT);
        if fl >= FL_COUNT {
            return fits.then_some((head, Some(own_list)));
        }
        // `fl` itself when its classes from `sl` up hold a block, else the next non-empty first
        // level: chosen without a branch, which mispredicted about one search in four on W1.
        let sl_map = self.sl_bitmap[fl & 63] & (u32::MAX << sl);
        let fl_map = self.fl_bitmap & u64::MAX.checked_shl(fl as u32 + 1).unwrap_or(0)
            | u64::from(sl_map != 0) << fl;
        if fl_map == 0 {
            return fits.then_some((head, Some(own_list)));
        }
        let next_fl = fl_map.trailing_zeros() as usize;
        let sl_map = select_unpredictable(next_fl == fl, sl_map, self.sl_bitmap[next_fl & 63]);
        let sl = sl_map.trailing_zeros() as usize;
        let list = (next_fl * SL_COUNT + sl) & (LISTS - 1);
        let i = select_unpredictable(fits, head, self.heads[list]);
        Some((i, Some(select_unpredictable(fits, own_list, list))))
    }

    /// Every block in the lists, in no particular order (for release and merging lists).
    ///
    /// # Time complexity
    ///
    /// O(classes + blocks).
    pub(crate) fn collect(&self, blocks: Records<'_>, out: &mut Vec<u32>) {
        let mut fl_map = self.fl_bitmap;
        while fl_map != 0 {
            let fl = fl_map.trailing_zeros() as usize;
            fl_map &= fl_map - 1;
            let mut sl_map = self.sl_bitmap[fl];
            while sl_map != 0 {
                let sl = sl_map.trailing_zeros() as usize;
                sl_map &= sl_map - 1;
                let mut i = self.heads[fl * SL_COUNT + sl];
                while i != NIL {
                    out.push(i);
                    i = blocks[i].next_free;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::detail::block::{number, BlockSlab};
    use crate::mr::detail::record::{Block, SENTINEL};

    fn block(size: u64) -> Block {
        // A record with no links and not free: the slab's sentinel, sized.
        Block {
            units: Block::units_of(size),
            ..SENTINEL
        }
    }

    /// Lists holding records 1 to `count` of `blocks` (those after the sentinel).
    fn filed(blocks: &mut Blocks<'_>, count: usize) -> TlsfIndex {
        let mut t = TlsfIndex::default();
        for k in 1..=count {
            t.insert(blocks, number(k));
        }
        t
    }

    /// The classes as first written: a first level from the most significant bit, with the
    /// exact classes (below 32 granules) at first level 0.
    fn reference_class_of_units(units: u64) -> (usize, usize) {
        let msb = 63 - units.leading_zeros();
        if units < SL_COUNT as u64 {
            return (0, units as usize);
        }
        let fl = (msb - SL_LOG2 + 1) as usize;
        let sl = ((units >> (msb - SL_LOG2)) as usize) & (SL_COUNT - 1);
        (fl, sl)
    }

    #[test]
    fn the_list_formula_gives_the_reference_classes() {
        let large = (0..56).flat_map(|b| [(1u64 << b) - 1, 1u64 << b, (1u64 << b) + 1]);
        for units in (1..200_000u64).chain(large.filter(|&u| u > 0)) {
            assert_eq!(
                class_of_units(units),
                reference_class_of_units(units),
                "{units}"
            );
            let (list, width) = list_of_units(units);
            assert!(list < LISTS);
            // The width is that of the class: its first unit and the next class's first unit
            // are `width + 1` apart.
            let first = units & !width;
            assert_eq!(list_of_units(first).0, list, "{units}");
            if let Some(next) = first.checked_add(width + 1) {
                assert_eq!(list_of_units(next).0, list + 1, "{units}");
            }
        }
    }

    #[test]
    fn classes_are_monotonic_and_at_most_a_32nd_wide() {
        let mut last = (0, 0);
        for units in 1..100_000u64 {
            let c = class_of(units * GRANULE);
            assert!(c >= last, "{units}");
            last = c;
            let up = class_at_least(units * GRANULE).unwrap();
            assert!(up >= c);
        }
        assert_eq!(class_of(GRANULE), (0, 1));
        assert_eq!(class_of(31 * GRANULE), (0, 31));
        assert_eq!(class_of(32 * GRANULE), (1, 0));
        assert_eq!(class_of(64 * GRANULE), (2, 0));
        assert_eq!(class_of(66 * GRANULE), (2, 1));
        assert_eq!(class_at_least(65 * GRANULE), Some((2, 1)));
        let (fl, _) = class_at_least(!(GRANULE - 1)).unwrap();
        assert!(fl < FL_COUNT);
    }

    #[test]
    fn the_next_class_index_is_the_rounded_up_class() {
        // `find` takes the own class's index, plus one when the size does not start it.
        let large = (0..56).flat_map(|b| [(1u64 << b) - 1, 1u64 << b, (1u64 << b) + 1]);
        for units in (1..70_000u64).chain(large.filter(|&u| u > 0)) {
            let (fl, sl) = class_of_units(units);
            let (list, width) = list_of_units(units);
            assert_eq!(list, fl * SL_COUNT + sl);
            let start = list + usize::from(units & width != 0);
            let want = class_at_least(units * GRANULE).map(|(fl, sl)| fl * SL_COUNT + sl);
            assert_eq!(
                Some(start).filter(|&s| s < FL_COUNT * SL_COUNT),
                want,
                "{units} units"
            );
        }
    }

    #[test]
    fn find_returns_a_large_enough_block_or_none() {
        let sizes = [256u64, 1024, 8192, 8448, 1 << 20, (1 << 20) + 4096, 3 << 30];
        // Records 1, 2, … after the sentinel.
        let records: Vec<Block> = sizes.iter().map(|&s| block(s)).collect();
        let mut slab = BlockSlab::of(&records);
        let mut blocks = slab.view();
        let mut t = filed(&mut blocks, sizes.len());
        assert_eq!(t.free_blocks(blocks.records()), sizes.len());
        for want in [
            256u64,
            512,
            1024,
            1280,
            8192,
            8448,
            1 << 20,
            (1 << 20) + 256,
            1 << 30,
        ] {
            let i = t.find(blocks.records(), want).unwrap();
            assert!(blocks[i].size() >= want, "{want}");
        }
        assert!(t.find(blocks.records(), 4 << 30).is_none());
        // Removing a block makes it unfindable; its class bit clears.
        let big = t.find(blocks.records(), 2 << 30).unwrap();
        t.remove(&mut blocks, big);
        assert!(t.find(blocks.records(), 2 << 30).is_none());
        let mut all = Vec::new();
        t.collect(blocks.records(), &mut all);
        assert_eq!(all.len(), sizes.len() - 1);
        assert_eq!(t.free_blocks(blocks.records()), sizes.len() - 1);
    }

    #[test]
    fn the_own_class_scan_finds_a_fit_the_good_fit_search_skips() {
        // 66 and 67 granules share a class; a request of 67 rounds up past it.
        let mut slab = BlockSlab::of(&[block(67 * GRANULE)]);
        let mut blocks = slab.view();
        let mut t = TlsfIndex::default();
        t.insert(&mut blocks, number(1));
        assert_eq!(t.find(blocks.records(), 67 * GRANULE), Some(number(1)));
        assert_eq!(t.find(blocks.records(), 68 * GRANULE), None);
    }

    #[test]
    fn the_good_fit_takes_the_smallest_class_above_in_its_level_or_the_next() {
        // Granules 40 and 44 (level 1), 200 and 5000 (levels 3 and 8).
        let sizes = [40u64, 44, 200, 5000];
        let records: Vec<Block> = sizes.iter().map(|&u| block(u * GRANULE)).collect();
        let mut slab = BlockSlab::of(&records);
        let mut blocks = slab.view();
        let mut t = filed(&mut blocks, sizes.len());
        let found = |t: &TlsfIndex, blocks: &Blocks<'_>, units: u64| {
            t.find(blocks.records(), units * GRANULE)
                .map(|i| blocks[i].units)
        };
        // From the class of 33 granules up, level 1 holds 40 and 44: the smaller, in that level.
        assert_eq!(found(&t, &blocks, 33), Some(40));
        assert_eq!(found(&t, &blocks, 41), Some(44));
        // Nothing from 45 up in level 1, nor in level 2: level 3's block.
        assert_eq!(found(&t, &blocks, 45), Some(200));
        assert_eq!(found(&t, &blocks, 201), Some(5000));
        assert_eq!(found(&t, &blocks, 5001), None);
        // Emptying a level moves the search on: without 40 and 44, 33 granules take 200.
        t.remove(&mut blocks, number(1));
        t.remove(&mut blocks, number(2));
        assert_eq!(found(&t, &blocks, 33), Some(200));
        // A level whose classes below the request's hold blocks does not serve it.
        t.insert(&mut blocks, number(2));
        assert_eq!(found(&t, &blocks, 45), Some(200));
        assert_eq!(found(&t, &blocks, 2), Some(44));
    }

    #[test]
    fn the_head_alone_is_taken_when_it_fits_else_the_good_fit() {
        // Class of 66-67 granules: 66 at its head, 67 behind it; 80 and 200 above.
        let sizes = [67u64, 66, 80, 200];
        let records: Vec<Block> = sizes.iter().map(|&u| block(u * GRANULE)).collect();
        let mut slab = BlockSlab::of(&records);
        let mut blocks = slab.view();
        let mut t = filed(&mut blocks, sizes.len());
        let taken = |t: &mut TlsfIndex, blocks: &mut Blocks<'_>, units: u64| {
            t.take(blocks, units * GRANULE, OwnClass::Head)
                .map(|i| blocks[i].units)
        };
        // 67 granules: the head (66) does not fit and the scan is not made, so the good fit's
        // 80 is taken, though 67 sits in the own class.
        assert_eq!(taken(&mut t, &mut blocks, 67), Some(80));
        // 66 starts its class: the head, which the good fit would give too.
        assert_eq!(taken(&mut t, &mut blocks, 66), Some(66));
        // 67 is now the head: it fits, and is taken over the good fit's 200.
        assert_eq!(taken(&mut t, &mut blocks, 67), Some(67));
        // 201: its class's head (200) is too small, and nothing lies above.
        assert_eq!(taken(&mut t, &mut blocks, 201), None);
        assert_eq!(taken(&mut t, &mut blocks, 199), Some(200));
        assert!(t.is_empty());
        // Past the largest class: none, whatever the lists hold.
        assert_eq!(t.take(&mut blocks, !(GRANULE - 1), OwnClass::Head), None);
    }

    #[test]
    fn take_unlinks_what_find_finds_by_either_path() {
        // Two blocks of one class (40 granules, through the bitmaps: the list's head), one of
        // 67 granules (through the own-class look), and 200.
        let sizes = [40u64, 40, 67, 200];
        let records: Vec<Block> = sizes.iter().map(|&u| block(u * GRANULE)).collect();
        let mut slab = BlockSlab::of(&records);
        let mut blocks = slab.view();
        let mut t = filed(&mut blocks, sizes.len());
        let listed = |t: &TlsfIndex, blocks: &Blocks<'_>| {
            let mut all = Vec::new();
            t.collect(blocks.records(), &mut all);
            all.sort_unstable();
            all
        };
        // The bitmaps' pick is the class's head, the last filed; the other stays listed, its
        // back link cleared, and its class still found.
        let head = t.find(blocks.records(), 33 * GRANULE).unwrap();
        assert_eq!(
            t.take(&mut blocks, 33 * GRANULE, OwnClass::Scan),
            Some(head)
        );
        assert_eq!(head, number(2));
        assert_eq!({ blocks[number(1)].prev_free }, NIL);
        assert_eq!(t.find(blocks.records(), 33 * GRANULE), Some(number(1)));
        // The class's last block: its bit clears, and the search moves on.
        assert_eq!(
            t.take(&mut blocks, 33 * GRANULE, OwnClass::Scan),
            Some(number(1))
        );
        assert_eq!(t.find(blocks.records(), 33 * GRANULE), Some(number(3)));
        // The own-class look finds 67 for a request of 67, which the good fit would skip.
        assert_eq!(
            t.take(&mut blocks, 67 * GRANULE, OwnClass::Scan),
            Some(number(3))
        );
        assert_eq!(listed(&t, &blocks), vec![number(4)]);
        assert_eq!(t.take(&mut blocks, 201 * GRANULE, OwnClass::Scan), None);
        assert_eq!(
            t.take(&mut blocks, 200 * GRANULE, OwnClass::Scan),
            Some(number(4))
        );
        assert!(t.is_empty() && listed(&t, &blocks).is_empty());
    }
}
