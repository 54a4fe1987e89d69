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
//!   (2 MiB) up to 1 MiB, from large segments (128 MiB) above, and from a segment of their own
//!   size at 10 MiB and more. When the driver (or the [`ManagedLimit`]) refuses a segment, the
//!   allocator gives back every wholly free segment and tries once more with exactly the
//!   request, as PyTorch's allocator does. Unlike device memory, a cached managed block has
//!   pages somewhere: with [`GiveBack::Displaced`] (the default) a free that empties a
//!   segment whose pages are likely elsewhere (the block was moved away, or the cache holds
//!   more than the device has) gives the segment back, because reusing it would migrate dead
//!   data back on first touch (the book's "Benchmarks" measures it).
//! - **Thread safety**: `Send + Sync`. One mutex guards the pools; a cache hit makes no driver
//!   call under it.
//! - **Streams**: the pool's rules. Each stream has its own free lists in each pool: memory
//!   freed on stream A is reused on A at once, and on B only after the allocator records an
//!   event on A and makes B wait on it (lazily, when B takes A's blocks). Host and plain
//!   managed memory may be touched by the host at once, which no stream orders, so a block of
//!   theirs reused from the cache first waits for its stream (`cuStreamSynchronize`); device
//!   blocks never wait.
//! - **Clone and ownership**: not `Clone`; share it through an `Arc` (every `ManagedBuffer`
//!   and every pointer of a `UnifiedManager` holds one, so the allocator outlives its memory).
//!   Dropping it gives every segment back to the driver.
//! - **Use and cost**: the allocator behind unified memory (`set_enabled_unified_memory`) and
//!   `ManagedBuffer`. A device hit is a lock, a TLSF search and a map insert, with no driver
//!   call and no host allocation; a free is a lock, a map removal and at most two merges. A
//!   miss costs a `cuMemAllocManaged` (≈ 5–33 µs on an H100), one or two `cuMemAdvise`
//!   (2.6 µs each) and, with a [`ManagedLimit::FractionOfFree`], a `cuMemGetInfo` (7.5 µs).
//!
//! [`ManagedLimit`]: crate::unified::ManagedLimit
//! [`ManagedLimit::FractionOfFree`]: crate::unified::ManagedLimit::FractionOfFree

use std::sync::{Arc, Mutex, MutexGuard};

use crate::attribution::CallerScope;
use crate::driver::{DeviceId, DevicePtr, Driver, StreamId};
use crate::mr::detail::heap::FreeError;
use crate::mr::MrError;
use crate::unified::cache_state::{CacheState, PoolKey};
use crate::unified::error::UnifiedError;
use crate::unified::hints::Placement;
use crate::unified::options::{CachingManagedOptions, GiveBack};
use crate::unified::stats::CachingStats;

pub(super) const NAME: &str = "CachingManagedAllocator";

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
    pub(super) driver: Arc<dyn Driver>,
    pub(super) device: DeviceId,
    pub(super) options: CachingManagedOptions,
    state: Mutex<CacheState>,
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
            state: Mutex::new(CacheState::default()),
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
        self.lock().snapshot()
    }

    #[inline]
    pub(super) fn lock(&self) -> MutexGuard<'_, CacheState> {
        // Nothing panics while the lock is held; were it poisoned, the state is still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state, without locking (for drop).
    pub(super) fn state_mut(&mut self) -> &mut CacheState {
        self.state.get_mut().unwrap_or_else(|e| e.into_inner())
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
    /// O(1) and no driver call on a hit for device placement (a host or plain managed block
    /// reused from the cache first waits for `stream`, one `cuStreamSynchronize`); O(free
    /// blocks of one other stream) when it takes that stream's blocks; a few driver calls when
    /// it takes a segment.
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
        let size = self
            .options
            .round(requested)
            .ok_or_else(|| too_large(requested))?;
        let key = PoolKey {
            placement,
            attach_global,
            small: self.options.is_small(requested),
        };
        let (ptr, reused) = {
            let mut st = self.lock();
            // Budget: a pool lookup among a handful, a slot lookup, a TLSF search, a map insert.
            match st.pool_of(key).and_then(|pi| {
                let heap = &mut st.pools[pi].heap;
                let slot = heap.slot_of(stream)?;
                heap.allocate(slot, size, requested)
            }) {
                Some(p) => {
                    st.stats.cache_hits += 1;
                    (DevicePtr(p), true)
                }
                None => self.allocate_slow(&mut st, key, size, requested, stream)?,
            }
        };
        if reused && !matches!(placement, Placement::Device(_)) {
            self.wait_before_host_use(ptr, bytes, stream)?;
        }
        Ok(ptr)
    }

    /// Host and plain managed memory may be touched by the host at once, unordered with
    /// `stream`: a reused block waits for the stream's earlier work (which its last user's
    /// work, on this stream or ordered before it, is part of). On failure the block goes back.
    #[cold]
    fn wait_before_host_use(
        &self,
        ptr: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<(), UnifiedError> {
        let _scope = CallerScope::enter(NAME);
        if let Err(e) = self.driver.stream_synchronize(stream) {
            // The wait's failure is what the caller needs; the block is ours to take back.
            let _ = self.free(ptr, bytes, stream);
            return Err(e.into());
        }
        Ok(())
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
        self.free_inner(ptr, bytes, stream, false)
    }

    /// Frees the block; `moved` says its pages were sent away from its pool's location.
    #[inline]
    fn free_inner(
        &self,
        ptr: DevicePtr,
        bytes: usize,
        stream: StreamId,
        moved: bool,
    ) -> Result<(), UnifiedError> {
        let mut st = self.lock();
        let Some(pi) = st.pool_holding(ptr.0) else {
            return Err(invalid_free(ptr, bytes, FreeError::NotLive));
        };
        let heap = &mut st.pools[pi].heap;
        let slot = heap.slot(stream);
        let (_, emptied) = heap
            .deallocate(ptr.0, bytes as u64, slot)
            .map_err(|e| invalid_free(ptr, bytes, e))?;
        st.stats.frees += 1;
        if emptied
            && self.options.give_back == GiveBack::Displaced
            && (moved || st.oversubscribed_with(0))
        {
            // The block is free either way; a segment the driver refuses is reported later.
            if let Err(e) = self.give_back(&mut st, Some((pi, ptr.0))) {
                st.record(e);
            }
        }
        Ok(())
    }

    /// As [`CachingManagedAllocator::free`], for a block whose range is now advised as
    /// `advised` (a move changed it): gives it its pool's advice back first, so the next
    /// allocation from the cache gets the RFC's hints (or, as [`GiveBack`] says, gives its
    /// emptied segment back to the driver).
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
        let moved = advised != home;
        let restored = if moved {
            let _scope = CallerScope::enter(NAME);
            let extent = self.options.round(bytes as u64).unwrap_or(bytes as u64);
            let n = usize::try_from(extent).unwrap_or(bytes);
            Placement::advise(&*self.driver, ptr, n, advised, home)
        } else {
            Ok(0)
        };
        self.free_inner(ptr, bytes, stream, moved)?;
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

    /// Keeps a failure that had no caller to go to (a free in a finalizer).
    pub(crate) fn record_failure(&self, e: UnifiedError) {
        self.lock().record(e);
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

pub(super) fn too_large(requested: u64) -> UnifiedError {
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
