//! [`PoolResource`]: a coalescing suballocator over an upstream resource, with per-stream free
//! lists and constant-time allocation (two-level segregated fit).
//!
//! - **What it does**: carves blocks out of memory it takes in one of two ways ([`Backing`]).
//!   By default, over a driver-backed upstream (`CudaResource`) on a driver with virtual memory
//!   management, it reserves one virtual address range the size of the device and maps physical
//!   memory at its end as it grows, in handles of one granule (2 MiB) or 1/64 of a large growth
//!   — an expandable segment, as PyTorch's `expandable_segments` — so free blocks merge across
//!   every boundary and the free end of the range (the *wilderness*) serves a request only when
//!   no block below it fits; only the free end goes back, and, when the device is short of
//!   memory, the handles free blocks wholly cover anywhere in the range. With
//!   [`Backing::ExpandableTight`] those go back before it maps more than it ever had mapped,
//!   so physical memory follows the live blocks, for more driver calls. Otherwise it
//!   takes chunks from its upstream, sized by its [`Growth`] policy (default: the request,
//!   rounded to 2 MiB); before growing it gives back wholly free chunks if it would otherwise
//!   hold more than 1.05 × its live bytes. Free blocks
//!   live in two-level segregated fit (TLSF) lists — a power-of-two level and 32 linear classes
//!   inside each — with bitmaps saying which classes are non-empty, so finding a block is two
//!   find-first-set instructions however many blocks are free (RMM's pool walks an
//!   address-ordered list: O(free blocks)). A search takes the head of the request's own
//!   class when it fits (the tightest fit), else the head of the smallest class whose blocks
//!   all fit, choosing between them without a branch. Freed blocks merge with free neighbours at once. When nothing fits, the
//!   pool first takes memory another stream freed (see below), then grows, up to an optional
//!   maximum; when the device is out of memory it gathers every stream's free memory and tries
//!   once more with exactly the request. [`PoolResource::release`] gives back every wholly free
//!   chunk, or unmaps every wholly free handle of the segment.
//! - **Thread safety**: `Send + Sync`. One spin lock (`crate::sync::SpinMutex`) guards the
//!   pool, biased to the first thread that takes it: that thread locks without a locked
//!   instruction until another thread comes. The critical section of an allocation or a free
//!   is a few dozen instructions and makes no driver call. Growing by a chunk lets the lock
//!   go while the upstream works (the chunk counts against the maximum meanwhile), so other
//!   threads allocate and free from what the pool holds; an expandable segment maps under
//!   the lock.
//! - **Streams**: each stream has its own free lists. Memory freed on stream A is reused on A
//!   at once. A free records nothing (RMM records an event on every free); only when an
//!   allocation on B finds nothing in B's lists and takes A's, the pool records its cached
//!   event for A and makes B wait on it, then moves all of A's free blocks to B. The event
//!   recorded late still follows every free on A, so the order is as safe and the
//!   single-stream path never calls the driver. Unmapping is not stream-ordered: the segment
//!   unmaps free memory once an event recorded on the stream that freed it has completed,
//!   and `release` synchronizes the context first.
//! - **Clone and ownership**: not `Clone`; owns its upstream by value and gives all its memory
//!   back when dropped (memory still handed out becomes invalid then, as in RMM). Share a pool
//!   through an `Arc`.
//! - **Use and cost**: the general-purpose suballocator. Allocation and free are O(1) and
//!   allocate on the host only to grow their tables (amortized) and on a stream's first use
//!   (30–45 ns per operation on W1, W2, W3 on the 2-core build machine, as its speed goes;
//!   on H100 hosts 27–32 ns in their fast phases and medians of 33–47 over 12–16
//!   processes a list, measured through `bench::run_named`, which inlines these calls);
//!   growth costs one upstream
//!   call, or a free-memory query, two driver calls per handle mapped (at most 64) and one
//!   more. Memory held at peak measured 1.06–1.08 × peak live bytes on W1, W2, W3 without
//!   preallocation (1.08–1.11 with chunks). The segment's memory cannot be exported with
//!   `cuIpcGetMemHandle`: the pools of the built-in managers, which export memory, use
//!   [`Backing::Chunks`].
//!
//! Zero-byte requests return `DevicePtr::NULL` and never reach the lists; sizes are rounded up
//! to 256 bytes, the alignment of every block. Alignments above 256 are refused with
//! [`MrError::UnsupportedAlignment`] (wrap the pool in `AlignedAdaptor`).

use crate::attribution::CallerScope;
use crate::driver::{ContextId, DevicePtr, Driver, MemInfo, StreamId};
use crate::mr::detail::context_scope::ContextScope;
use crate::mr::detail::heap::{round_to_granule, CoalescingHeap, FreeError};
use crate::mr::detail::pool_backing::PoolBacking;
use crate::mr::detail::stream_order::StreamOrder;
use crate::mr::detail::tlsf::OwnClass;
use crate::mr::pool_options::{Backing, Growth, PoolOptions};
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult};
use crate::sync::{SpinGuard, SpinMutex};

mod grow;

const NAME: &str = "PoolResource";

/// How the pool's searches look at a request's own size class: its head alone, by a select
/// (see [`OwnClass::Head`] for the measurements); only the rare searches that follow a look
/// into another stream's lists, or a shortage of memory, scan it. A constant, so that the
/// search's other form is compiled away: chosen per pool at run time it cost 3 instructions
/// an op, and the pools under other resources would gain little from the scan (the arena's
/// W2, mostly served by its global pool, held 1.127 over peak live with the head alone, 1.097
/// with the scan).
const OWN_CLASS: OwnClass = OwnClass::Head;

/// What the lock guards.
#[derive(Debug, Default)]
struct PoolState {
    heap: CoalescingHeap,
    order: StreamOrder,
    backing: PoolBacking,
    /// Bytes of chunks being taken from upstream with the lock let go
    /// ([`PoolResource::grow_unlocked`]): counted against the maximum size.
    pending: u64,
}

/// A coalescing TLSF suballocator with per-stream free lists over an upstream resource.
///
/// # Examples
///
/// ```
/// use emm_core::mr::{CudaResource, DeviceMemoryResource, PoolResource};
/// use emm_core::StreamId;
/// # fn demo<D: emm_core::Driver>(driver: std::sync::Arc<D>) -> emm_core::mr::MrResult<()> {
/// let pool = PoolResource::new(CudaResource::<D>::new(driver));
/// let p = pool.allocate(1000, StreamId::DEFAULT)?;
/// pool.deallocate(p, 1000, StreamId::DEFAULT)?;
/// pool.release()?;
/// # Ok(()) }
/// ```
pub struct PoolResource<Up: DeviceMemoryResource> {
    upstream: Up,
    options: PoolOptions,
    state: SpinMutex<PoolState>,
    /// The context current when the pool was built: made current for every driver call
    /// (growth, events, unmapping), so the pool stays on its device (rmm#1405).
    context: Option<ContextId>,
}

/// A pool's memory at one moment: bytes held from upstream, and bytes of them free.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolLevels {
    /// Bytes held from upstream.
    pub held: u64,
    /// Bytes held and free in the pool, all streams together.
    pub free: u64,
}

impl<Up: DeviceMemoryResource> PoolResource<Up> {
    /// A pool over `upstream` that starts empty and grows on demand without limit.
    pub fn new(upstream: Up) -> Self {
        PoolResource {
            context: upstream.driver().current_context().ok(),
            upstream,
            options: PoolOptions::default(),
            state: SpinMutex::new(PoolState::default()),
        }
    }

    /// A pool over `upstream` that takes chunks from it ([`Backing::Chunks`]) and starts empty:
    /// for resources whose memory must stay `cuMemAlloc` memory (exportable over IPC).
    pub(crate) fn chunked(upstream: Up) -> Self {
        PoolResource {
            context: upstream.driver().current_context().ok(),
            upstream,
            options: PoolOptions::default().backing(Backing::Chunks),
            state: SpinMutex::new(PoolState::default()),
        }
    }

    /// A pool over `upstream` sized by `options`, taking `options.initial_size` now.
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidArgument`] when the initial size exceeds the maximum; the upstream's
    /// error when the initial chunk cannot be had.
    pub fn with_options(upstream: Up, options: PoolOptions) -> MrResult<Self> {
        if let Some(max) = options.maximum_size {
            if options.initial_size > max {
                return Err(MrError::InvalidArgument {
                    resource: NAME,
                    reason: format!(
                        "initial size {} exceeds maximum size {}; raise the maximum or lower \
                         the initial size",
                        options.initial_size, max
                    ),
                });
            }
        }
        let pool = PoolResource {
            context: upstream.driver().current_context().ok(),
            upstream,
            options,
            state: SpinMutex::new(PoolState::default()),
        };
        if options.initial_size > 0 {
            let _ctx = ContextScope::enter(pool.upstream.driver(), pool.context);
            let size = round_to_granule(options.initial_size).ok_or(MrError::OutOfMemory {
                resource: NAME,
                requested: options.initial_size,
                available: None,
            })?;
            let mut st = pool.lock();
            pool.decide_backing(&mut st);
            if let Some(p) = pool.grow_segment(&mut st, size, size, StreamId::DEFAULT) {
                // Grown by the initial size; the block goes back and stays mapped.
                let p = p?;
                let slot = st.heap.slot(StreamId::DEFAULT);
                st.heap
                    .deallocate(p.0, size, slot)
                    .map_err(|e| invalid_free(p, size as usize, e))?;
            } else {
                st.heap
                    .reserve_records(1)
                    .map_err(|full| MrError::records_full(NAME, size, full))?;
                let base = pool.upstream_allocate(size, StreamId::DEFAULT)?;
                let slot = st.heap.slot(StreamId::DEFAULT);
                if let Err(full) = st.heap.add_chunk(slot, base.0, size) {
                    let _ = pool.give_back(base.0, size, StreamId::DEFAULT);
                    return Err(MrError::records_full(NAME, size, full));
                }
            }
        }
        Ok(pool)
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        &self.upstream
    }

    /// The sizing the pool was built with.
    pub fn options(&self) -> PoolOptions {
        self.options
    }

    /// Bytes held from upstream (a segment's spare handles, held unmapped, included).
    pub fn held_bytes(&self) -> u64 {
        self.levels().held
    }

    /// Bytes held from upstream, and bytes of them free in the pool, read together.
    pub fn levels(&self) -> PoolLevels {
        Self::levels_locked(&self.lock())
    }

    fn levels_locked(st: &PoolState) -> PoolLevels {
        let spare = st.backing.spare_bytes();
        PoolLevels {
            held: st.heap.held() + spare,
            free: st.heap.free_bytes() + spare,
        }
    }

    /// Bytes held from upstream and free in the pool, all streams together (a segment's
    /// spare handles included).
    pub fn free_bytes(&self) -> u64 {
        self.levels().free
    }

    /// Number of allocations handed out and not yet freed.
    pub fn live_allocations(&self) -> usize {
        self.lock().heap.live_count()
    }

    /// Number of streams whose free lists the pool keeps: at least those holding free blocks,
    /// and, once the pool has gone through many streams, about twice that at most — a stream
    /// whose free blocks another took or that used them all keeps none (8 KiB each).
    pub fn stream_lists(&self) -> usize {
        self.lock().heap.slot_count()
    }

    /// Gives every fully free upstream chunk back to the upstream — or, from an expandable
    /// segment, unmaps and releases every wholly free handle — and returns the
    /// bytes given. Blocks freed on several streams are coalesced first, after a context
    /// synchronize.
    ///
    /// # Errors
    ///
    /// The first upstream or driver error; chunks the upstream refused are forgotten (they
    /// were free).
    ///
    /// # Time complexity
    ///
    /// O(chunks + free blocks) plus one upstream call per chunk given back (two driver calls
    /// per granule from a segment), and a context synchronize when free blocks sit on more
    /// than one stream or a segment unmaps.
    pub fn release(&self) -> MrResult<u64> {
        let _ctx = ContextScope::enter(self.upstream.driver(), self.context);
        let mut st = self.lock();
        self.release_all_free(&mut st)
    }

    /// Gives back every wholly free chunk (or, from a segment, every wholly free granule at its
    /// end), also those whose blocks were freed on several streams: when free blocks sit in
    /// more than one stream's lists, waits for the device so that every stream's frees are
    /// complete, and coalesces them all on the default stream.
    fn release_all_free(&self, st: &mut PoolState) -> MrResult<u64> {
        let _scope = CallerScope::enter(NAME);
        let driver = self.upstream.driver();
        let synchronized = st
            .heap
            .coalesce_streams(StreamId::DEFAULT, || driver.context_synchronize())?;
        match st.backing {
            PoolBacking::Segment(_) => {
                Ok(st
                    .backing
                    .release_segment_tail(&mut st.heap, driver, synchronized)?)
            }
            PoolBacking::Chunks | PoolBacking::Undecided => self.release_free_chunks(st),
        }
    }

    /// Chooses where memory comes from, once (see [`Backing`]).
    fn decide_backing(&self, st: &mut PoolState) {
        let _scope = CallerScope::enter(NAME);
        let driver_backed = self.upstream.driver_backed();
        let driver = self.upstream.driver();
        st.backing
            .decide(&mut st.heap, &self.options, driver_backed, driver);
    }

    fn release_free_chunks(&self, st: &mut PoolState) -> MrResult<u64> {
        let mut first_err = None;
        let mut released = 0;
        for (chunk, stream) in st.heap.take_free_chunks(0) {
            released += chunk.size;
            if let Err(e) = self.give_back(chunk.base, chunk.size, stream) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(released), Err)
    }

    /// Returns a chunk to the upstream on `stream`, the stream that last freed into it. If the
    /// user destroyed that stream since, waits for the device and returns it on the default
    /// stream instead.
    fn give_back(&self, base: u64, size: u64, stream: StreamId) -> MrResult<()> {
        // Chunk sizes came from `usize` requests, so they fit.
        let (ptr, n) = (DevicePtr(base), size as usize);
        match self.upstream.deallocate(ptr, n, stream) {
            Err(MrError::Driver(_)) if stream != StreamId::DEFAULT => {
                let _scope = CallerScope::enter(NAME);
                self.upstream.driver().context_synchronize()?;
                self.upstream.deallocate(ptr, n, StreamId::DEFAULT)
            }
            r => r,
        }
    }

    #[inline]
    fn lock(&self) -> SpinGuard<'_, PoolState> {
        self.state.lock()
    }

    /// Budget: one slot lookup, a TLSF search, one split, one map insert — no driver call.
    #[inline(always)]
    fn allocate_fast(st: &mut PoolState, size: u64, bytes: u64, stream: StreamId) -> Option<u64> {
        if st.heap.is_first(stream) {
            st.heap.allocate_with(OWN_CLASS, 0, size, bytes)
        } else {
            Self::allocate_later_slot(st, size, bytes, stream)
        }
    }

    /// [`Self::allocate_fast`] on a stream other than the first: apart, so that the first
    /// stream's slot is a constant on the common path.
    #[inline(never)]
    fn allocate_later_slot(
        st: &mut PoolState,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> Option<u64> {
        let slot = st.heap.slot_of(stream)?;
        st.heap.allocate_with(OWN_CLASS, slot, size, bytes)
    }

    /// A request of `bytes` (not 0) rounded to the granule; out of memory past the largest.
    #[inline]
    fn rounded(bytes: u64) -> MrResult<u64> {
        round_to_granule(bytes).ok_or(MrError::OutOfMemory {
            resource: NAME,
            requested: bytes,
            available: None,
        })
    }

    /// Serves `size` bytes (rounded, `bytes` asked) on `stream` with the lock held as `st`,
    /// and gives the lock back with the result: growing by a chunk lets it go meanwhile.
    #[inline]
    fn allocate_locked<'a>(
        &'a self,
        mut st: SpinGuard<'a, PoolState>,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> (MrResult<DevicePtr>, SpinGuard<'a, PoolState>) {
        match Self::allocate_fast(&mut st, size, bytes, stream) {
            Some(p) => (Ok(DevicePtr(p)), st),
            None => self.allocate_slow(st, size, bytes, stream),
        }
    }

    /// Takes back `ptr` of `bytes` freed on `stream`, the lock held.
    #[inline(always)]
    fn deallocate_locked(
        st: &mut PoolState,
        ptr: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> MrResult<()> {
        if st.heap.is_first(stream) {
            return Self::deallocate_in(st, ptr, bytes, 0);
        }
        Self::deallocate_later_slot(st, ptr, bytes, stream)
    }

    /// Frees `ptr` into `slot`'s lists (a constant 0 on the common path, once inlined).
    #[inline(always)]
    fn deallocate_in(
        st: &mut PoolState,
        ptr: DevicePtr,
        bytes: usize,
        slot: usize,
    ) -> MrResult<()> {
        st.heap
            .deallocate(ptr.0, bytes as u64, slot)
            .map(|_| ())
            .map_err(|e| invalid_free(ptr, bytes, e))
    }

    /// [`Self::deallocate_locked`] on a stream other than the first (see
    /// [`Self::allocate_later_slot`]).
    #[inline(never)]
    fn deallocate_later_slot(
        st: &mut PoolState,
        ptr: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> MrResult<()> {
        let slot = match st.heap.slot_of(stream) {
            Some(slot) => slot,
            // A stream's lists are made on its first good free, so a bad one changes nothing.
            None if st.heap.is_live(ptr.0) => {
                st.heap.sweep_slots_if_due();
                st.heap.slot(stream)
            }
            None => return Err(invalid_free(ptr, bytes, FreeError::NotLive)),
        };
        Self::deallocate_in(st, ptr, bytes, slot)
    }

    /// Nothing in `stream`'s lists fits: take another stream's memory, or grow.
    #[cold]
    #[inline(never)]
    fn allocate_slow<'a>(
        &'a self,
        mut st: SpinGuard<'a, PoolState>,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> (MrResult<DevicePtr>, SpinGuard<'a, PoolState>) {
        // The fast path finds no block also when the block slab cannot grow: then nothing
        // below can record a block either, and the host's refusal is the answer. Two records
        // serve any path below (a chunk and the split of the request from it).
        if let Err(full) = st.heap.reserve_records(2) {
            return (Err(MrError::records_full(NAME, bytes, full)), st);
        }
        // Before any slot number is held: a sweep may give an empty slot to another stream.
        st.heap.sweep_slots_if_due();
        let slot = st.heap.slot(stream);
        // The end of an expandable segment, kept for what nothing below it fits.
        if let Some(p) = st.heap.allocate_wild(slot, size, bytes) {
            return (Ok(DevicePtr(p)), st);
        }
        // From here on the driver may be called: events, growth.
        let _ctx = ContextScope::enter(self.upstream.driver(), self.context);
        let PoolState { heap, order, .. } = &mut *st;
        order.prune(self.upstream.driver(), |s| heap.slot_of(s).is_some());
        if let Some(other) = st.heap.find_elsewhere(slot, size) {
            let source = st.heap.stream_of(other);
            {
                let _scope = CallerScope::enter(NAME);
                if let Err(e) = st.order.order(self.upstream.driver(), source, stream) {
                    return (Err(e.into()), st);
                }
            }
            st.heap.adopt(slot, other);
            // The own class scanned, as `find_elsewhere` looked: the block it found may sit
            // behind a smaller one of its class now, where the head alone would miss it.
            if let Some(p) = st.heap.allocate(slot, size, bytes) {
                return (Ok(DevicePtr(p)), st);
            }
        }
        self.decide_backing(&mut st);
        if let Some(r) = self.grow_segment(&mut st, size, bytes, stream) {
            return (r, st);
        }
        self.grow_unlocked(st, size, bytes, stream)
    }
}

fn invalid_free(ptr: DevicePtr, bytes: usize, e: FreeError) -> MrError {
    MrError::InvalidFree {
        resource: NAME,
        ptr,
        bytes: bytes as u64,
        reason: e.reason(),
    }
}

impl<Up: DeviceMemoryResource> DeviceMemoryResource for PoolResource<Up> {
    fn name(&self) -> &'static str {
        NAME
    }

    /// # Time complexity
    ///
    /// O(1) when the stream's lists hold a block that fits; O(free blocks of one other stream)
    /// when it takes that stream's memory; one upstream call when it grows.
    // This, the free and the two `_locked`/`_fast` steps are always inlined: a caller that
    // holds the pool as its own type (`bench::replay`) then runs them with no call, 15–17
    // instructions an op fewer than through `dyn` (callgrind, W1 and W3); with `#[inline]`
    // alone LLVM outlined one level or another, as the loop grew.
    #[inline(always)]
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let bytes = bytes as u64;
        let size = Self::rounded(bytes)?;
        let mut st = self.lock();
        // The fast path borrows the guard; only the slow path takes it (it may let it go),
        // as passing it by value here cost 17 instructions an allocation (callgrind, W3).
        match Self::allocate_fast(&mut st, size, bytes, stream) {
            Some(p) => Ok(DevicePtr(p)),
            None => self.allocate_slow(st, size, bytes, stream).0,
        }
    }

    /// # Time complexity
    ///
    /// O(1): one map lookup, at most two merges.
    #[inline(always)]
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        let mut st = self.lock();
        Self::deallocate_locked(&mut st, ptr, bytes, stream)
    }

    fn memory_info(&self) -> Option<MemInfo> {
        let (held, free) = {
            let l = Self::levels_locked(&self.lock());
            (l.held, l.free)
        };
        let up = self.upstream.memory_info();
        let total = match (self.options.maximum_size, up) {
            (Some(m), _) => m,
            (None, Some(u)) => u.total,
            (None, None) => held,
        };
        let beyond = match self.options.maximum_size {
            Some(m) => m.saturating_sub(held),
            None => up.map_or(0, |u| u.free),
        };
        Some(MemInfo {
            free: (free + beyond).min(total),
            total,
        })
    }

    fn release(&self) -> MrResult<u64> {
        PoolResource::release(self)
    }

    fn driver(&self) -> &dyn Driver {
        self.upstream.driver()
    }

    fn held(&self) -> Option<u64> {
        Some(self.held_bytes())
    }
}

impl<Up: DeviceMemoryResource> Drop for PoolResource<Up> {
    fn drop(&mut self) {
        let _ctx = ContextScope::enter(self.upstream.driver(), self.context);
        let st = self.state.get_mut();
        let _scope = CallerScope::enter(NAME);
        let driver = self.upstream.driver();
        st.order.destroy(driver);
        if st.backing.destroy_segment(&mut st.heap, driver) {
            return;
        }
        let chunks = st.heap.take_all_chunks();
        for (chunk, stream) in chunks {
            // Errors have no caller to go to; a chunk the upstream refuses stays with it.
            let _ = self.give_back(chunk.base, chunk.size, stream.unwrap_or(StreamId::DEFAULT));
        }
    }
}

impl<Up: DeviceMemoryResource> std::fmt::Debug for PoolResource<Up> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct(NAME)
            .field("upstream", &self.upstream.name())
            .field("held", &st.heap.held())
            .field("free", &st.heap.free_bytes())
            .field("free_blocks", &st.heap.free_blocks())
            .field("live", &st.heap.live_count())
            .field("chunks", &st.heap.chunks().len())
            .field("backing", &st.backing.kind())
            .field("events", &st.order.events())
            .finish()
    }
}

impl<Up: DeviceMemoryResource> PoolResource<Up> {
    /// Checks the pool's internal invariants (blocks tile every chunk, free lists agree with
    /// the blocks, neighbours are merged). O(blocks): for tests and debugging.
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidArgument`] describing the first broken invariant.
    pub fn check(&self) -> MrResult<()> {
        self.lock()
            .heap
            .check()
            .map_err(|reason| MrError::InvalidArgument {
                resource: NAME,
                reason: format!("internal invariant broken: {reason}"),
            })
    }

    /// Takes back `back` — blocks this pool handed out, each with its size and the stream it
    /// was last used on, as [`DeviceMemoryResource::deallocate`] would — then allocates
    /// `bytes` on `stream`, all under one acquisition of the pool's lock: for a cache in front
    /// of the pool that trades blocks it cannot use for one it can (`ShardedPoolResource`),
    /// so that other threads wait for the lock once, not once a block. Returns the block and
    /// the pool's levels after, read under the same lock.
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidFree`] for the first block of `back` that is not live (the others are
    /// still taken back, and nothing is allocated); else as
    /// [`DeviceMemoryResource::allocate`].
    ///
    /// # Time complexity
    ///
    /// O(1) a block given back, then as [`DeviceMemoryResource::allocate`].
    pub fn exchange(
        &self,
        back: &[(DevicePtr, usize, StreamId)],
        bytes: usize,
        stream: StreamId,
    ) -> MrResult<(DevicePtr, PoolLevels)> {
        // Rounded outside the lock; an absurd size is refused after the blocks are back.
        let size = (bytes != 0)
            .then(|| Self::rounded(bytes as u64))
            .transpose();
        let mut st = self.lock();
        let mut first_err = None;
        for &(ptr, n, on) in back {
            if ptr == DevicePtr::NULL && n == 0 {
                continue;
            }
            if let Err(e) = Self::deallocate_locked(&mut st, ptr, n, on) {
                first_err.get_or_insert(e);
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let p = match size? {
            Some(size) => {
                let (p, locked) = self.allocate_locked(st, size, bytes as u64, stream);
                st = locked;
                p?
            }
            None => DevicePtr::NULL,
        };
        Ok((p, Self::levels_locked(&st)))
    }

    /// The growth policy in force.
    pub fn growth(&self) -> Growth {
        self.options.growth
    }

    /// Where the pool's memory comes from: `None` until it first takes memory, then
    /// [`Backing::Expandable`] when it took an expandable segment from the driver, or
    /// [`Backing::Chunks`].
    pub fn backing(&self) -> Option<Backing> {
        self.lock().backing.kind()
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<PoolResource<crate::mr::CudaResource<D>>>();
    }
};
