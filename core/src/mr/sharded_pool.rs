//! [`ShardedPoolResource`]: per-thread shards — each a coalescing TLSF heap with per-stream free
//! lists — in front of one shared [`PoolResource`], so that many threads allocate at once
//! without sharing a lock.
//!
//! - **What it does**: every thread is given a shard on its first use, round robin (by default
//!   twice as many shards as hardware threads, so threads at once rarely share one; two
//!   threads on one shard interleave their blocks and hold more). A shard serves requests up
//!   to [`SHARD_MAX`] (4 MiB; `ArenaResource` stops at 256 KiB) from chunks it takes from the
//!   shared pool (the request rounded up to [`SHARD_CHUNK`], 512 KiB); larger requests go to
//!   the shared pool directly. Memory held stays bounded: a free that leaves a chunk wholly
//!   free gives it back to the shared pool at once unless the shard holds less than 1.05 × its
//!   live bytes plus two chunks (so a shard's spare room stays within that, with no scan of
//!   its chunks; after its threads free everything a shard keeps at most about 5 % of its
//!   peak); when the shared pool runs out of memory, every shard's wholly free chunks go back
//!   and the request is tried once more, and `release` gives them all back. The shared pool coalesces chunks given back, so
//!   memory a thread stops using flows to the threads that need it.
//! - **Thread safety**: `Send + Sync`. One lock per shard (on its own cache line), one for the
//!   shared pool; a thread takes its shard's lock, and the shared pool's only to move a chunk
//!   or serve a request above 4 MiB.
//!   Locks nest only shard → shared pool, never two shards, so they cannot deadlock.
//! - **Streams**: each shard keeps per-stream free lists with the pool's rules: memory freed
//!   on stream A is reused on A at once, and on B only after B waits on a cached event
//!   recorded on A. Chunks given back to the shared pool are filed under the stream that last
//!   freed into them, and the shared pool applies the same rule when another stream takes them.
//! - **Clone and ownership**: not `Clone`; owns the shared pool, which owns the upstream;
//!   dropping it waits for the device, then the pool gives every chunk back. Share it through
//!   an `Arc`.
//! - **Use and cost**: the pool for many threads. An allocation or a free from the allocating
//!   thread costs one thread-local read and an uncontended lock on top of the pool's O(1)
//!   heap path; a free from another thread looks through the shards (O(shards) lock
//!   attempts). Growth costs one allocation from the shared pool (amortized: chunks are at
//!   least 512 KiB). Requests above 4 MiB take the shared pool's lock: many threads making
//!   only such requests contend as on one pool.

use std::cell::Cell;

use crate::attribution::CallerScope;
use crate::driver::{ContextId, DevicePtr, Driver, MemInfo, StreamId};
use crate::mr::detail::context_scope::ContextScope;
use crate::mr::detail::growth::TRIM_ABOVE_LIVE;
use crate::mr::detail::heap::{round_to_granule, CoalescingHeap, FreeError};
use crate::mr::detail::stream_order::StreamOrder;
use crate::mr::pool::PoolResource;
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult};
use crate::sync::{thread_local, AtomicUsize, Mutex, MutexGuard, Ordering};

const NAME: &str = "ShardedPoolResource";

/// Shards take chunks of the request rounded up to this from the shared pool.
pub const SHARD_CHUNK: u64 = 512 << 10;

/// Requests above this (4 MiB) go to the shared pool directly: a shard would take a chunk of
/// their size and give it back on the free, two shared-pool operations for one. Measured on
/// W2 (1 B to 64 MiB, one thread, simulated GPU): 1.229 → 1.120 held over peak live, 80 → 40 ns per op.
pub const SHARD_MAX: u64 = 4 << 20;

/// The chunk a shard takes for a request of `size` bytes, or `None` on overflow: the request
/// rounded up to [`SHARD_CHUNK`]. Small chunks leave little room stranded at chunk ends, and
/// the shared pool merges them again: on a W3-shaped churn (tests/mr_sharded_pool.rs) 512 KiB
/// chunks held 1.10–1.11 × peak live by 1 to 8 threads against 1.13–1.24 for 2 MiB chunks;
/// growing by 1/16 of the shard held 1.25 on W1.
fn shard_chunk(size: u64) -> Option<u64> {
    Some(size.checked_add(SHARD_CHUNK - 1)? & !(SHARD_CHUNK - 1))
}

thread_local! {
    /// The shard this thread last used, and the resource it belongs to (the address of the
    /// resource's shard table): one entry, so a thread using one sharded pool reads its shard
    /// with one comparison.
    static MY_SHARD: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// One shard: a heap over chunks of the shared pool, and its event cache.
#[derive(Debug, Default)]
struct Shard {
    heap: CoalescingHeap,
    order: StreamOrder,
}

/// A shard's lock on a cache line of its own, so that threads on neighbouring shards do not
/// slow each other down.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(Mutex<Shard>);

/// Per-thread shards in front of a shared [`PoolResource`].
///
/// # Examples
///
/// ```
/// use emm_core::mr::{CudaResource, DeviceMemoryResource, ShardedPoolResource};
/// use emm_core::StreamId;
/// # fn demo<D: emm_core::Driver>(driver: std::sync::Arc<D>) -> emm_core::mr::MrResult<()> {
/// let pool = std::sync::Arc::new(ShardedPoolResource::new(CudaResource::<D>::new(driver)));
/// let worker = {
///     let pool = pool.clone();
///     std::thread::spawn(move || -> emm_core::mr::MrResult<()> {
///         let p = pool.allocate(1000, StreamId::DEFAULT)?;
///         pool.deallocate(p, 1000, StreamId::DEFAULT)
///     })
/// };
/// let q = pool.allocate(5000, StreamId::DEFAULT)?;
/// pool.deallocate(q, 5000, StreamId::DEFAULT)?;
/// # let _ = worker.join();
/// pool.release()?;
/// # Ok(()) }
/// ```
pub struct ShardedPoolResource<Up: DeviceMemoryResource> {
    shards: Box<[Padded]>,
    /// `shards.len() - 1`: the count is a power of two, so a thread's shard is a mask.
    mask: usize,
    /// The next shard to give a thread that has not used this resource yet (round robin, so
    /// threads that start together get shards of their own).
    next: AtomicUsize,
    shared: PoolResource<Up>,
    /// The context current when built: made current for the shards' driver calls (events).
    context: Option<ContextId>,
}

impl<Up: DeviceMemoryResource> ShardedPoolResource<Up> {
    /// Shards for twice the machine's hardware threads (at least 4, rounded up to a power of
    /// two) over a shared pool of
    /// `cuMemAlloc`-style chunks of `upstream` (exportable over IPC).
    pub fn new(upstream: Up) -> Self {
        let n = std::thread::available_parallelism().map_or(4, |n| 2 * n.get());
        Self::over(PoolResource::chunked(upstream), n.max(4))
    }

    /// `shards` shards (rounded up to a power of two) over the shared pool `shared`.
    pub fn over(shared: PoolResource<Up>, shards: usize) -> Self {
        let n = shards.clamp(1, 1 << 16).next_power_of_two();
        ShardedPoolResource {
            shards: (0..n).map(|_| Padded::default()).collect(),
            mask: n - 1,
            next: AtomicUsize::new(0),
            context: shared.driver().current_context().ok(),
            shared,
        }
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The shared pool the shards take chunks from.
    pub fn shared(&self) -> &PoolResource<Up> {
        &self.shared
    }

    /// Bytes the shards hold from the shared pool, and bytes live in them (granule-rounded).
    ///
    /// # Time complexity
    ///
    /// O(shards): takes every shard's lock in turn.
    pub fn shard_bytes(&self) -> (u64, u64) {
        (0..self.shards.len()).fold((0, 0), |(h, l), k| {
            let s = self.lock(k);
            (h + s.heap.held(), l + s.heap.live_bytes())
        })
    }

    fn lock(&self, k: usize) -> MutexGuard<'_, Shard> {
        // Nothing panics while the lock is held; were it poisoned, the state is still whole.
        self.shards[k & self.mask]
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn my_shard(&self) -> usize {
        let key = self.shards.as_ptr() as usize;
        MY_SHARD.with(|c| match c.get() {
            (k, shard) if k == key => shard,
            _ => self.assign_shard(c, key),
        })
    }

    #[cold]
    fn assign_shard(&self, c: &Cell<(usize, usize)>, key: usize) -> usize {
        let shard = self.next.fetch_add(1, Ordering::Relaxed) & self.mask;
        c.set((key, shard));
        shard
    }

    /// The shard has no block for `size` on `stream`: take another stream's, or a chunk.
    #[cold]
    #[inline(never)]
    fn allocate_slow(
        &self,
        s: &mut Shard,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        let slot = s.heap.slot(stream);
        if let Some(other) = s.heap.find_elsewhere(slot, size) {
            let source = s.heap.stream_of(other);
            {
                let _ctx = ContextScope::enter(self.shared.driver(), self.context);
                let _scope = CallerScope::enter(NAME);
                s.order.order(self.shared.driver(), source, stream)?;
            }
            s.heap.adopt(slot, other);
            if let Some(p) = s.heap.allocate(slot, size, bytes) {
                return Ok(DevicePtr(p));
            }
        }
        let chunk = shard_chunk(size).ok_or(MrError::OutOfMemory {
            resource: NAME,
            requested: bytes,
            available: None,
        })?;
        let n = usize::try_from(chunk).map_err(|_| MrError::OutOfMemory {
            resource: NAME,
            requested: bytes,
            available: None,
        })?;
        // Chunks come from the shared pool usable on `stream` at once.
        let c = self.shared.allocate(n, stream)?;
        let slot = s.heap.slot(stream);
        s.heap.add_chunk(slot, c.0, chunk);
        s.heap
            .allocate(slot, size, bytes)
            .map(DevicePtr)
            .ok_or(MrError::OutOfMemory {
                resource: NAME,
                requested: bytes,
                available: None,
            })
    }

    /// Gives the shard's wholly free chunks, but `keep` of them, back to the shared pool.
    fn give_back(&self, s: &mut Shard, keep: usize) -> MrResult<u64> {
        let mut first_err = None;
        let mut given = 0;
        for (chunk, stream) in s.heap.take_free_chunks(keep) {
            given += chunk.size;
            // Chunk sizes came from `usize` requests, so they fit.
            if let Err(e) =
                self.shared
                    .deallocate(DevicePtr(chunk.base), chunk.size as usize, stream)
            {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(given), Err)
    }

    /// Frees into shard `k`; `Err(NotLive)` when the block is not that shard's.
    fn free_in(
        &self,
        k: usize,
        ptr: DevicePtr,
        bytes: u64,
        stream: StreamId,
    ) -> Result<MrResult<()>, FreeError> {
        let mut s = self.lock(k);
        let slot = match s.heap.slot_of(stream) {
            Some(slot) => slot,
            None if s.heap.is_live(ptr.0) => s.heap.slot(stream),
            None => return Err(FreeError::NotLive),
        };
        match s.heap.deallocate_in_chunk(ptr.0, bytes, slot) {
            Ok((_, Some(base))) => {
                // Give the wholly free chunk back while the rest of the shard still holds
                // 1.05 × its live bytes; keep it when it is the shard's last room, so that a
                // thread allocating and freeing one block in a loop never reaches the shared
                // pool.
                let (held, live) = (s.heap.held(), s.heap.live_bytes());
                if held as f64 >= TRIM_ABOVE_LIVE * live as f64 + (2 * SHARD_CHUNK) as f64 {
                    if let Some((c, st)) = s.heap.take_free_chunk_at(base) {
                        let r = self
                            .shared
                            .deallocate(DevicePtr(c.base), c.size as usize, st);
                        return Ok(r);
                    }
                }
                Ok(Ok(()))
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

    /// Out of memory: other shards may hold wholly free chunks the request needs; give every
    /// shard's back to the shared pool, and its free chunks to the upstream, and try once more.
    #[cold]
    #[inline(never)]
    fn allocate_after_release(
        &self,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        // Try again even when this release gave nothing back: another thread's release may
        // have given the memory to the upstream since the request failed (tests/loom_sharded.rs).
        let _ = self.release();
        let mut s = self.lock(self.my_shard());
        self.allocate_slow(&mut s, size, bytes, stream)
    }
}

impl<Up: DeviceMemoryResource> ShardedPoolResource<Up> {
    /// Out of memory for a request above [`SHARD_MAX`]: the shards' spare chunks may be what
    /// it needs; give them back and try once more.
    #[cold]
    #[inline(never)]
    fn allocate_large_after_release(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        // Try again even when this release gave nothing back: another thread's release may
        // have given the memory to the upstream since the request failed (tests/loom_sharded.rs).
        let _ = self.release();
        self.shared.allocate(bytes, stream)
    }
}

impl<Up: DeviceMemoryResource> std::fmt::Debug for ShardedPoolResource<Up> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(NAME)
            .field("shards", &self.shards.len())
            .field("shared", &self.shared)
            .finish()
    }
}

impl<Up: DeviceMemoryResource> DeviceMemoryResource for ShardedPoolResource<Up> {
    fn name(&self) -> &'static str {
        NAME
    }

    /// # Time complexity
    ///
    /// O(1) when the thread's shard has a fitting block on `stream`; O(free blocks of one
    /// other stream) when it takes that stream's; one shared-pool allocation when it grows.
    #[inline]
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let b = bytes as u64;
        let size = round_to_granule(b).ok_or(MrError::OutOfMemory {
            resource: NAME,
            requested: b,
            available: None,
        })?;
        if b > SHARD_MAX {
            // A chunk of its own would come from the shared pool and go back when freed: take
            // the block from there directly.
            return match self.shared.allocate(bytes, stream) {
                Err(e) if e.is_out_of_memory() => self.allocate_large_after_release(bytes, stream),
                r => r,
            };
        }
        let r = {
            let mut s = self.lock(self.my_shard());
            // Budget: one thread-local read, an uncontended lock, the pool's heap fast path.
            if let Some(p) = s
                .heap
                .slot_of(stream)
                .and_then(|slot| s.heap.allocate(slot, size, b))
            {
                return Ok(DevicePtr(p));
            }
            self.allocate_slow(&mut s, size, b, stream)
        };
        match r {
            Err(e) if e.is_out_of_memory() => self.allocate_after_release(size, b, stream),
            r => r,
        }
    }

    /// # Time complexity
    ///
    /// O(1) from the allocating thread's shard; O(shards) lock attempts from another thread.
    #[inline]
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        let b = bytes as u64;
        if b > SHARD_MAX {
            return self.shared.deallocate(ptr, bytes, stream);
        }
        let mine = self.my_shard();
        for k in std::iter::once(mine).chain((0..self.shards.len()).filter(|&k| k != mine)) {
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
        self.shared.memory_info()
    }

    /// Gives every shard's wholly free chunks back to the shared pool (coalescing frees made
    /// on several streams first, after a context synchronize), then the shared pool's free
    /// chunks to the upstream.
    fn release(&self) -> MrResult<u64> {
        let _ctx = ContextScope::enter(self.shared.driver(), self.context);
        let mut first_err = None;
        let driver = self.shared.driver();
        for k in 0..self.shards.len() {
            let mut s = self.lock(k);
            s.heap.coalesce_streams(StreamId::DEFAULT, || {
                let _scope = CallerScope::enter(NAME);
                driver.context_synchronize()
            })?;
            if let Err(e) = self.give_back(&mut s, 0) {
                first_err.get_or_insert(e);
            }
        }
        let released = self.shared.release()?;
        first_err.map_or(Ok(released), Err)
    }

    fn driver(&self) -> &dyn Driver {
        self.shared.driver()
    }
}

impl<Up: DeviceMemoryResource> Drop for ShardedPoolResource<Up> {
    fn drop(&mut self) {
        let _ctx = ContextScope::enter(self.shared.driver(), self.context);
        let _scope = CallerScope::enter(NAME);
        let driver = self.shared.driver();
        for s in self.shards.iter_mut() {
            let s = s.0.get_mut().unwrap_or_else(|e| e.into_inner());
            s.order.destroy(driver);
        }
        // Chunks are still live in the shared pool, last used on streams the default stream
        // may not follow: wait for the device before the pool frees its memory.
        let _ = driver.context_synchronize();
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<ShardedPoolResource<crate::mr::CudaResource<D>>>();
    }
};
