//! [`MaskCheckedSlice`]: a non-empty slice of power-of-two length indexed by numbers checked
//! against a mask, with no bounds check of the usual form.
//!
//! The pool's block slab has a power-of-two length, so the numbers that name its elements are
//! exactly those with no bit outside one mask. A number is checked with one `test` against it
//! and a branch to a panic that a sound heap never takes; the load's address is the number
//! itself. Rust's bounds check cost a compare, a branch and, around it, reloads of the slab's
//! base and length (about a tenth of the pool's instructions on W3 by callgrind); masking the
//! number instead (`n & mask`) cost one instruction but put it between every
//! two dependent loads of a list walk, a cycle each: the check, off the address's path, ran
//! the pool 1–3 % faster on H100 and H200 hosts for 9 more instructions an operation.
//! The `unsafe` is local: a number that passes the
//! check names an element of a slice that is not empty.
//!
//! Element `k` is numbered `k << STEP`, so that its byte offset is the number times
//! `size_of::<T>() >> STEP` (1, 2, 4 or 8), which x86-64 folds into the load's address, where
//! an index would need a shift first (one instruction a record touched, some twenty an
//! operation on the pool's hot path). The block slab keeps its records here where it has no
//! [`super::record_space`] of its own (elsewhere than Linux), numbered by byte offset.

use std::mem::size_of;

/// A non-empty slice (`&[T]` or `&mut [T]`) of power-of-two length, with its mask.
#[derive(Clone, Copy)]
pub(crate) struct MaskCheckedSlice<S, const STEP: u32> {
    slice: S,
    /// The slice's length minus one, shifted left by `STEP`; set with the slice, never
    /// changed.
    mask: usize,
}

/// The byte offset of the element a masked number names.
#[inline(always)]
const fn offset<T, const STEP: u32>(masked: usize) -> usize {
    // `mask_checked_slice`'s low `STEP` bits are clear, so this is the element's index times its size.
    masked * (size_of::<T>() >> STEP)
}

/// Whether `T` and `STEP` fit: the element's size a multiple of `1 << STEP`.
const fn fits<T, const STEP: u32>() -> bool {
    size_of::<T>().is_multiple_of(1 << STEP) && size_of::<T>() >= (1 << STEP)
}

/// A number that names no element: a broken link, which is a bug of the heap.
#[cold]
#[inline(never)]
fn not_an_element(n: usize, mask: usize) -> ! {
    panic!("{n:#x} names no element of a slab numbered up to {mask:#x}: a broken link")
}

impl<'a, T, const STEP: u32> MaskCheckedSlice<&'a [T], STEP> {
    /// `slice`.
    ///
    /// # Panics
    ///
    /// When `slice` is empty or its length not a power of two.
    #[inline]
    pub(crate) fn new(slice: &'a [T]) -> Self {
        const { assert!(fits::<T, STEP>()) };
        // An empty slice would give a mask of all ones: refused, as `get` relies on it.
        assert!(
            slice.len().is_power_of_two(),
            "a masked slice is not empty and a power of two long"
        );
        MaskCheckedSlice {
            slice,
            mask: (slice.len() - 1) << STEP,
        }
    }

    /// The element numbered `n`.
    ///
    /// # Panics
    ///
    /// When `n` names no element (a broken link).
    #[inline(always)]
    pub(crate) fn get(&self, n: usize) -> &'a T {
        let k = self.check(n);
        #[allow(unsafe_code, reason = "a checked number names an element")]
        // SAFETY: `check` passed, so `k >> STEP <= len - 1` and `k`'s low `STEP` bits are
        // clear: the offset is that of element `k >> STEP`.
        unsafe {
            &*self.slice.as_ptr().byte_add(offset::<T, STEP>(k))
        }
    }

    /// `n`, when it names an element: no bit outside `mask`. `mask` is `(len - 1) << STEP` for
    /// a slice that is not empty and a power of two long (`new`, `new_unchecked`, `shared`),
    /// so its ones are exactly the bits an element's number may have.
    #[inline(always)]
    fn check(&self, n: usize) -> usize {
        if n & !self.mask != 0 {
            not_an_element(n, self.mask);
        }
        n
    }
}

impl<'a, T, const STEP: u32> MaskCheckedSlice<&'a mut [T], STEP> {
    /// `slice`, with no check (two instructions an operation on the pool's hot path, where
    /// the slab always holds its sentinel and doubles when it grows).
    ///
    /// # Safety
    ///
    /// `slice` must not be empty and its length must be a power of two: else `get` would read
    /// past it.
    #[inline(always)]
    #[allow(unsafe_code, reason = "its callers vouch for the slice's length")]
    pub(crate) unsafe fn new_unchecked(slice: &'a mut [T]) -> Self {
        const { assert!(fits::<T, STEP>()) };
        debug_assert!(slice.len().is_power_of_two());
        let mask = slice.len().wrapping_sub(1) << STEP;
        MaskCheckedSlice { slice, mask }
    }

    /// The element numbered `n` (panics as [`MaskCheckedSlice::get`] does).
    #[inline(always)]
    pub(crate) fn get(&self, n: usize) -> &T {
        self.shared().get(n)
    }

    /// The element numbered `n`, mutably (panics as [`MaskCheckedSlice::get`] does).
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, n: usize) -> &mut T {
        self.reborrow().into_mut(n)
    }

    /// The element numbered `n`, mutably, for as long as the slice is borrowed (panics as
    /// [`MaskCheckedSlice::get`] does).
    #[inline(always)]
    pub(crate) fn into_mut(self, n: usize) -> &'a mut T {
        let k = self.shared().check(n);
        #[allow(unsafe_code, reason = "a checked number names an element")]
        // SAFETY: as in `get`; `self` gives up its borrow of the slice.
        unsafe {
            &mut *self.slice.as_mut_ptr().byte_add(offset::<T, STEP>(k))
        }
    }

    /// The same slice, borrowed for less long.
    #[inline(always)]
    pub(crate) fn reborrow(&mut self) -> MaskCheckedSlice<&mut [T], STEP> {
        MaskCheckedSlice {
            slice: &mut *self.slice,
            mask: self.mask,
        }
    }

    /// A shared view of the same slice.
    #[inline(always)]
    pub(crate) fn shared(&self) -> MaskCheckedSlice<&[T], STEP> {
        MaskCheckedSlice {
            slice: &*self.slice,
            mask: self.mask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MaskCheckedSlice;

    #[test]
    fn a_number_names_its_element() {
        let mut v = [10, 11, 12, 13];
        let m = MaskCheckedSlice::<&[i32], 0>::new(&v);
        assert_eq!((*m.get(0), *m.get(1), *m.get(3)), (10, 11, 13));
        // SAFETY: not empty, a power of two long.
        #[allow(unsafe_code, reason = "the unchecked constructor under test")]
        let mut m = unsafe { MaskCheckedSlice::<&mut [i32], 0>::new_unchecked(&mut v) };
        *m.get_mut(2) = 7;
        assert_eq!(*m.get(2), 7);
        assert_eq!(v, [10, 11, 7, 13]);
    }

    #[test]
    fn a_stepped_number_names_its_element() {
        let v = [[1u64, 2], [3, 4], [5, 6], [7, 8]];
        let m = MaskCheckedSlice::<&[[u64; 2]], 2>::new(&v);
        // Element k is numbered 4k.
        assert_eq!(
            (m.get(0), m.get(4), m.get(8), m.get(12)),
            (&[1, 2], &[3, 4], &[5, 6], &[7, 8])
        );
    }

    #[test]
    #[should_panic(expected = "0x10 names no element of a slab numbered up to 0xc")]
    fn a_number_past_the_slice_is_refused() {
        let v = [[1u64, 2], [3, 4], [5, 6], [7, 8]];
        let _ = MaskCheckedSlice::<&[[u64; 2]], 2>::new(&v).get(16);
    }

    #[test]
    #[should_panic(expected = "0x5 names no element")]
    fn a_number_between_elements_is_refused() {
        let v = [[1u64, 2], [3, 4], [5, 6], [7, 8]];
        let _ = MaskCheckedSlice::<&[[u64; 2]], 2>::new(&v).get(5);
    }

    #[test]
    #[should_panic(expected = "names no element")]
    fn a_number_past_a_mutable_slice_is_refused() {
        let mut v = [10, 11, 12, 13];
        // SAFETY: not empty, a power of two long.
        #[allow(unsafe_code, reason = "the unchecked constructor under test")]
        let mut m = unsafe { MaskCheckedSlice::<&mut [i32], 0>::new_unchecked(&mut v) };
        *m.get_mut(usize::MAX) = 1;
    }

    #[test]
    #[should_panic(expected = "a masked slice is not empty and a power of two long")]
    fn an_empty_slice_is_refused() {
        let _ = MaskCheckedSlice::<&[i32], 0>::new(&[]);
    }

    #[test]
    #[should_panic(expected = "a masked slice is not empty and a power of two long")]
    fn a_slice_of_other_length_is_refused() {
        let _ = MaskCheckedSlice::<&[i32], 0>::new(&[1, 2, 3]);
    }
}
