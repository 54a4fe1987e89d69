//! [`CachingManagedAllocator`]: the RFC's caching allocator of managed memory.
//!
//! - **What it does**: takes managed segments from the driver (`cuMemAllocManaged`) and carves
//!   them into blocks with the pool's coalescing TLSF heap. A block freed goes back to the
//!   cache, never to the driver: `cuMemFree` synchronizes the whole device, and the RFC's
//!   point is to keep it off the hot path. Segments are kept apart by [`Placement`] (and by
//!   `attach_global`), and each segment gets its placement's advice once, when it is taken, so
//!   a block inherits the RFC's hints without a `cuMemAdvise` per allocation; a block whose
//!   advice a move changed gets its pool's advice back when it is freed
//!   ([`CachingManagedAllocator::free_advised`]). Requests are rounded as
//!   [`CachingManagedOptions`] says (512 bytes by default) and served from small segments
//!   (2 MiB) up to 1 MiB, from large segments (20 MiB) above, and from a segment of their own
//!   size at 10 MiB and more. When the driver (or the [`ManagedLimit`]) refuses a segment, the
//!   allocator gives back every wholly free segment and tries once more with exactly the
//!   request, as PyTorch's allocator does.
//! - **Thread safety**: `Send + Sync`. One mutex guards the pools; a cache hit makes no driver
//!   call under it.
//! - **Streams**: the pool's rules. Each stream has its own free lists in each pool: memory
//!   freed on stream A is reused on A at once, and on B only after the allocator records an
//!   event on A and makes B wait on it (lazily, when B takes A's blocks).
//! - **Clone and ownership**: not `Clone`; share it through an `Arc` (every `ManagedBuffer`
//!   and every pointer of a `UnifiedManager` holds one, so the allocator outlives its memory).
//!   Dropping it gives every segment back to the driver.
//! - **Use and cost**: the allocator behind unified memory (`set_enabled_unified_memory`) and
//!   `ManagedBuffer`. A hit is a lock, a TLSF search and a map insert, with no driver call and
//!   no host allocation; a free is a lock, a map removal and at most two merges. A miss costs
//!   a `cuMemAllocManaged` (≈ 5–33 µs on an H100), one or two `cuMemAdvise` (2.6 µs each)
//!   and, with a [`ManagedLimit::FractionOfFree`], a `cuMemGetInfo` (7.5 µs).

use std::sync::{Arc, Mutex, MutexGuard};

use crate::attribution::CallerScope;
use crate::driver::{DeviceId, DevicePtr, Driver, MemInfo, StreamId};
use crate::mr::cuda::driver_oom;
use crate::mr::detail::growth::chunk_size;
use crate::mr::detail::heap::{CoalescingHeap, FreeError};
use crate::mr::detail::stream_order::StreamOrder;
use crate::mr::{assert_resource, DeviceMemoryResource, Growth, MrError, MrResult};
use crate::unified::error::UnifiedError;
use crate::unified::hints::Placement;
use crate::unified::options::{CachingManagedOptions, ManagedLimit};
use crate::unified::stats::CachingStats;

const NAME: &str = "CachingManagedAllocator";
/// Failures of frees that had no caller to report to, kept until `take_failures`.
const FAILURES_KEPT: usize = 16;

/// Which segments a block comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PoolKey {
    placement: Placement,
    attach_global: bool,
    small: bool,
}

#[derive(Debug)]
struct Pool {
    key: PoolKey,
    heap: CoalescingHeap,
}

/// What the mutex guards.
#[derive(Debug, Default)]
struct State {
    pools: Vec<Pool>,
    order: StreamOrder,
    stats: CachingStats,
    failures: Vec<UnifiedError>,
}

impl State {
    #[inline]
    fn pool_of(&self, key: PoolKey) -> Option<usize> {
        self.pools.iter().position(|p| p.key == key)
    }

    fn pool(&mut self, key: PoolKey) -> usize {
        self.pool_of(key).unwrap_or_else(|| {
            self.pools.push(Pool {
                key,
                heap: CoalescingHeap::default(),
            });
            self.pools.len() - 1
        })
    }

    /// The pool holding the live block at `addr`. O(pools): a handful of map probes.
    #[inline]
    fn pool_holding(&self, addr: u64) -> Option<usize> {
        self.pools.iter().position(|p| p.heap.is_live(addr))
    }

    fn held(&self) -> u64 {
        self.pools.iter().map(|p| p.heap.held()).sum()
    }
}

/// A caching allocator of managed memory with the RFC's placement hints; see the
/// [module docs](self).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use emm_core::unified::{CachingManagedAllocator, CachingManagedOptions, Placement};
/// use emm_core::{DeviceId, Driver, StreamId};
/// # use emm_sim::{SimConfig, SimDriver};
/// # let driver: Arc<dyn Driver> = Arc::new(SimDriver::new(SimConfig::new(1)).unwrap());
/// let cache = CachingManagedAllocator::new(driver, DeviceId(0), CachingManagedOptions::default())?;
/// let p = cache.allocate_placed(1000, Placement::Device(DeviceId(0)), StreamId::DEFAULT)?;
/// cache.free(p, 1000, StreamId::DEFAULT)?;
/// let q = cache.allocate_placed(1000, Placement::Device(DeviceId(0)), StreamId::DEFAULT)?;
/// assert_eq!(p, q, "served from the cache");
/// assert_eq!(cache.stats().segments_allocated, 1);
/// # cache.free(q, 1000, StreamId::DEFAULT)?;
/// # Ok::<(), emm_core::unified::UnifiedError>(())
/// ```
pub struct CachingManagedAllocator {
    driver: Arc<dyn Driver>,
    device: DeviceId,
    options: CachingManagedOptions,
    state: Mutex<State>,
}

impl CachingManagedAllocator {
    /// An empty cache serving `device` (the device whose context is current when it is used:
    /// host allocations are advised as accessed by it). Makes no driver call.
    ///
    /// # Errors
    ///
    /// [`UnifiedError::InvalidConfig`] when `options` do not validate.
    pub fn new(
        driver: Arc<dyn Driver>,
        device: DeviceId,
        options: CachingManagedOptions,
    ) -> Result<Self, UnifiedError> {
        options.validate()?;
        Ok(CachingManagedAllocator {
            driver,
            device,
            options,
            state: Mutex::new(State::default()),
        })
    }

    /// The device it serves.
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// The options it was built with.
    pub fn options(&self) -> &CachingManagedOptions {
        &self.options
    }

    /// The driver, shared.
    pub fn shared_driver(&self) -> &Arc<dyn Driver> {
        &self.driver
    }

    /// Its counters, with bytes held and live as of now.
    pub fn stats(&self) -> CachingStats {
        let st = self.lock();
        let mut s = st.stats;
        s.held_bytes = st.held();
        s.live_bytes = st.pools.iter().map(|p| p.heap.live_bytes()).sum();
        s.live_blocks = st.pools.iter().map(|p| p.heap.live_count() as u64).sum();
        s
    }

    #[inline]
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the lock is held; were it poisoned, the state is still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `bytes` of managed memory (`CU_MEM_ATTACH_GLOBAL`) advised as `placement`, usable on
    /// `stream` at once.
    ///
    /// # Errors
    ///
    /// As [`CachingManagedAllocator::allocate_managed`].
    ///
    /// # Time complexity
    ///
    /// As [`CachingManagedAllocator::allocate_managed`].
    #[inline]
    pub fn allocate_placed(
        &self,
        bytes: usize,
        placement: Placement,
        stream: StreamId,
    ) -> Result<DevicePtr, UnifiedError> {
        self.allocate_managed(bytes, placement, true, stream)
    }

    /// `bytes` of managed memory advised as `placement`; `attach_global` chooses
    /// `CU_MEM_ATTACH_GLOBAL` over `CU_MEM_ATTACH_HOST` (segments of each are kept apart).
    ///
    /// # Errors
    ///
    /// [`UnifiedError::InvalidArgument`] for 0 bytes; [`UnifiedError::LimitExceeded`] when the
    /// limit refuses a segment even after giving back the free ones; an out-of-memory
    /// [`UnifiedError::Resource`] when the driver does; driver errors.
    ///
    /// # Time complexity
    ///
    /// O(1) and no driver call on a hit; O(free blocks of one other stream) when it takes
    /// that stream's blocks; a few driver calls when it takes a segment.
    #[inline]
    pub fn allocate_managed(
        &self,
        bytes: usize,
        placement: Placement,
        attach_global: bool,
        stream: StreamId,
    ) -> Result<DevicePtr, UnifiedError> {
        if bytes == 0 {
            return Err(UnifiedError::invalid(
                "CachingManagedAllocator::allocate",
                "size is 0 bytes; ask for at least 1 byte",
            ));
        }
        let requested = bytes as u64;
        let size = self.options.round(requested).ok_or(too_large(requested))?;
        let key = PoolKey {
            placement,
            attach_global,
            small: self.options.is_small(requested),
        };
        let mut st = self.lock();
        // Budget: a pool lookup among a handful, a slot lookup, a TLSF search, a map insert.
        if let Some(p) = st.pool_of(key).and_then(|pi| {
            let heap = &mut st.pools[pi].heap;
            let slot = heap.slot_of(stream)?;
            heap.allocate(slot, size, requested)
        }) {
            st.stats.cache_hits += 1;
            return Ok(DevicePtr(p));
        }
        self.allocate_slow(&mut st, key, size, requested, stream)
    }

    /// Nothing in `stream`'s lists fits: take another stream's blocks, or a new segment.
    #[cold]
    #[inline(never)]
    fn allocate_slow(
        &self,
        st: &mut State,
        key: PoolKey,
        size: u64,
        requested: u64,
        stream: StreamId,
    ) -> Result<DevicePtr, UnifiedError> {
        let pi = st.pool(key);
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
                return Ok(DevicePtr(p));
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
        let segment = chunk_size(growth, size, 0).ok_or(too_large(requested))?;
        let (base, segment) = match self.new_segment(st, segment, requested, key) {
            Ok(base) => (base, segment),
            Err(e) if e.is_out_of_memory() => {
                // PyTorch's answer: give back every cached segment, then try exactly the request.
                let _ = self.release_all_free(st);
                let exact = chunk_size(Growth::Exact, size, 0).ok_or(too_large(requested))?;
                (self.new_segment(st, exact, requested, key)?, exact)
            }
            Err(e) => return Err(e),
        };
        let heap = &mut st.pools[pi].heap;
        let slot = heap.slot(stream);
        heap.add_chunk(slot, base, segment);
        let p = heap
            .allocate(slot, size, requested)
            .ok_or(too_large(requested))?;
        st.stats.cache_misses += 1;
        st.stats.peak_held_bytes = st.stats.peak_held_bytes.max(st.held());
        Ok(DevicePtr(p))
    }

    /// Takes a segment of `segment` bytes from the driver, within the limit, with `key`'s
    /// advice; on a failed advice gives it back (nothing is held on an error).
    fn new_segment(
        &self,
        st: &mut State,
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
            .map_err(|e| driver_oom(&*self.driver, NAME, n, e))?;
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
    fn check_limit(&self, st: &State, segment: u64, requested: u64) -> Result<(), UnifiedError> {
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

    /// Takes back the live block at `ptr`, allocated with `bytes`, on `stream`.
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidFree`] (as [`UnifiedError::Resource`]) for a pointer it did not hand
    /// out, one already freed, or the wrong size; nothing is changed.
    ///
    /// # Time complexity
    ///
    /// O(pools) map probes, one removal, at most two merges; no driver call.
    #[inline]
    pub fn free(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> Result<(), UnifiedError> {
        let mut st = self.lock();
        let Some(pi) = st.pool_holding(ptr.0) else {
            return Err(invalid_free(ptr, bytes, FreeError::NotLive));
        };
        let heap = &mut st.pools[pi].heap;
        let slot = heap.slot(stream);
        heap.deallocate(ptr.0, bytes as u64, slot)
            .map_err(|e| invalid_free(ptr, bytes, e))?;
        st.stats.frees += 1;
        Ok(())
    }

    /// As [`CachingManagedAllocator::free`], for a block whose range is now advised as
    /// `advised` (a move changed it): gives it its pool's advice back first, so the next
    /// allocation from the cache gets the RFC's hints.
    ///
    /// # Errors
    ///
    /// As [`CachingManagedAllocator::free`]; the driver's when the advice fails, in which case
    /// the block is still taken back (memory is never lost) with the advice it had.
    ///
    /// # Time complexity
    ///
    /// As [`CachingManagedAllocator::free`], plus up to three `cuMemAdvise` when `advised`
    /// differs from the pool's placement.
    pub fn free_advised(
        &self,
        ptr: DevicePtr,
        bytes: usize,
        stream: StreamId,
        advised: Placement,
    ) -> Result<(), UnifiedError> {
        let Some(home) = self.placement_of(ptr) else {
            return Err(invalid_free(ptr, bytes, FreeError::NotLive));
        };
        let restored = if advised == home {
            Ok(0)
        } else {
            let _scope = CallerScope::enter(NAME);
            let extent = self.options.round(bytes as u64).unwrap_or(bytes as u64);
            let n = usize::try_from(extent).unwrap_or(bytes);
            Placement::advise(&*self.driver, ptr, n, advised, home)
        };
        self.free(ptr, bytes, stream)?;
        let calls = restored?;
        self.lock().stats.advise_calls += u64::from(calls);
        Ok(())
    }

    /// The placement of the pool the live block at `ptr` came from.
    pub fn placement_of(&self, ptr: DevicePtr) -> Option<Placement> {
        let st = self.lock();
        st.pool_holding(ptr.0).map(|pi| st.pools[pi].key.placement)
    }

    /// Gives every wholly free segment back to the driver (`cuMemFree`); returns the bytes
    /// given. Blocks freed on several streams are merged first, after a context synchronize.
    ///
    /// # Errors
    ///
    /// The first driver error; segments the driver refused are forgotten (they were free).
    ///
    /// # Time complexity
    ///
    /// O(segments + free blocks), one `cuMemFree` per segment given back.
    pub fn release(&self) -> Result<u64, UnifiedError> {
        let mut st = self.lock();
        self.release_all_free(&mut st)
    }

    fn release_all_free(&self, st: &mut State) -> Result<u64, UnifiedError> {
        let _scope = CallerScope::enter(NAME);
        if st.pools.iter().any(|p| p.heap.slots_with_free_blocks() > 1) {
            self.driver.context_synchronize()?;
            for p in &mut st.pools {
                let slot = p.heap.slot(StreamId::DEFAULT);
                p.heap.unify(slot);
            }
        }
        let mut first_err = None;
        let mut released = 0;
        for pi in 0..st.pools.len() {
            for (chunk, _) in st.pools[pi].heap.take_free_chunks(0) {
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
        }
        first_err.map_or(Ok(released), |e| Err(e.into()))
    }

    /// Keeps a failure that had no caller to go to (a free in a finalizer).
    pub(crate) fn record_failure(&self, e: UnifiedError) {
        let mut st = self.lock();
        if st.failures.len() < FAILURES_KEPT {
            st.failures.push(e);
        }
    }

    /// Reports the first free that failed where no caller could see it (in a finalizer or a
    /// `ManagedBuffer`'s drop) since the last report.
    ///
    /// # Errors
    ///
    /// That failure.
    pub fn take_failures(&self) -> Result<(), UnifiedError> {
        let first = {
            let mut st = self.lock();
            let first = st.failures.drain(..).next();
            first
        };
        first.map_or(Ok(()), Err)
    }

    /// Checks every pool's invariants (blocks tile segments, lists agree, neighbours merged).
    /// O(blocks): for tests.
    ///
    /// # Errors
    ///
    /// [`UnifiedError::InvalidArgument`] describing the first broken invariant.
    pub fn check(&self) -> Result<(), UnifiedError> {
        let st = self.lock();
        for p in &st.pools {
            p.heap.check().map_err(|reason| {
                UnifiedError::invalid(
                    "CachingManagedAllocator::check",
                    format!("internal invariant broken in {:?}: {reason}", p.key),
                )
            })?;
        }
        Ok(())
    }
}

fn too_large(requested: u64) -> UnifiedError {
    UnifiedError::Resource(MrError::OutOfMemory {
        resource: NAME,
        requested,
        available: None,
    })
}

fn invalid_free(ptr: DevicePtr, bytes: usize, e: FreeError) -> UnifiedError {
    UnifiedError::Resource(MrError::InvalidFree {
        resource: NAME,
        ptr,
        bytes: bytes as u64,
        reason: e.reason(),
    })
}

impl DeviceMemoryResource for CachingManagedAllocator {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Device placement on the allocator's device; 0 bytes is `DevicePtr::NULL`.
    #[inline]
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        Ok(self.allocate_placed(bytes, Placement::Device(self.device), stream)?)
    }

    #[inline]
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        Ok(self.free(ptr, bytes, stream)?)
    }

    fn memory_info(&self) -> Option<MemInfo> {
        self.driver.mem_get_info().ok()
    }

    fn release(&self) -> MrResult<u64> {
        Ok(CachingManagedAllocator::release(self)?)
    }

    fn driver(&self) -> &dyn Driver {
        &*self.driver
    }
}

impl Drop for CachingManagedAllocator {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let _scope = CallerScope::enter(NAME);
        st.order.destroy(&*self.driver);
        for pool in &mut st.pools {
            for (chunk, _) in pool.heap.take_all_chunks() {
                // No caller to report to; a segment the driver refuses stays with it.
                let _ = self.driver.mem_free(DevicePtr(chunk.base));
            }
        }
    }
}

impl std::fmt::Debug for CachingManagedAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.stats();
        f.debug_struct(NAME)
            .field("device", &self.device)
            .field("held", &s.held_bytes)
            .field("live", &s.live_bytes)
            .field("segments", &(s.segments_allocated - s.segments_freed))
            .finish_non_exhaustive()
    }
}

const _: () = assert_resource::<CachingManagedAllocator>();
