//! The slow paths of [`CachingManagedAllocator`]: taking segments from the driver within the
//! [`ManagedLimit`], and giving them back (on out of memory, on `release`, and as
//! [`GiveBack`] says). Everything here calls the driver; the hot paths in `caching.rs` do not.

use crate::attribution::CallerScope;
use crate::driver::{DevicePtr, MemInfo, StreamId};
use crate::mr::cuda::driver_oom;
use crate::mr::detail::growth::chunk_size;
use crate::mr::{Growth, MrError};
use crate::unified::cache_state::{CacheState, PoolKey};
use crate::unified::caching::{too_large, CachingManagedAllocator, NAME};
use crate::unified::error::UnifiedError;
use crate::unified::hints::Placement;
use crate::unified::options::{GiveBack, ManagedLimit};

impl CachingManagedAllocator {
    /// Nothing in `stream`'s lists fits: take another stream's blocks, or a new segment.
    /// Returns the block and whether it was used before (not from a new segment).
    #[cold]
    #[inline(never)]
    pub(super) fn allocate_slow(
        &self,
        st: &mut CacheState,
        key: PoolKey,
        size: u64,
        requested: u64,
        stream: StreamId,
    ) -> Result<(DevicePtr, bool), UnifiedError> {
        let pi = st.pool(key);
        // The fast path finds no block also when the block slab cannot grow: then nothing
        // below can record one either, and the host's refusal is the answer.
        st.pools[pi]
            .heap
            .reserve_records(2)
            .map_err(|full| MrError::records_full(NAME, requested, full))?;
        let slot = st.pools[pi].heap.slot(stream);
        if let Some(other) = st.pools[pi].heap.find_elsewhere(slot, size) {
            let source = st.pools[pi].heap.stream_of(other);
            {
                let _scope = CallerScope::enter(NAME);
                st.order.order(&*self.driver, source, stream)?;
            }
            st.stats.stream_orderings += 1;
            st.pools[pi].heap.adopt(slot, other);
            if let Some(p) = st.pools[pi].heap.allocate(slot, size, requested) {
                st.stats.cache_hits += 1;
                return Ok((DevicePtr(p), true));
            }
        }
        let growth = if key.small {
            Growth::Fixed {
                bytes: self.options.small_segment,
            }
        } else if size >= self.options.min_large_alloc {
            Growth::Exact
        } else {
            Growth::Fixed {
                bytes: self.options.large_segment,
            }
        };
        let segment = chunk_size(growth, size, 0).ok_or_else(|| too_large(requested))?;
        if self.options.give_back == GiveBack::Displaced && self.oversubscribes(st, segment) {
            // Free segments beside a new one would only be evicted and migrated back.
            if let Err(e) = self.give_back(st, None) {
                st.record(e);
            }
        }
        let (base, segment) = match self.new_segment(st, segment, requested, key) {
            Ok(base) => (base, segment),
            Err(e) if e.is_out_of_memory() => {
                // PyTorch's answer: give back every cached segment, then try exactly the request.
                let _ = self.release_all_free(st);
                let exact =
                    chunk_size(Growth::Exact, size, 0).ok_or_else(|| too_large(requested))?;
                (self.new_segment(st, exact, requested, key)?, exact)
            }
            Err(e) => return Err(e),
        };
        let heap = &mut st.pools[pi].heap;
        let slot = heap.slot(stream);
        if let Err(full) = heap.add_chunk(slot, base, segment) {
            // Reserved above, under the same lock: not reached; the segment goes back whole.
            let _ = self.driver.mem_free(DevicePtr(base));
            return Err(MrError::records_full(NAME, requested, full).into());
        }
        let p = heap
            .allocate(slot, size, requested)
            .ok_or_else(|| too_large(requested))?;
        st.stats.cache_misses += 1;
        st.stats.peak_held_bytes = st.stats.peak_held_bytes.max(st.held());
        Ok((DevicePtr(p), false))
    }

    /// Takes a segment of `segment` bytes from the driver, within the limit, with `key`'s
    /// advice; on a failed advice gives it back (nothing is held on an error).
    fn new_segment(
        &self,
        st: &mut CacheState,
        segment: u64,
        requested: u64,
        key: PoolKey,
    ) -> Result<u64, UnifiedError> {
        let _scope = CallerScope::enter(NAME);
        self.check_limit(st, segment, requested)?;
        let n = usize::try_from(segment).map_err(|_| too_large(requested))?;
        let ptr = self
            .driver
            .mem_alloc_managed(n, key.attach_global)
            .map_err(|e| driver_oom(&*self.driver, NAME, requested as usize, e))?;
        match Placement::advise(&*self.driver, ptr, n, Placement::Unadvised, key.placement) {
            Ok(calls) => st.stats.advise_calls += u64::from(calls),
            Err(e) => {
                // The advice's failure is what the caller needs to see; the free's would hide it.
                let _ = self.driver.mem_free(ptr);
                return Err(e.into());
            }
        }
        st.stats.segments_allocated += 1;
        Ok(ptr.0)
    }

    /// Refuses a segment the [`ManagedLimit`] does not allow: it must fit in the fraction of
    /// free device memory, and all held must stay within the fraction of total memory.
    fn check_limit(
        &self,
        st: &CacheState,
        segment: u64,
        requested: u64,
    ) -> Result<(), UnifiedError> {
        let ManagedLimit::FractionOfFree(fraction) = self.options.limit else {
            return Ok(());
        };
        let MemInfo { free, total } = self.driver.mem_get_info()?;
        let held = st.held();
        let fits = segment as f64 <= fraction * free as f64
            && held.saturating_add(segment) as f64 <= fraction * total as f64;
        if fits {
            return Ok(());
        }
        Err(UnifiedError::LimitExceeded {
            requested,
            segment,
            held,
            free,
            total,
            fraction,
        })
    }

    pub(super) fn release_all_free(&self, st: &mut CacheState) -> Result<u64, UnifiedError> {
        if st.pools.iter().any(|p| p.heap.slots_with_free_blocks() > 1) {
            let _scope = CallerScope::enter(NAME);
            self.driver.context_synchronize()?;
            for p in &mut st.pools {
                let slot = p.heap.slot(StreamId::DEFAULT);
                p.heap.unify(slot);
            }
        }
        self.give_back(st, None)
    }

    /// Gives wholly free segments back to the driver: the one of pool `only.0` holding
    /// `only.1`, or all. Returns the bytes given.
    pub(super) fn give_back(
        &self,
        st: &mut CacheState,
        only: Option<(usize, u64)>,
    ) -> Result<u64, UnifiedError> {
        let segments = match only {
            Some((pi, addr)) => st.pools[pi]
                .heap
                .take_free_chunk(addr)
                .map(|(c, _)| c)
                .into_iter()
                .collect(),
            None => st.take_free_segments(),
        };
        let _scope = CallerScope::enter(NAME);
        let mut first_err = None;
        let mut released = 0;
        for chunk in segments {
            // cuMemFree synchronizes the device: every stream's work on it is done first.
            match self.driver.mem_free(DevicePtr(chunk.base)) {
                Ok(()) => {
                    released += chunk.size;
                    st.stats.segments_freed += 1;
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(released), |e| Err(e.into()))
    }

    /// Whether taking `segment` more bytes would hold more than the device has (reads the
    /// device's memory once).
    fn oversubscribes(&self, st: &mut CacheState, segment: u64) -> bool {
        if st.device_total.is_none() {
            st.device_total = self
                .driver
                .device_properties(self.device)
                .ok()
                .map(|p| p.total_memory);
        }
        st.oversubscribed_with(segment)
    }
}
