//! [`Masked`]: a non-empty slice indexed by `i & (len - 1)`, never out of bounds, so never
//! checked.
//!
//! The pool's block slab has a power-of-two length, where the mask changes no index it holds;
//! masking then costs one `and` where a bounds check cost a compare, a branch and, around it,
//! reloads of the slab's base and length (about a tenth of the pool's instructions on W3 by
//! callgrind). The `unsafe` is local: an index masked with the length minus one of a slice
//! that is not empty is below the length, whatever it was.

/// A non-empty slice (`&[T]` or `&mut [T]`) with its length minus one.
#[derive(Clone, Copy)]
pub(crate) struct Masked<S> {
    slice: S,
    /// The slice's length minus one; set with the slice, never changed.
    mask: usize,
}

impl<'a, T> Masked<&'a [T]> {
    /// `slice`.
    ///
    /// # Panics
    ///
    /// When `slice` is empty.
    #[inline]
    pub(crate) fn new(slice: &'a [T]) -> Self {
        // An empty slice would give a mask of `usize::MAX`: refused, as `get` relies on it.
        let mask = slice
            .len()
            .checked_sub(1)
            .expect("a masked slice is not empty");
        Masked { slice, mask }
    }

    /// The element at `i & mask`.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> &'a T {
        let k = i & self.mask;
        #[allow(unsafe_code, reason = "a masked index is in bounds by construction")]
        // SAFETY: `mask` is the length minus one of a slice that is not empty (`new`,
        // `new_unchecked`, `shared`), and `k <= mask`.
        unsafe {
            self.slice.get_unchecked(k)
        }
    }
}

impl<'a, T> Masked<&'a mut [T]> {
    /// `slice`, with no check that it is not empty (two instructions an operation on the
    /// pool's hot path, where the slab always holds its sentinel).
    ///
    /// # Safety
    ///
    /// `slice` must not be empty: its mask would be `usize::MAX`, and `get` would read past it.
    #[inline(always)]
    #[allow(unsafe_code, reason = "its callers vouch that the slice is not empty")]
    pub(crate) unsafe fn new_unchecked(slice: &'a mut [T]) -> Self {
        debug_assert!(!slice.is_empty());
        let mask = slice.len().wrapping_sub(1);
        Masked { slice, mask }
    }

    /// The element at `i & mask`.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> &T {
        self.shared().get(i)
    }

    /// The element at `i & mask`, mutably.
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, i: usize) -> &mut T {
        let k = i & self.mask;
        #[allow(unsafe_code, reason = "a masked index is in bounds by construction")]
        // SAFETY: as in `get`.
        unsafe {
            self.slice.get_unchecked_mut(k)
        }
    }

    /// A shared view of the same slice.
    #[inline(always)]
    pub(crate) fn shared(&self) -> Masked<&[T]> {
        Masked {
            slice: &*self.slice,
            mask: self.mask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Masked;

    #[test]
    fn an_index_wraps_into_the_slice() {
        let mut v = [10, 11, 12, 13];
        let m = Masked::<&[i32]>::new(&v);
        assert_eq!((*m.get(1), *m.get(5), *m.get(usize::MAX)), (11, 11, 13));
        // SAFETY: not empty.
        #[allow(unsafe_code, reason = "the unchecked constructor under test")]
        let mut m = unsafe { Masked::<&mut [i32]>::new_unchecked(&mut v) };
        *m.get_mut(6) = 7;
        assert_eq!(*m.get(2), 7);
        assert_eq!(v, [10, 11, 7, 13]);
    }

    #[test]
    #[should_panic(expected = "a masked slice is not empty")]
    fn an_empty_slice_is_refused() {
        let _ = Masked::<&[i32]>::new(&[]);
    }
}
