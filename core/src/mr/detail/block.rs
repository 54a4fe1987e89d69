//! [`BlockSlab`]: the slab of [`Block`] records a heap keeps, and its views ([`Blocks`],
//! [`Records`]) that read and write records by number: the layer above the records and their
//! storage, below the free-list index (see [`super`]).

use super::record::{Block, NIL, SCRATCH, SCRATCH_NUMBER, SENTINEL, STEP};
use super::record_space::{RecordSpace, SpaceFull, SpaceMut, SpaceRef};

/// The slab could not grow for one more record: the host would not give it the bytes
/// ([`SpaceFull`]). Nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlabFull {
    /// Records the slab holds.
    pub(crate) records: usize,
    /// Bytes of records it asked the host for, all together.
    pub(crate) bytes: usize,
}

impl SlabFull {
    /// What went wrong, for an error message.
    pub(crate) fn reason(self) -> String {
        format!(
            "the host refused the {} its block records would take ({} records held)",
            crate::units::Bytes(self.bytes as u64),
            self.records
        )
    }
}

/// A slab of [`Block`] records; number [`NIL`] is the sentinel.
///
/// The records lie in a [`RecordSpace`], where a view of them ([`Blocks`]) reads and writes
/// by number with no bounds check of Rust's form (the checks and the reloads of the slab's
/// base and length around them were about a tenth of the pool's instructions, W3) and, unless
/// the address space is limited, never outside the slab's memory. Its length is always a power of two. Vacant records are chained
/// through `next_free` (no side stack to grow on the hot path), and the slab grows only
/// through [`BlockSlab::reserve`], before a caller takes its view (growing may move the
/// records, in a space fitted to the slab, but never under a view).
#[derive(Debug)]
pub(crate) struct BlockSlab {
    space: RecordSpace,
    /// The first vacant record, or [`NIL`].
    vacant: u32,
}

impl Default for BlockSlab {
    fn default() -> Self {
        let mut space = RecordSpace::new();
        // 16 records lie in the first mapping (64 KiB), which `RecordSpace::new` made.
        let first = space
            .grow(1, SENTINEL)
            .and_then(|()| space.grow(2, SCRATCH));
        let mut slab = BlockSlab { space, vacant: NIL };
        if first.is_err() || slab.grow().is_err() {
            unreachable!("the first 16 records lie in the space's first mapping");
        }
        slab
    }
}

impl BlockSlab {
    /// Makes sure one record is vacant, so that the next [`Blocks::insert`] has one.
    ///
    /// # Errors
    ///
    /// [`SlabFull`] when none is and the slab cannot grow; nothing changed.
    ///
    /// # Time complexity
    ///
    /// O(1) amortized: the slab doubles when full.
    #[inline]
    pub(crate) fn reserve(&mut self) -> Result<(), SlabFull> {
        if self.vacant == NIL {
            return self.grow();
        }
        Ok(())
    }

    /// Makes sure `n` records are vacant, so that the next `n` inserts need no growth (for
    /// the slow paths, before they take memory that must then be recorded).
    ///
    /// # Errors
    ///
    /// [`SlabFull`] when the slab cannot grow to hold them; nothing changed.
    ///
    /// # Time complexity
    ///
    /// O(n) plus a growth, amortized O(1) a record.
    pub(crate) fn reserve_n(&mut self, n: usize) -> Result<(), SlabFull> {
        let records = self.records();
        let mut have = 0;
        let mut i = self.vacant;
        while i != NIL && have < n {
            have += 1;
            i = records[i].next_free;
        }
        while have < n {
            let before = self.space.len();
            self.grow()?;
            have += self.space.len() - before;
        }
        Ok(())
    }

    #[cold]
    fn grow(&mut self) -> Result<(), SlabFull> {
        let old = self.space.len();
        // The slab stays below 2^27 records (4 GiB of them): each block is at least one
        // granule of device memory, and 2^27 of them would be 32 GiB in blocks of 256 bytes.
        let new = (old * 2).max(16);
        let full = |bytes| SlabFull {
            records: old,
            bytes,
        };
        if (new - 1) << STEP > u32::MAX as usize {
            return Err(full(new * std::mem::size_of::<Block>()));
        }
        self.space
            .grow(new, SENTINEL)
            .map_err(|SpaceFull { bytes }| full(bytes))?;
        // Chain the new records, lowest first.
        let mut view = self.space.view();
        for i in (old..new).rev() {
            let n = (i << STEP) as u32;
            view.get_mut(n).next_free = self.vacant;
            self.vacant = n;
        }
        Ok(())
    }

    /// Stores `block` in a vacant record, growing the slab if none is.
    ///
    /// # Errors
    ///
    /// [`SlabFull`] when none is vacant and the slab cannot grow; nothing changed.
    ///
    /// # Time complexity
    ///
    /// O(1) amortized.
    #[inline]
    pub(crate) fn insert(&mut self, block: Block) -> Result<u32, SlabFull> {
        self.reserve()?;
        Ok(self.view().insert(block))
    }

    /// Marks record `i` vacant.
    #[inline]
    pub(crate) fn remove(&mut self, i: u32) {
        self.view().remove(i);
    }

    /// The records, to read and write by number, with the vacant chain.
    #[inline(always)]
    pub(crate) fn view(&mut self) -> Blocks<'_> {
        Blocks {
            records: self.space.view(),
            vacant: &mut self.vacant,
        }
    }

    /// The records, read-only (for the slow paths: the hot path reads through its view).
    #[inline]
    pub(crate) fn records(&self) -> Records<'_> {
        Records(self.space.shared())
    }

    /// Record `i`.
    #[inline]
    pub(crate) fn get(&self, i: u32) -> &Block {
        self.records().0.get(i)
    }

    /// Record `i`, mutably.
    #[inline]
    pub(crate) fn get_mut(&mut self, i: u32) -> &mut Block {
        self.view().records.into_mut(i)
    }

    /// A slab holding `records` after the sentinel and the scratch record, numbered
    /// `number(1)`, `number(2)`, … (for tests).
    #[cfg(test)]
    pub(crate) fn of(records: &[Block]) -> Self {
        let mut slab = BlockSlab::default();
        for &b in records {
            slab.insert(b).unwrap();
        }
        slab
    }
}

/// A slab's records by number (see [`RecordSpace`]), with its vacant chain.
pub(crate) struct Blocks<'a> {
    records: SpaceMut<'a>,
    vacant: &'a mut u32,
}

impl Blocks<'_> {
    /// The same view, borrowed: for a call that is not inlined, which takes it by value, so
    /// that the caller's view never has its address taken. A view whose address escapes lives
    /// in memory, and the hot path then reloaded the slab's base and mask after every store
    /// to a record (the live index's outlined paths took `&mut Blocks`).
    #[inline(always)]
    pub(crate) fn reborrow(&mut self) -> Blocks<'_> {
        Blocks {
            records: self.records.reborrow(),
            vacant: &mut *self.vacant,
        }
    }

    /// Stores `block` in the first vacant record; the caller has made sure there is one
    /// ([`BlockSlab::reserve`]).
    #[inline(always)]
    pub(crate) fn insert(&mut self, block: Block) -> u32 {
        let i = *self.vacant;
        debug_assert_ne!(i, NIL, "no vacant record: call BlockSlab::reserve first");
        *self.vacant = self[i].next_free;
        self[i] = block;
        i
    }

    /// Marks record `i` vacant if `vacate`; else leaves the scratch record as it is.
    #[inline(always)]
    pub(crate) fn remove_if(&mut self, i: u32, vacate: bool) {
        let v = *self.vacant;
        let t = std::hint::select_unpredictable(vacate, i, SCRATCH_NUMBER);
        self[t].next_free = std::hint::select_unpredictable(vacate, v, SCRATCH_NUMBER);
        *self.vacant = std::hint::select_unpredictable(vacate, i, v);
    }

    /// Marks record `i` vacant.
    #[inline(always)]
    pub(crate) fn remove(&mut self, i: u32) {
        debug_assert_ne!(i, NIL);
        self[i].next_free = *self.vacant;
        *self.vacant = i;
    }

    /// The records, read-only.
    #[inline(always)]
    pub(crate) fn records(&self) -> Records<'_> {
        Records(self.records.shared())
    }
}

impl std::ops::Index<u32> for Blocks<'_> {
    type Output = Block;
    #[inline(always)]
    fn index(&self, i: u32) -> &Block {
        self.records.get(i)
    }
}

impl std::ops::IndexMut<u32> for Blocks<'_> {
    #[inline(always)]
    fn index_mut(&mut self, i: u32) -> &mut Block {
        self.records.get_mut(i)
    }
}

/// A slab's records by number, read-only (see [`RecordSpace`]).
#[derive(Clone, Copy)]
pub(crate) struct Records<'a>(SpaceRef<'a>);

impl std::ops::Index<u32> for Records<'_> {
    type Output = Block;
    #[inline(always)]
    fn index(&self, i: u32) -> &Block {
        self.0.get(i)
    }
}

/// The number of the `k`-th record a new slab hands out, from 1 (for tests): the sentinel and
/// the scratch record come first.
#[cfg(test)]
pub(crate) fn number(k: usize) -> u32 {
    ((k + 1) << STEP) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sized(units: u32) -> Block {
        Block { units, ..SENTINEL }
    }

    #[test]
    fn the_slab_stays_a_power_of_two_and_reuses_vacant_records() {
        let mut slab = BlockSlab::default();
        let ids: Vec<u32> = (1..=100u32)
            .map(|k| slab.insert(sized(k)).unwrap())
            .collect();
        // Index 0 is the sentinel, 1 the scratch record; records are handed out lowest first.
        assert_eq!(ids, (1..=100).map(number).collect::<Vec<_>>());
        assert!(slab.space.len().is_power_of_two() && slab.space.len() > 100);
        for (k, &i) in ids.iter().enumerate() {
            assert_eq!({ slab.get(i).units }, k as u32 + 1);
        }
        // A removed record is the next one handed out; the others keep their contents.
        slab.remove(number(40));
        slab.remove(number(7));
        assert_eq!(slab.insert(sized(1000)).unwrap(), number(7));
        assert_eq!(slab.insert(sized(1001)).unwrap(), number(40));
        assert_eq!({ slab.get(number(8)).units }, 8);
        assert_eq!({ slab.records()[number(40)].units }, 1001);
        assert_eq!(slab.records()[number(40)].size(), 1001 * 256);
        let len = slab.space.len();
        // Growing keeps every record where it was.
        while slab.space.len() == len {
            slab.insert(sized(1)).unwrap();
        }
        assert!(slab.space.len() == 2 * len);
        assert_eq!(
            (slab.get(number(7)).units, slab.get(number(100)).units),
            (1000, 100)
        );
        assert_eq!(*slab.get(NIL), SENTINEL, "the sentinel took no record");
    }

    #[test]
    fn a_view_reads_and_writes_the_records_it_numbers() {
        let mut slab = BlockSlab::of(&[sized(1), sized(2)]);
        slab.reserve().unwrap();
        let mut blocks = slab.view();
        blocks[number(2)].next_phys = number(1);
        let k = blocks.insert(sized(3));
        assert_eq!(blocks.records()[k].size(), 768);
        blocks.remove(number(1));
        assert_eq!(
            (blocks[number(2)].next_phys, blocks[number(2)].size()),
            (number(1), 512)
        );
        assert_eq!(
            slab.insert(sized(4)).unwrap(),
            number(1),
            "the view's removal is the slab's"
        );
    }

    #[test]
    fn a_number_past_the_slab_or_between_records_is_a_broken_link() {
        let slab = BlockSlab::default();
        let len = slab.space.len();
        for far in [(len << STEP) as u32, number(1) | 3, u32::MAX] {
            // On the hot path's view and on the slow paths' lookups alike.
            let view = std::panic::catch_unwind(|| slab.records()[far].units);
            let get = std::panic::catch_unwind(|| slab.get(far).units);
            if cfg!(debug_assertions)
                || cfg!(not(all(target_os = "linux", target_pointer_width = "64")))
            {
                assert!(view.is_err() && get.is_err(), "{far:#x}");
            } else {
                // Inside the record space, which an optimised build on Linux reads unchecked.
                assert!(view.is_ok() && get.is_ok(), "{far:#x}");
            }
        }
        assert_eq!(slab.get(NIL), &SENTINEL);
    }
}
