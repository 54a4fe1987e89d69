//! [`RecordSpace`]: where a block slab keeps its records, and the views that read and write
//! them by number.
//!
//! A record's number is its byte offset in the slab ([`STEP`]), and a record is aligned to
//! one byte ([`Block`]). On 64-bit Linux the slab's records lie at the start of one private
//! anonymous mapping as long as every `u32` offset and a record past it (4 GiB and 64 KiB),
//! mapped readable and writable with `MAP_NORESERVE`: the kernel gives a page memory when it
//! is first written, so the slab holds only what it uses, and *any* number names 32 bytes
//! inside the mapping. A view then reads a record with no check at all: a number that names no
//! record, which only a broken link could hold, reads some record's bytes or zeros (every bit
//! pattern is a [`Block`]), and a write through it spoils the heap's bookkeeping — what the
//! heap's invariant check reports — but never touches memory outside the slab. Dropping the
//! checks (a test and a branch never taken, for each record read: with the shifts of 8-byte
//! numbering, 43 instructions an operation on W1, cachegrind) ran the pool 9.1 / 8.6 / 6.2 %
//! faster on W1 / W2 / W3 on a lent H100 host (`docs/results/2026-11-27-h100-s20/`, call 8).
//! Debug builds still check every number against the records in use.
//!
//! The cost is address space: 4 GiB a heap, none of it memory until written. Where even that
//! cannot be had (an address-space limit), creating a heap aborts the process, as a failed
//! allocation does.
//!
//! Where the kernel will not map that much unreserved (strict overcommit accounting), the
//! space is mapped inaccessible and opened as the slab grows: a number past the slab then
//! faults instead of reading zeros. Elsewhere the records are a vector of power-of-two length
//! and every number is checked ([`super::masked`]).

use super::block::{Block, STEP};

const _: () =
    assert!(std::mem::size_of::<Block>() == 32 && std::mem::align_of::<Block>() == 1 && STEP == 5);

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
pub(crate) use linux::{RecordSpace, SpaceMut, SpaceRef};
#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
pub(crate) use portable::{RecordSpace, SpaceMut, SpaceRef};

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
mod linux {
    use std::marker::PhantomData;
    use std::ptr::NonNull;

    use super::super::block::{Block, STEP};

    /// Bytes from the first record to the end of the one numbered `u32::MAX`, rounded up to
    /// a page (pages are at most 64 KiB).
    const SPACE_BYTES: usize = ((u32::MAX as usize) + 32 + 0xffff) & !0xffff;

    /// The records of every `u32` number, in one mapping of [`SPACE_BYTES`]; the first `len`
    /// are the slab's.
    pub(crate) struct RecordSpace {
        base: NonNull<Block>,
        /// Records the slab has initialised.
        len: usize,
        /// Bytes open to reads and writes from the start: all of them, or, where the mapping
        /// had to be reserved inaccessible, those opened so far.
        open: usize,
    }

    // SAFETY: the space owns its mapping, as a `Box` owns its allocation: moving it to
    // another thread moves that ownership; shared use is through `&self` only.
    #[allow(unsafe_code, reason = "the mapping is owned like a Box")]
    unsafe impl Send for RecordSpace {}

    impl std::fmt::Debug for RecordSpace {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("RecordSpace")
                .field("len", &self.len)
                .field("open", &self.open)
                .finish()
        }
    }

    impl RecordSpace {
        /// An empty space.
        ///
        /// Aborts as a failed allocation does where the host lends no address space for it
        /// (an address-space limit below 4 GiB).
        pub(crate) fn new() -> Self {
            Self::mapped(true)
        }

        /// [`RecordSpace::new`], trying the mapping readable first if `open_first`, else
        /// mapping it inaccessible at once (as on a host with strict overcommit accounting).
        fn mapped(open_first: bool) -> Self {
            let map = |prot| {
                #[allow(unsafe_code, reason = "mmap has no std wrapper")]
                // SAFETY: a fresh anonymous mapping, placed by the kernel, aliases nothing.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        SPACE_BYTES,
                        prot,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                        -1,
                        0,
                    )
                };
                (p != libc::MAP_FAILED).then_some(p)
            };
            let open_map = open_first
                .then(|| map(libc::PROT_READ | libc::PROT_WRITE))
                .flatten();
            let (p, open) = match open_map {
                Some(p) => (p, SPACE_BYTES),
                None => match map(libc::PROT_NONE) {
                    Some(p) => (p, 0),
                    None => std::alloc::handle_alloc_error(
                        std::alloc::Layout::from_size_align(SPACE_BYTES, 4096)
                            .expect("a page-aligned layout"),
                    ),
                },
            };
            RecordSpace {
                base: NonNull::new(p.cast::<Block>()).expect("mmap gave a non-null address"),
                len: 0,
                open,
            }
        }

        /// Records the slab has initialised.
        #[inline]
        pub(crate) fn len(&self) -> usize {
            self.len
        }

        /// Makes the space `len` records long (not shorter than it is), the new ones `fill`.
        pub(crate) fn grow(&mut self, len: usize, fill: Block) {
            assert!(
                len >= self.len && (len - 1) << STEP <= u32::MAX as usize,
                "a record space grows, and holds the records of u32 numbers"
            );
            let bytes = len * std::mem::size_of::<Block>();
            if bytes > self.open {
                // Opened by doublings (or to the end), so that growth opens pages rarely.
                let open = bytes.next_power_of_two().clamp(1 << 16, SPACE_BYTES);
                #[allow(unsafe_code, reason = "mprotect has no std wrapper")]
                // SAFETY: the range lies inside this space's own mapping.
                let r = unsafe {
                    libc::mprotect(
                        self.base.as_ptr().cast(),
                        open,
                        libc::PROT_READ | libc::PROT_WRITE,
                    )
                };
                if r != 0 {
                    std::alloc::handle_alloc_error(
                        std::alloc::Layout::from_size_align(open, 4096)
                            .expect("a page-aligned layout"),
                    );
                }
                self.open = open;
            }
            for k in self.len..len {
                #[allow(unsafe_code, reason = "writing the space's own records")]
                // SAFETY: record `k` lies in the open part of the mapping (above), which
                // nothing else references while `self` is borrowed mutably.
                unsafe {
                    self.base.as_ptr().add(k).write(fill);
                }
            }
            self.len = len;
        }

        /// A view to read and write records by number.
        #[inline(always)]
        pub(crate) fn view(&mut self) -> SpaceMut<'_> {
            SpaceMut::of(self.base, self.len)
        }

        /// A view to read records by number.
        #[inline(always)]
        pub(crate) fn shared(&self) -> SpaceRef<'_> {
            SpaceRef::of(self.base, self.len)
        }
    }

    impl Drop for RecordSpace {
        fn drop(&mut self) {
            #[allow(unsafe_code, reason = "munmap has no std wrapper")]
            // SAFETY: the mapping is this space's, and no view outlives `self`.
            unsafe {
                libc::munmap(self.base.as_ptr().cast(), SPACE_BYTES);
            }
        }
    }

    /// The address of the record numbered `n` in a slab of `len` records (checked in debug
    /// builds only).
    #[inline(always)]
    fn at(base: NonNull<Block>, len: usize, n: u32) -> *mut Block {
        debug_assert!(
            n & ((1 << STEP) - 1) == 0 && ((n >> STEP) as usize) < len,
            "{n:#x} names no record of a slab of {len}: a broken link"
        );
        let _ = len;
        reach(base, n)
    }

    /// The address of the record numbered `n`: inside the mapping for every `n`.
    #[inline(always)]
    fn reach(base: NonNull<Block>, n: u32) -> *mut Block {
        #[allow(unsafe_code, reason = "an offset inside the mapping")]
        // SAFETY: `n + 32 <= SPACE_BYTES` for every `u32` `n`, so the record stays inside the
        // mapping; a `Block` is aligned to one byte.
        unsafe {
            base.as_ptr().byte_add(n as usize)
        }
    }

    /// A space's records by number, readable and writable, for as long as it is borrowed.
    pub(crate) struct SpaceMut<'a> {
        base: NonNull<Block>,
        len: usize,
        _space: PhantomData<&'a mut RecordSpace>,
    }

    impl<'a> SpaceMut<'a> {
        /// The view of a slab of `len` records at `base`, for as long as it is borrowed.
        #[inline(always)]
        fn of(base: NonNull<Block>, len: usize) -> Self {
            SpaceMut {
                base,
                len,
                _space: PhantomData,
            }
        }

        /// The record numbered `n`.
        #[inline(always)]
        pub(crate) fn get(&self, n: u32) -> &Block {
            // Through a read-only view borrowed from `&self`, which keeps `get_mut` away for
            // the reference's life.
            self.shared().get(n)
        }

        /// The record numbered `n`, mutably.
        #[inline(always)]
        pub(crate) fn get_mut(&mut self, n: u32) -> &mut Block {
            self.reborrow().into_mut(n)
        }

        /// The record numbered `n`, mutably, for as long as the space is borrowed.
        #[inline(always)]
        pub(crate) fn into_mut(self, n: u32) -> &'a mut Block {
            #[allow(unsafe_code, reason = "every number names bytes of the mapping")]
            // SAFETY: as in `SpaceRef::get`; `self` gives up its borrow of the space, so no
            // other reference into it lives as long as this one.
            unsafe {
                &mut *at(self.base, self.len, n)
            }
        }

        /// The same view, borrowed for less long.
        #[inline(always)]
        pub(crate) fn reborrow(&mut self) -> SpaceMut<'_> {
            SpaceMut::of(self.base, self.len)
        }

        /// A read-only view of the same records.
        #[inline(always)]
        pub(crate) fn shared(&self) -> SpaceRef<'_> {
            SpaceRef::of(self.base, self.len)
        }
    }

    /// A space's records by number, read-only.
    #[derive(Clone, Copy)]
    pub(crate) struct SpaceRef<'a> {
        base: NonNull<Block>,
        len: usize,
        _space: PhantomData<&'a RecordSpace>,
    }

    impl<'a> SpaceRef<'a> {
        /// The read-only view of a slab of `len` records at `base`.
        #[inline(always)]
        fn of(base: NonNull<Block>, len: usize) -> Self {
            SpaceRef {
                base,
                len,
                _space: PhantomData,
            }
        }

        /// The record numbered `n`.
        #[inline(always)]
        pub(crate) fn get(self, n: u32) -> &'a Block {
            #[allow(unsafe_code, reason = "every number names bytes of the mapping")]
            // SAFETY: `at` is inside the mapping, which is readable there (on a fully open
            // mapping everywhere; else a number past the open part faults), every bit pattern
            // is a `Block`, and the view borrows the space shared for `'a`, so no `&mut` to a
            // record lives as long.
            unsafe {
                &*at(self.base, self.len, n)
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::super::super::block::SENTINEL;
        use super::*;

        fn sized(units: u32) -> Block {
            Block { units, ..SENTINEL }
        }

        /// Reads and writes record `n` where a view would, past its debug check.
        fn poke(space: &mut RecordSpace, n: u32, units: Option<u32>) -> u32 {
            let p = reach(space.base, n);
            #[allow(unsafe_code, reason = "the unchecked reach under test")]
            // SAFETY: `reach` is inside the open mapping (the space below is fully open) and
            // `space` is borrowed mutably, so nothing else refers to the record.
            unsafe {
                if let Some(units) = units {
                    (*p).units = units;
                }
                (*p).units
            }
        }

        #[test]
        fn every_u32_number_names_bytes_of_the_space_and_none_of_its_records() {
            let mut space = RecordSpace::new();
            assert_eq!(space.open, SPACE_BYTES, "mapped readable at once here");
            space.grow(16, sized(7));
            for far in [16 << STEP, 1 << 20, u32::MAX - 3, u32::MAX] {
                // Untouched pages read as zeros; a write lands there, not in the records.
                assert_eq!(poke(&mut space, far, None), 0, "{far:#x}");
                assert_eq!(poke(&mut space, far, Some(99)), 99, "{far:#x}");
            }
            let view = space.shared();
            assert!((0..16).all(|k| view.get(k << STEP).units == 7));
        }

        #[test]
        fn a_space_grows_in_place_whichever_way_it_was_mapped() {
            for open_first in [true, false] {
                let mut space = RecordSpace::mapped(open_first);
                space.grow(2, sized(1));
                let base = space.base;
                for len in [4, 3000, 70_000] {
                    let old = space.len();
                    space.grow(len, sized(len as u32));
                    let mut view = space.view();
                    assert_eq!({ view.get((old << STEP) as u32).units }, len as u32);
                    view.get_mut(((len - 1) << STEP) as u32).next_phys = 5;
                }
                assert_eq!(space.base, base, "records never move");
                assert!(space.open >= 70_000 * 32);
                let view = space.shared();
                assert_eq!(
                    (view.get(0).units, view.get(3 << STEP).units),
                    (1, 4),
                    "earlier records keep their contents"
                );
                assert_eq!({ view.get(69_999 << STEP).units }, 70_000);
                assert!([3, 2999, 69_999]
                    .iter()
                    .all(|k| view.get(k << STEP).next_phys == 5));
            }
        }

        #[test]
        #[should_panic(expected = "a record space grows")]
        fn a_space_never_shrinks() {
            let mut space = RecordSpace::new();
            space.grow(8, SENTINEL);
            space.grow(4, SENTINEL);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
mod portable {
    use super::super::block::{Block, STEP};
    use super::super::masked::Masked;

    /// The records in a vector of power-of-two length; every number is checked.
    #[derive(Debug, Default)]
    pub(crate) struct RecordSpace {
        records: Vec<Block>,
    }

    impl RecordSpace {
        pub(crate) fn new() -> Self {
            Self::default()
        }

        #[inline]
        pub(crate) fn len(&self) -> usize {
            self.records.len()
        }

        pub(crate) fn grow(&mut self, len: usize, fill: Block) {
            assert!(len.is_power_of_two() && len >= self.records.len());
            self.records.resize(len, fill);
        }

        #[inline(always)]
        pub(crate) fn view(&mut self) -> SpaceMut<'_> {
            #[allow(
                unsafe_code,
                reason = "the hot path's view skips a check the slab makes moot"
            )]
            // SAFETY: the slab grows the space to 16 records before any view and only by
            // doublings, so it is not empty and a power of two long.
            SpaceMut(unsafe { Masked::new_unchecked(&mut self.records) })
        }

        #[inline(always)]
        pub(crate) fn shared(&self) -> SpaceRef<'_> {
            SpaceRef(Masked::new(&self.records))
        }
    }

    pub(crate) struct SpaceMut<'a>(Masked<&'a mut [Block], STEP>);

    impl<'a> SpaceMut<'a> {
        #[inline(always)]
        pub(crate) fn get(&self, n: u32) -> &Block {
            self.0.get(n as usize)
        }

        #[inline(always)]
        pub(crate) fn get_mut(&mut self, n: u32) -> &mut Block {
            self.0.get_mut(n as usize)
        }

        #[inline(always)]
        pub(crate) fn into_mut(self, n: u32) -> &'a mut Block {
            self.0.into_mut(n as usize)
        }

        #[inline(always)]
        pub(crate) fn reborrow(&mut self) -> SpaceMut<'_> {
            SpaceMut(self.0.reborrow())
        }

        #[inline(always)]
        pub(crate) fn shared(&self) -> SpaceRef<'_> {
            SpaceRef(self.0.shared())
        }
    }

    #[derive(Clone, Copy)]
    pub(crate) struct SpaceRef<'a>(Masked<&'a [Block], STEP>);

    impl<'a> SpaceRef<'a> {
        #[inline(always)]
        pub(crate) fn get(self, n: u32) -> &'a Block {
            self.0.get(n as usize)
        }
    }
}
