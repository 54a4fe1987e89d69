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
//! faster on W1 / W2 / W3 on an H100 host.
//! Debug builds still check every number against the records in use.
//!
//! The cost is address space: 4 GiB a heap, none of it memory until written. A process that
//! limits its address space (`RLIMIT_AS`, `ulimit -v`) cannot lend that to every heap — a
//! `MAP_NORESERVE` or inaccessible mapping still counts against the limit, and sixteen heaps
//! would ask for 64 GiB — so there the records lie in a mapping fitted to the slab (a power of
//! two, 64 KiB at first), which `mremap` doubles as the slab grows (moving it if it must: no
//! view lives across a growth). The views are the same code; what is lost is the guarantee for
//! a broken link, which can then read past the slab (debug builds check every number). A heap
//! then takes address space in proportion to its blocks, as any other host structure does.
//!
//! Where the kernel will not map 4 GiB unreserved (strict overcommit accounting), the space is
//! mapped inaccessible and opened as the slab grows: a number past the slab then faults
//! instead of reading zeros. Elsewhere than 64-bit Linux the records are a vector of
//! power-of-two length and every number is checked ([`super::mask_checked_slice`]).

use super::record::{Block, STEP};

const _: () =
    assert!(std::mem::size_of::<Block>() == 32 && std::mem::align_of::<Block>() == 1 && STEP == 5);

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
pub(crate) use linux::{RecordSpace, SpaceMut, SpaceRef};

/// A record space could not grow: the host would not give it `bytes` bytes of records (an
/// address-space limit, strict overcommit accounting, or no memory). The space is as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpaceFull {
    /// The bytes of records it asked for, all together.
    pub(crate) bytes: usize,
}
#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
pub(crate) use portable::{RecordSpace, SpaceMut, SpaceRef};

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
mod linux {
    use std::marker::PhantomData;
    use std::ptr::NonNull;

    use super::super::record::{Block, STEP};
    use super::SpaceFull;

    /// Bytes from the first record to the end of the one numbered `u32::MAX`, rounded up to
    /// a page (pages are at most 64 KiB).
    const SPACE_BYTES: usize = ((u32::MAX as usize) + 32 + 0xffff) & !0xffff;

    /// The first mapping of a space fitted to its slab (a power of two, and a page of any
    /// size).
    const FITTED_FIRST_BYTES: usize = 1 << 16;

    /// How a space is mapped.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Mapping {
        /// [`SPACE_BYTES`] readable and writable: every `u32` number names bytes of it.
        Whole,
        /// [`SPACE_BYTES`] reserved inaccessible, opened from the start as the slab grows.
        Guarded,
        /// Only the open bytes are mapped, and growth remaps them (perhaps elsewhere).
        Fitted,
    }

    /// The records of a slab, in one mapping: of [`SPACE_BYTES`] where the address space is
    /// not limited, else fitted to the slab; the first `len` records are the slab's.
    pub(crate) struct RecordSpace {
        base: NonNull<Block>,
        /// Records the slab has initialised.
        len: usize,
        /// Bytes open to reads and writes from the start: all of them, or, where the mapping
        /// is guarded or fitted, those opened so far.
        open: usize,
        mapping: Mapping,
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
        /// An empty space: the whole mapping where the process's address space is not
        /// limited, else one fitted to the slab.
        ///
        /// Aborts as a failed allocation does only where not even 64 KiB of address space is
        /// left.
        pub(crate) fn new() -> Self {
            if address_space_limited() {
                Self::fitted()
            } else {
                Self::mapped(true)
            }
        }

        /// [`RecordSpace::new`], trying the mapping readable first if `open_first`, else
        /// mapping it inaccessible at once (as on a host with strict overcommit accounting);
        /// fitted where neither can be had.
        fn mapped(open_first: bool) -> Self {
            let open_map = open_first
                .then(|| map(SPACE_BYTES, libc::PROT_READ | libc::PROT_WRITE))
                .flatten();
            let (p, open, mapping) = match open_map {
                Some(p) => (p, SPACE_BYTES, Mapping::Whole),
                None => match map(SPACE_BYTES, libc::PROT_NONE) {
                    Some(p) => (p, 0, Mapping::Guarded),
                    None => return Self::fitted(),
                },
            };
            Self::at(p, open, mapping)
        }

        /// An empty space fitted to its slab.
        fn fitted() -> Self {
            match map(FITTED_FIRST_BYTES, libc::PROT_READ | libc::PROT_WRITE) {
                Some(p) => Self::at(p, FITTED_FIRST_BYTES, Mapping::Fitted),
                None => out_of_address_space(FITTED_FIRST_BYTES),
            }
        }

        fn at(p: *mut libc::c_void, open: usize, mapping: Mapping) -> Self {
            RecordSpace {
                base: NonNull::new(p.cast::<Block>()).expect("mmap gave a non-null address"),
                len: 0,
                open,
                mapping,
            }
        }

        /// Bytes of address space the mapping takes.
        fn mapped_bytes(&self) -> usize {
            match self.mapping {
                Mapping::Whole | Mapping::Guarded => SPACE_BYTES,
                Mapping::Fitted => self.open,
            }
        }

        /// Records the slab has initialised.
        #[inline]
        pub(crate) fn len(&self) -> usize {
            self.len
        }

        /// Makes the space `len` records long (not shorter than it is), the new ones `fill`.
        ///
        /// # Errors
        ///
        /// [`SpaceFull`] when the kernel will not open or map the bytes (an address-space
        /// limit, strict overcommit accounting): the space is as it was.
        pub(crate) fn grow(&mut self, len: usize, fill: Block) -> Result<(), SpaceFull> {
            assert!(
                len >= self.len && (len - 1) << STEP <= u32::MAX as usize,
                "a record space grows, and holds the records of u32 numbers"
            );
            let bytes = len * std::mem::size_of::<Block>();
            if bytes > self.open {
                // Opened by doublings (or to the end), so that growth opens pages rarely.
                let open = bytes.next_power_of_two().clamp(1 << 16, SPACE_BYTES);
                match self.mapping {
                    Mapping::Whole => unreachable!("a whole mapping is open to its end"),
                    Mapping::Guarded => self.open_guarded(open)?,
                    Mapping::Fitted => self.remap_fitted(open)?,
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
            Ok(())
        }

        /// Opens the first `open` bytes of a guarded mapping.
        #[cold]
        fn open_guarded(&mut self, open: usize) -> Result<(), SpaceFull> {
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
                return Err(SpaceFull { bytes: open });
            }
            Ok(())
        }

        /// Remaps a fitted mapping to `open` bytes, where the kernel finds room for them.
        #[cold]
        fn remap_fitted(&mut self, open: usize) -> Result<(), SpaceFull> {
            #[allow(unsafe_code, reason = "mremap has no std wrapper")]
            // SAFETY: the space owns the `self.open` bytes at `base`; `&mut self` means no view
            // or record reference lives, so the records may move.
            let p = unsafe {
                libc::mremap(
                    self.base.as_ptr().cast(),
                    self.open,
                    open,
                    libc::MREMAP_MAYMOVE,
                )
            };
            if p == libc::MAP_FAILED {
                // The old mapping is untouched: the space is as it was.
                return Err(SpaceFull { bytes: open });
            }
            self.base = NonNull::new(p.cast::<Block>()).expect("mremap gave a non-null address");
            Ok(())
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
                libc::munmap(self.base.as_ptr().cast(), self.mapped_bytes());
            }
        }
    }

    /// A fresh private anonymous mapping of `bytes` with protection `prot`, unreserved.
    fn map(bytes: usize, prot: libc::c_int) -> Option<*mut libc::c_void> {
        #[allow(unsafe_code, reason = "mmap has no std wrapper")]
        // SAFETY: a fresh anonymous mapping, placed by the kernel, aliases nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        (p != libc::MAP_FAILED).then_some(p)
    }

    /// Whether the process limits its address space (`RLIMIT_AS`): every heap's 4 GiB would
    /// then come out of what the rest of the process may map.
    fn address_space_limited() -> bool {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        #[allow(unsafe_code, reason = "getrlimit has no std wrapper")]
        // SAFETY: `limit` is a valid `rlimit` to write.
        let r = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
        r == 0 && limit.rlim_cur != libc::RLIM_INFINITY
    }

    /// Fails as a host allocation of `bytes` does when no address space is left for it.
    #[cold]
    fn out_of_address_space(bytes: usize) -> ! {
        std::alloc::handle_alloc_error(
            std::alloc::Layout::from_size_align(bytes, 4096).expect("a page-aligned layout"),
        )
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

    /// The address of the record numbered `n`: inside a whole or guarded mapping for every
    /// `n`; inside a fitted one for the numbers of its slab's records, which are the only ones
    /// a sound heap holds (debug builds check them in `at`).
    #[inline(always)]
    fn reach(base: NonNull<Block>, n: u32) -> *mut Block {
        #[allow(unsafe_code, reason = "an offset inside the mapping")]
        // SAFETY: `n + 32 <= SPACE_BYTES` for every `u32` `n`, so the record stays inside a
        // whole or guarded mapping; a fitted one holds every record of the slab; a `Block` is
        // aligned to one byte.
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
            // SAFETY: `at` is inside the mapping (see `reach`), which is readable there (on a
            // whole mapping everywhere; on a guarded one a number past the open part faults;
            // a fitted one is open to its end), every bit pattern
            // is a `Block`, and the view borrows the space shared for `'a`, so no `&mut` to a
            // record lives as long.
            unsafe {
                &*at(self.base, self.len, n)
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::super::super::record::SENTINEL;
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
            let mut space = RecordSpace::mapped(true);
            assert_eq!(space.open, SPACE_BYTES, "mapped readable at once here");
            space.grow(16, sized(7)).unwrap();
            for far in [16 << STEP, 1 << 20, u32::MAX - 3, u32::MAX] {
                // Untouched pages read as zeros; a write lands there, not in the records.
                assert_eq!(poke(&mut space, far, None), 0, "{far:#x}");
                assert_eq!(poke(&mut space, far, Some(99)), 99, "{far:#x}");
            }
            let view = space.shared();
            assert!((0..16).all(|k| view.get(k << STEP).units == 7));
        }

        #[test]
        fn a_whole_or_guarded_space_grows_in_place() {
            for open_first in [true, false] {
                let mut space = RecordSpace::mapped(open_first);
                space.grow(2, sized(1)).unwrap();
                let base = space.base;
                for len in [4, 3000, 70_000] {
                    let old = space.len();
                    space.grow(len, sized(len as u32)).unwrap();
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
        fn a_fitted_space_takes_what_its_slab_uses_and_keeps_its_records_as_it_grows() {
            let mut space = RecordSpace::fitted();
            assert_eq!(space.mapping, Mapping::Fitted);
            assert_eq!(space.mapped_bytes(), FITTED_FIRST_BYTES);
            space.grow(2, sized(1)).unwrap();
            for len in [2048, 2049, 70_000, 1 << 20] {
                let old = space.len();
                space.grow(len, sized(len as u32)).unwrap();
                assert!(space.mapped_bytes() >= len * 32);
                assert!(
                    space.mapped_bytes() <= (len * 32).next_power_of_two().max(1 << 16),
                    "{} bytes mapped for {len} records",
                    space.mapped_bytes()
                );
                let mut view = space.view();
                assert_eq!({ view.get((old << STEP) as u32).units }, len as u32);
                view.get_mut(((len - 1) << STEP) as u32).next_phys = 5;
            }
            let view = space.shared();
            assert_eq!((view.get(0).units, view.get(1 << STEP).units), (1, 1));
            assert_eq!({ view.get(2047 << STEP).units }, 2048);
            assert_eq!({ view.get(69_999 << STEP).units }, 70_000);
            assert!([2047, 2048, 69_999, (1 << 20) - 1]
                .iter()
                .all(|k| view.get(k << STEP).next_phys == 5));
        }

        #[test]
        #[should_panic(expected = "a record space grows")]
        fn a_space_never_shrinks() {
            let mut space = RecordSpace::new();
            space.grow(8, SENTINEL).unwrap();
            let _ = space.grow(4, SENTINEL);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
mod portable {
    use super::super::mask_checked_slice::MaskCheckedSlice;
    use super::super::record::{Block, STEP};

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

        pub(crate) fn grow(&mut self, len: usize, fill: Block) -> Result<(), super::SpaceFull> {
            assert!(len.is_power_of_two() && len >= self.records.len());
            let more = len - self.records.len();
            self.records
                .try_reserve_exact(more)
                .map_err(|_| super::SpaceFull {
                    bytes: len * std::mem::size_of::<Block>(),
                })?;
            self.records.resize(len, fill);
            Ok(())
        }

        #[inline(always)]
        pub(crate) fn view(&mut self) -> SpaceMut<'_> {
            #[allow(
                unsafe_code,
                reason = "the hot path's view skips a check the slab makes moot"
            )]
            // SAFETY: the slab grows the space to 16 records before any view and only by
            // doublings, so it is not empty and a power of two long.
            SpaceMut(unsafe { MaskCheckedSlice::new_unchecked(&mut self.records) })
        }

        #[inline(always)]
        pub(crate) fn shared(&self) -> SpaceRef<'_> {
            SpaceRef(MaskCheckedSlice::new(&self.records))
        }
    }

    pub(crate) struct SpaceMut<'a>(MaskCheckedSlice<&'a mut [Block], STEP>);

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
    pub(crate) struct SpaceRef<'a>(MaskCheckedSlice<&'a [Block], STEP>);

    impl<'a> SpaceRef<'a> {
        #[inline(always)]
        pub(crate) fn get(self, n: u32) -> &'a Block {
            self.0.get(n as usize)
        }
    }
}
