//! [`ArenaResource`]: per-thread arenas for small requests over a global arena for large
//! ones and for the arenas' superblocks.
//!
//! - **What it does**: the global arena is a [`PoolResource`] over the upstream. Each thread
//!   is assigned one of several arenas (threads beyond the number of arenas share them round
//!   robin); an arena carves requests up to [`ArenaResource::small_max`] from superblocks it
//!   takes from the global arena, with the same coalescing TLSF heap as the pool, and gives
//!   wholly free superblocks back to it when a free leaves one, keeping one free superblock
//!   as a cache. Larger requests go to the
//!   global arena directly.
//! - **Thread safety**: `Send + Sync`. Each arena has its own lock, so threads on different
//!   arenas never contend on small requests; the global arena's lock is taken only for large
//!   requests and superblock traffic.
//! - **Streams**: per-stream free lists inside every arena and in the global arena, with the
//!   pool's lazy, cached-event ordering when memory changes streams. Threads on per-thread
//!   default streams (RMM's intended use) never cross.
//! - **Clone and ownership**: not `Clone`; owns the global arena, which owns the upstream;
//!   dropping it waits for the device and gives every chunk back. Share it through an `Arc`.
//! - **Use and cost**: RMM's `arena_memory_resource`, for many threads allocating at once:
//!   small requests cost an uncontended lock plus the pool's O(1) path; a free from a thread
//!   other than the allocating one looks through the other arenas (O(arenas)).

use crate::attribution::CallerScope;
use crate::driver::{ContextId, DevicePtr, Driver, MemInfo, StreamId};
use crate::mr::detail::context_scope::ContextScope;
use crate::mr::detail::heap::{round_to_granule, CoalescingHeap, FreeError};
use crate::mr::detail::stream_order::StreamOrder;
use crate::mr::pool::PoolResource;
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult};
use crate::sync::{thread_local, AtomicU64, AtomicUsize, Ordering, SpinGuard, SpinMutex};

const NAME: &str = "ArenaResource";

/// Superblock size: what an arena takes from the global arena at a time.
pub const SUPERBLOCK: u64 = 2 << 20;

#[cfg(not(loom))]
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);
// loom's atomics are not `const`, and each modelled execution numbers its threads afresh.
#[cfg(loom)]
loom::lazy_static! {
    static ref NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);
}

thread_local! {
    /// This thread's number, handed out in order of first use.
    static THREAD_NUMBER: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// One arena: a heap over superblocks, and its own event cache.
#[derive(Debug, Default)]
struct Arena {
    heap: CoalescingHeap,
    order: StreamOrder,
}

/// Per-thread arenas over a global arena.
pub struct ArenaResource<Up: DeviceMemoryResource> {
    arenas: Box<[SpinMutex<Arena>]>,
    global: PoolResource<Up>,
    /// Calls into `global` (its lock taken: superblocks moved, large requests), for
    /// [`DeviceMemoryResource::chunk_moves`].
    global_calls: AtomicU64,
    small_max: u64,
    /// The context current when built: made current for the arenas' driver calls (events).
    context: Option<ContextId>,
}

impl<Up: DeviceMemoryResource> ArenaResource<Up> {
    /// Arenas for twice the machine's hardware threads (at least 4) over `upstream`.
    pub fn new(upstream: Up) -> Self {
        let n = std::thread::available_parallelism().map_or(4, |n| 2 * n.get());
        Self::with_arenas(upstream, n.max(4))
    }

    /// `arenas` arenas (at least 1) over `upstream`.
    pub fn with_arenas(upstream: Up, arenas: usize) -> Self {
        ArenaResource {
            arenas: (0..arenas.max(1))
                .map(|_| SpinMutex::new(Arena::default()))
                .collect(),
            // Chunks, as before pools could grow a segment: the arena manager exports memory
            // over IPC, which takes cuMemAlloc memory only.
            context: upstream.driver().current_context().ok(),
            global: PoolResource::chunked(upstream),
            global_calls: AtomicU64::new(0),
            small_max: SUPERBLOCK / 8,
        }
    }

    /// Requests up to this many bytes are served by the thread's arena (256 KiB).
    pub fn small_max(&self) -> u64 {
        self.small_max
    }

    /// Number of arenas.
    pub fn arenas(&self) -> usize {
        self.arenas.len()
    }

    /// The global arena.
    pub fn global(&self) -> &PoolResource<Up> {
        &self.global
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        self.global.upstream()
    }

    /// Takes `bytes` from the global arena (its lock), counted.
    fn global_allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        self.global_calls.fetch_add(1, Ordering::Relaxed);
        self.global.allocate(bytes, stream)
    }

    /// Gives `ptr` back to the global arena (its lock), counted.
    fn global_deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        self.global_calls.fetch_add(1, Ordering::Relaxed);
        self.global.deallocate(ptr, bytes, stream)
    }

    fn lock(&self, k: usize) -> SpinGuard<'_, Arena> {
        self.arenas[k % self.arenas.len()].lock()
    }

    #[inline]
    fn my_arena(&self) -> usize {
        THREAD_NUMBER.with(|n| *n) % self.arenas.len()
    }

    /// The arena has no block for `size`: take another stream's, or a superblock.
    #[cold]
    #[inline(never)]
    fn allocate_slow(
        &self,
        a: &mut Arena,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        // The fast path finds no block also when the block slab cannot grow: then nothing
        // below can record one either, and the host's refusal is the answer.
        a.heap
            .reserve_records(2)
            .map_err(|full| MrError::records_full(NAME, bytes, full))?;
        let slot = a.heap.slot(stream);
        if let Some(other) = a.heap.find_elsewhere(slot, size) {
            let source = a.heap.stream_of(other);
            {
                let _ctx = ContextScope::enter(self.global.driver(), self.context);
                let _scope = CallerScope::enter(NAME);
                a.order.order(self.global.driver(), source, stream)?;
            }
            a.heap.adopt(slot, other);
            if let Some(p) = a.heap.allocate(slot, size, bytes) {
                return Ok(DevicePtr(p));
            }
        }
        // Superblocks come from the global arena, usable on `stream` at once.
        let sb = self.global_allocate(SUPERBLOCK as usize, stream)?;
        // Reserved above, under this arena's lock.
        if let Err(full) = a.heap.add_chunk(slot, sb.0, SUPERBLOCK) {
            let _ = self.global_deallocate(sb, SUPERBLOCK as usize, stream);
            return Err(MrError::records_full(NAME, bytes, full));
        }
        a.heap
            .allocate(slot, size, bytes)
            .map(DevicePtr)
            .ok_or(MrError::OutOfMemory {
                resource: NAME,
                requested: bytes,
                available: None,
            })
    }

    /// Frees into arena `k`; `Err(NotLive)` when the block is not that arena's.
    fn free_in(
        &self,
        k: usize,
        ptr: DevicePtr,
        bytes: u64,
        stream: StreamId,
    ) -> Result<MrResult<()>, FreeError> {
        let mut a = self.lock(k);
        let slot = a.heap.slot(stream);
        match a.heap.deallocate(ptr.0, bytes, slot) {
            Ok((_, true)) if a.heap.chunks().len() > 1 => {
                // Wholly free superblocks go back to the global arena, but one stays: an arena
                // that fills and empties a superblock in a loop must not take and return it
                // through the global lock on every iteration.
                let back: Vec<_> = a.heap.take_free_chunks(1);
                let mut result = Ok(());
                for (chunk, s) in back {
                    if let Err(e) =
                        self.global_deallocate(DevicePtr(chunk.base), chunk.size as usize, s)
                    {
                        result = Err(e);
                    }
                }
                Ok(result)
            }
            Ok(_) => Ok(Ok(())),
            Err(FreeError::NotLive) => Err(FreeError::NotLive),
            Err(e) => Ok(Err(MrError::InvalidFree {
                resource: NAME,
                ptr,
                bytes,
                reason: e.reason(),
            })),
        }
    }
}

impl<Up: DeviceMemoryResource> std::fmt::Debug for ArenaResource<Up> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(NAME)
            .field("arenas", &self.arenas.len())
            .field("global", &self.global)
            .finish()
    }
}

impl<Up: DeviceMemoryResource> ArenaResource<Up> {
    /// Out of memory: arenas may hold free superblocks the request needs; give them back to
    /// the global arena (and its free chunks to the upstream) and try once more.
    #[cold]
    #[inline(never)]
    fn allocate_after_release(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        // Try again even when this release gave nothing back: another thread's release may
        // have given the memory to the upstream since the request failed (tests/loom_sharded.rs).
        let _ = self.release();
        let b = bytes as u64;
        if b > self.small_max {
            return self.global_allocate(bytes, stream);
        }
        let size = round_to_granule(b).unwrap_or(b);
        let mut a = self.lock(self.my_arena());
        self.allocate_slow(&mut a, size, b, stream)
    }
}

impl<Up: DeviceMemoryResource> DeviceMemoryResource for ArenaResource<Up> {
    fn name(&self) -> &'static str {
        NAME
    }

    /// # Time complexity
    ///
    /// Small requests: the thread's arena, O(1) when it has a fitting block; a superblock from
    /// the global arena otherwise. Large requests: the global arena (`PoolResource`).
    #[inline]
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let b = bytes as u64;
        let r = if b > self.small_max {
            self.global_allocate(bytes, stream)
        } else {
            let size = round_to_granule(b).unwrap_or(b);
            let mut a = self.lock(self.my_arena());
            // Budget: the pool's fast path on an uncontended per-thread lock.
            if let Some(p) = a
                .heap
                .slot_of(stream)
                .and_then(|slot| a.heap.allocate(slot, size, b))
            {
                return Ok(DevicePtr(p));
            }
            self.allocate_slow(&mut a, size, b, stream)
        };
        match r {
            Err(e) if e.is_out_of_memory() => self.allocate_after_release(bytes, stream),
            r => r,
        }
    }

    /// # Time complexity
    ///
    /// O(1) from the allocating thread; O(arenas) from another thread; plus O(superblocks of
    /// the arena) when the free leaves a superblock wholly free; large requests as
    /// `PoolResource`.
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        let b = bytes as u64;
        if b > self.small_max {
            return self.global_deallocate(ptr, bytes, stream);
        }
        let mine = self.my_arena();
        for k in std::iter::once(mine).chain((0..self.arenas.len()).filter(|&k| k != mine)) {
            if let Ok(result) = self.free_in(k, ptr, b, stream) {
                return result;
            }
        }
        Err(MrError::InvalidFree {
            resource: NAME,
            ptr,
            bytes: b,
            reason: FreeError::NotLive.reason(),
        })
    }

    fn memory_info(&self) -> Option<MemInfo> {
        self.global.memory_info()
    }

    fn chunk_moves(&self) -> Option<u64> {
        Some(self.global_calls.load(Ordering::Relaxed))
    }

    /// Gives every arena's wholly free superblocks back to the global arena, then the global
    /// arena's free chunks to the upstream.
    fn release(&self) -> MrResult<u64> {
        let _ctx = ContextScope::enter(self.global.driver(), self.context);
        let mut first_err = None;
        let driver = self.global.driver();
        for k in 0..self.arenas.len() {
            let mut a = self.lock(k);
            // Coalesce frees made on several streams, once they are all complete.
            a.heap.coalesce_streams(StreamId::DEFAULT, || {
                let _scope = CallerScope::enter(NAME);
                driver.context_synchronize()
            })?;
            // Back to the global arena before the arena's lock goes: a superblock held by
            // neither would make another thread's out-of-memory release find nothing
            // (tests/loom_sharded.rs).
            for (chunk, stream) in a.heap.take_free_chunks(0) {
                // Superblock sizes came from `usize` requests, so they fit.
                if let Err(e) =
                    self.global_deallocate(DevicePtr(chunk.base), chunk.size as usize, stream)
                {
                    first_err.get_or_insert(e);
                }
            }
        }
        let released = self.global.release()?;
        first_err.map_or(Ok(released), Err)
    }

    fn driver(&self) -> &dyn Driver {
        self.global.driver()
    }
}

impl<Up: DeviceMemoryResource> Drop for ArenaResource<Up> {
    fn drop(&mut self) {
        let _ctx = ContextScope::enter(self.global.driver(), self.context);
        let _scope = CallerScope::enter(NAME);
        let driver = self.global.driver();
        for a in self.arenas.iter_mut() {
            let a = a.get_mut();
            a.order.destroy(driver);
        }
        // Superblocks are still live in the global arena, last used on streams the default
        // stream may not follow: wait for the device before the global arena frees its chunks.
        let _ = driver.context_synchronize();
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<ArenaResource<crate::mr::CudaResource<D>>>();
    }
};
