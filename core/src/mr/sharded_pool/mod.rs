//! [`ShardedPoolResource`]: per-thread shards — each a coalescing TLSF heap with per-stream free
//! lists — in front of one shared [`PoolResource`], so that many threads allocate at once
//! without sharing a lock.
//!
//! - **What it does**: every thread is given a shard on its first use, round robin (by default
//!   twice as many shards as hardware threads, so threads at once rarely share one; two
//!   threads on one shard interleave their blocks and hold more). A shard serves every request
//!   from chunks it takes from the shared pool and keeps them: a free never reaches the shared
//!   pool, so a thread whose live memory rises and falls — down to nothing at the end of each
//!   step of a loop — takes the same memory from its shard again, with no lock but its own and
//!   no driver call. A growing shard takes the request rounded up to [`SHARD_CHUNK`] (1 MiB),
//!   or 1/64 of its live bytes up to 2 MiB if more, so that a climbing thread moves a chunk
//!   every few allocations, not every one; a request above 2 MiB takes up to 1/64 of the
//!   live bytes (at most 4 × the request), so that large blocks freed later merge in it.
//! - **Memory held**: chunks move between shards when memory is needed, not when it is freed.
//!   A shard keeps its *recent peak* of live bytes — the largest over the last
//!   `PEAK_WINDOW` allocations, and before that a peak that halves its distance to each
//!   window's largest — since its thread will likely climb there again. A growing shard takes,
//!   in this order: another shard's wholly free chunks beyond 1.05 × that shard's recent peak
//!   (from the shard with the most beyond it first; the smallest that fits, then more up to
//!   8 MiB or 1/8 of the thief's live bytes); a chunk from the shared pool, while the shared
//!   pool then holds at most `HELD_BUDGET` (1.20) × the largest total of live bytes a grower
//!   has seen (each shard publishes its live bytes as it unlocks); else other shards' wholly
//!   free chunks
//!   beyond 1.05 × their live bytes (as before peaks were kept; again the richest shard first),
//!   gathered into the shared pool if none fits alone. When it takes a chunk, a shard gives its
//!   own wholly free chunks back beyond 1.05 × its live bytes plus one chunk (as `PoolResource`
//!   does before it grows), in the same call to the shared pool ([`PoolResource::exchange`]):
//!   one lock of the shared pool, one chunk move. So the shared pool calls the driver only
//!   when no thread has memory to spare or the budget allows it. Growers choose whom to take
//!   from by what each shard published at its last unlock, with no lock; before the shared
//!   pool grows beyond the budget they look again under each shard's lock. When the shared
//!   pool runs out of memory, every shard's wholly free chunks go back and the request is
//!   tried once more; `release` gives them all back.
//! - **Thread safety**: `Send + Sync`. One lock per shard (on its own cache line), one for the
//!   shared pool; a thread takes its shard's lock, and the shared pool's only to move a chunk.
//!   A thread holds at most one shard's lock at a time (it lets its own go before it gathers
//!   other shards' chunks), and locks nest only shard → shared pool, so they cannot deadlock.
//! - **Streams**: each shard keeps per-stream free lists with the pool's rules: memory freed
//!   on stream A is reused on A at once, and on B only after B waits on a cached event
//!   recorded on A after the free. A chunk moving from one shard to another on another stream
//!   needs no new event when the thief's stream already waited on one recorded on the chunk's
//!   stream after its last free: each shard stamps the chunks it sees made wholly free with a
//!   count, and a thief remembers, per (its stream, source stream, victim shard), the victim's
//!   count when it last ordered its stream after the source — the victim's lock orders the free
//!   before that count was read, and the record came after. A chunk made wholly free by an
//!   adoption (a stream taking another stream's blocks) is recorded as spare then, so growth
//!   finds it. Chunks given back to the shared pool are filed under the stream that last freed
//!   into them, and the shared pool applies the same rule when another stream takes them.
//! - **Clone and ownership**: not `Clone`; owns the shared pool, which owns the upstream;
//!   dropping it waits for the device, then the pool gives every chunk back. Share it through
//!   an `Arc`.
//! - **Use and cost**: the pool for many threads. An allocation or a free from the allocating
//!   thread costs one thread-local read and an uncontended lock on top of the pool's O(1)
//!   heap path (and the recent peak's compare and count); a free from another thread looks
//!   through the shards (O(shards) lock attempts). Growth reads what every shard published
//!   at its last unlock to find the one with the most to spare, and locks only that one
//!   (O(shards + its spare chunks)), and takes chunks from another shard or the shared pool;
//!   once a thread's shard holds what its recent peak needs, it does not grow again. The
//!   many-threads benchmark counts the chunk moves and driver calls per 1 000 operations
//!   (the book's "Benchmarks", "Many threads").
//!
//! The front — shards, their locks and fast paths, frees from other threads, `release` — is
//! [`PerThreadPool`], shared with [`ArenaResource`](crate::mr::ArenaResource): what differs is
//! the [`ChunkPolicy`], [`Adaptive`] here (all of the above) and [`Superblocks`] there (fixed
//! superblocks, large requests straight to the shared pool, wholly free superblocks given back
//! on the free).
//!
//! Modules: this one holds the front and its fast paths (a thread's own shard, frees from
//! other threads); `shard` one shard and its lock; `chunk_policy` the two policies and how much
//! an adaptive shard takes and keeps; `chunk_moves` how chunks move between shards and the
//! shared pool.

mod chunk_moves;
mod chunk_policy;
mod shard;

pub use chunk_policy::{Adaptive, ChunkPolicy, Superblocks, SHARD_CHUNK, SUPERBLOCK};

use std::cell::Cell;
use std::marker::PhantomData;

use crate::attribution::CallerScope;
use crate::driver::{ContextId, DevicePtr, Driver, MemInfo, StreamId};
use crate::mr::detail::context_scope::ContextScope;
use crate::mr::detail::heap::{round_to_granule, FreeError};
use crate::mr::pool::PoolResource;
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult};
use crate::sync::{thread_local, AtomicUsize, Ordering};

use shard::{PaddedCount, PaddedLevels, PaddedShard, Shard, ShardGuard};

thread_local! {
    /// The shard this thread last used, and the resource it belongs to (the address of the
    /// resource's shard table): one entry, so a thread using one sharded pool reads its shard
    /// with one comparison.
    static MY_SHARD: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// Per-thread shards in front of a shared [`PoolResource`] (the module docs), for many threads
/// allocating at once, with [`Adaptive`] chunks.
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
pub type ShardedPoolResource<Up> = PerThreadPool<Up, Adaptive>;

/// The per-thread front of [`ShardedPoolResource`] and [`ArenaResource`](crate::mr::ArenaResource):
/// shards, each a heap with per-stream free lists behind its own lock, over a shared
/// [`PoolResource`]; the policy `P` says how a shard takes and keeps the shared pool's chunks
/// ([`ChunkPolicy`]). What the two share — a thread's shard and its fast paths, another
/// stream's blocks taken with an event, frees from other threads, the retry after out of
/// memory, `release`, the wait for the device on drop — is written once, here.
pub struct PerThreadPool<Up: DeviceMemoryResource, P: ChunkPolicy> {
    shards: Box<[PaddedShard]>,
    /// `shards.len() - 1`: the count is a power of two, so a thread's shard is a mask.
    mask: usize,
    /// The next shard to give a thread that has not used this resource yet (round robin, so
    /// threads that start together get shards of their own).
    next: AtomicUsize,
    shared: PoolResource<Up>,
    /// Chunks moved into or out of the shards, for [`DeviceMemoryResource::chunk_moves`]:
    /// counted on the slow paths only, once a call to the shared pool (chunks given back with
    /// the one taken count once) and once a steal.
    moves: PaddedCount,
    /// The largest total of the shards' live bytes a grower has seen: what [`HELD_BUDGET`]
    /// scales. Summed when growing from what each shard published at its last unlock
    /// ([`Self::total_live`]), read within a few loads, so it stays close to the true peak.
    peak_live: PaddedCount,
    /// The shared pool's levels after the last call into it that changed them: read by growers
    /// with no lock ([`Self::within_budget`]).
    shared_levels: PaddedLevels,
    /// The context current when built: made current for the shards' driver calls (events).
    context: Option<ContextId>,
    policy: PhantomData<P>,
}

/// Twice the machine's hardware threads, at least 4: the default number of shards.
fn default_shards() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| 2 * n.get())
        .max(4)
}

impl<Up: DeviceMemoryResource> PerThreadPool<Up, Adaptive> {
    /// Shards for twice the machine's hardware threads (at least 4, rounded up to a power of
    /// two) over a shared pool of
    /// `cuMemAlloc`-style chunks of `upstream` (exportable over IPC).
    pub fn new(upstream: Up) -> Self {
        Self::over(PoolResource::chunked(upstream), default_shards())
    }

    /// `shards` shards (rounded up to a power of two) over the shared pool `shared`.
    pub fn over(shared: PoolResource<Up>, shards: usize) -> Self {
        Self::with_shards(shared, shards)
    }
}

impl<Up: DeviceMemoryResource> PerThreadPool<Up, Superblocks> {
    /// Arenas for twice the machine's hardware threads (at least 4) over `upstream`.
    pub fn new(upstream: Up) -> Self {
        Self::with_arenas(upstream, default_shards())
    }

    /// `arenas` arenas (rounded up to a power of two) over a global arena of
    /// `cuMemAlloc`-style chunks of `upstream` (the arena manager exports memory over IPC).
    pub fn with_arenas(upstream: Up, arenas: usize) -> Self {
        Self::with_shards(PoolResource::chunked(upstream), arenas)
    }

    /// Requests up to this many bytes are served by the thread's arena (256 KiB).
    pub fn small_max(&self) -> u64 {
        Superblocks::DIRECT_ABOVE
    }

    /// Number of arenas.
    pub fn arenas(&self) -> usize {
        self.shards.len()
    }

    /// The global arena.
    pub fn global(&self) -> &PoolResource<Up> {
        &self.shared
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        self.shared.upstream()
    }
}

impl<Up: DeviceMemoryResource, P: ChunkPolicy> PerThreadPool<Up, P> {
    /// `shards` shards (rounded up to a power of two) over the shared pool `shared`.
    fn with_shards(shared: PoolResource<Up>, shards: usize) -> Self {
        let n = shards.clamp(1, 1 << 16).next_power_of_two();
        let shared_levels = PaddedLevels::default();
        shared_levels.store(shared.levels());
        PerThreadPool {
            shards: (0..n).map(|_| PaddedShard::default()).collect(),
            mask: n - 1,
            next: AtomicUsize::new(0),
            moves: PaddedCount::default(),
            peak_live: PaddedCount::default(),
            shared_levels,
            context: shared.driver().current_context().ok(),
            shared,
            policy: PhantomData,
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

    /// Number of streams whose free lists the shards keep, all shards together: at least
    /// those holding free blocks in a shard, and, once a shard has gone through many streams,
    /// about twice that at most (8 KiB each).
    ///
    /// # Time complexity
    ///
    /// O(shards): takes every shard's lock in turn.
    pub fn stream_lists(&self) -> usize {
        (0..self.shards.len())
            .map(|k| self.lock_fast(k).heap.slot_count())
            .sum()
    }

    /// Gives `back` to the shared pool and takes `bytes` (none: 0) from it, under one lock of
    /// the shared pool: counted as one move.
    fn shared_exchange(
        &self,
        back: &[(DevicePtr, usize, StreamId)],
        bytes: usize,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        self.moves.0.fetch_add(1, Ordering::Relaxed);
        match self.shared.exchange(back, bytes, stream) {
            Ok((p, levels)) => {
                self.shared_levels.store(levels);
                Ok(p)
            }
            Err(e) => {
                self.shared_levels.store(self.shared.levels());
                Err(e)
            }
        }
    }

    /// Gives `ptr` back to the shared pool (its lock), counted.
    fn shared_deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        self.moves.0.fetch_add(1, Ordering::Relaxed);
        self.shared.deallocate(ptr, bytes, stream)
    }

    #[inline]
    fn lock(&self, k: usize) -> ShardGuard<'_> {
        let mut s = self.lock_fast(k);
        s.full = true;
        s
    }

    /// Locks shard `k` for the fast path, which publishes only its live bytes at unlock (15
    /// instructions an operation fewer, by callgrind on W3). The fast path changes the rest
    /// only so: a free that leaves a chunk wholly free lists it (that free publishes it all);
    /// an allocation raises the recent peak (left unpublished, it makes growers think the
    /// shard has more to spare, and they find out under its lock).
    #[inline]
    fn lock_fast(&self, k: usize) -> ShardGuard<'_> {
        let p = &self.shards[k & self.mask];
        ShardGuard {
            shard: p.lock.lock(),
            published: &p.published,
            full: false,
        }
    }

    /// Every shard's live bytes as of its last unlock, summed: one read a shard, no lock. Summing
    /// under each shard's lock in turn instead counted one thread's peak and then another's
    /// when the grower waited on a lock in between, and an estimate of the peak inflated so
    /// let the shared pool grow: with 8 threads on this 2-core machine under load, up to
    /// 1.63 × peak live.
    fn total_live(&self) -> u64 {
        self.shards
            .iter()
            .map(|p| p.published.live.load(Ordering::Relaxed))
            .fold(0, u64::saturating_add)
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

    /// The shard has no block for `size` on `stream`: take another stream's, if one fits.
    #[cold]
    #[inline(never)]
    fn take_other_streams_block(
        &self,
        s: &mut Shard,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> MrResult<Option<DevicePtr>> {
        // Before any slot number is held: a sweep may give an empty slot to another stream.
        s.heap.sweep_slots_if_due();
        let Shard { heap, order, .. } = &mut *s;
        order.prune(self.shared.driver(), |on| heap.slot_of(on).is_some());
        let slot = s.heap.slot(stream);
        let Some(other) = s.heap.find_elsewhere(slot, size) else {
            return Ok(None);
        };
        let source = s.heap.stream_of(other);
        {
            let _ctx = ContextScope::enter(self.shared.driver(), self.context);
            let _scope = CallerScope::enter(P::NAME);
            s.order.order(self.shared.driver(), source, stream)?;
        }
        // Merging the two streams' blocks may have left chunks wholly free that no free
        // recorded: growth finds spare chunks only through the list.
        let mut whole = Vec::new();
        s.heap.adopt_noting(slot, other, |base| whole.push(base));
        for base in whole {
            s.push_spare(base, stream);
        }
        Ok(Self::allocate_in(s, slot, size, bytes))
    }

    /// Allocates from `slot`'s lists of `s`, noting the allocation for the recent peak.
    #[inline]
    fn allocate_in(s: &mut Shard, slot: usize, size: u64, bytes: u64) -> Option<DevicePtr> {
        let p = s.heap.allocate(slot, size, bytes)?;
        s.note_allocation();
        Some(DevicePtr(p))
    }

    /// A free from a thread other than the allocating one: the block is in another shard, or
    /// in none.
    #[cold]
    #[inline(never)]
    fn free_elsewhere(
        &self,
        mine: usize,
        ptr: DevicePtr,
        bytes: u64,
        stream: StreamId,
    ) -> MrResult<()> {
        for k in (0..self.shards.len()).filter(|&k| k != mine) {
            if let Ok(result) = self.free_in(k, ptr, bytes, stream) {
                return result;
            }
        }
        Err(MrError::InvalidFree {
            resource: P::NAME,
            ptr,
            bytes,
            reason: FreeError::NotLive.reason(),
        })
    }

    /// Frees into shard `k`; `Err(NotLive)` when the block is not that shard's.
    #[inline]
    fn free_in(
        &self,
        k: usize,
        ptr: DevicePtr,
        bytes: u64,
        stream: StreamId,
    ) -> Result<MrResult<()>, FreeError> {
        let mut s = self.lock_fast(k);
        let slot = match s.heap.slot_of(stream) {
            Some(slot) => slot,
            // A stream's lists are made on its first good free, so a bad one changes nothing;
            // as on a new stream's first allocation, slots holding no free block are reused
            // once the shard has gone through many streams.
            None if s.heap.is_live(ptr.0) => {
                s.heap.sweep_slots_if_due();
                s.heap.slot(stream)
            }
            None => return Err(FreeError::NotLive),
        };
        // The shard keeps what is freed: chunks go back only when memory is needed (`grow`).
        match s.heap.deallocate_in_chunk(ptr.0, bytes, slot) {
            Ok((_, None)) => Ok(Ok(())),
            Ok((_, Some(_))) if P::SUPERBLOCKS => {
                s.full = true;
                // Wholly free superblocks go back to the global arena, but one stays: an arena
                // that fills and empties a superblock in a loop must not take and return it
                // through the global lock on every iteration.
                if s.heap.chunks().len() > 1 {
                    return Ok(self.give_back(&mut s, 1).map(drop));
                }
                Ok(Ok(()))
            }
            Ok((_, Some(base))) => {
                s.full = true;
                s.push_spare(base, stream);
                // Stale entries are dropped now and then, so the list stays O(chunks).
                if s.spare.len() > 2 * s.heap.chunks().len() + 16 {
                    s.prune_spare();
                }
                Ok(Ok(()))
            }
            Err(FreeError::NotLive) => Err(FreeError::NotLive),
            Err(e) => Ok(Err(MrError::InvalidFree {
                resource: P::NAME,
                ptr,
                bytes,
                reason: e.reason(),
            })),
        }
    }

    /// A request above [`ChunkPolicy::DIRECT_ABOVE`]: from the shared pool, counted as a move;
    /// on out of memory, once more after every shard's wholly free chunks went back.
    #[cold]
    #[inline(never)]
    fn allocate_direct(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        // The shared pool's plain allocation, not an exchange: only adaptive growers read the
        // levels an exchange publishes.
        self.moves.0.fetch_add(1, Ordering::Relaxed);
        match self.shared.allocate(bytes, stream) {
            Err(e) if e.is_out_of_memory() => {
                // Again even when this release gave nothing back: another thread's release
                // may have given the memory to the upstream since (tests/loom_sharded.rs).
                let _ = self.release();
                self.shared.allocate(bytes, stream)
            }
            r => r,
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
        let mine = self.my_shard();
        let s = self.lock(mine);
        self.take_chunk(mine, s, size, bytes, stream)
    }
}

impl<Up: DeviceMemoryResource, P: ChunkPolicy> std::fmt::Debug for PerThreadPool<Up, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(P::NAME)
            .field("shards", &self.shards.len())
            .field("shared", &self.shared)
            .finish()
    }
}

impl<Up: DeviceMemoryResource, P: ChunkPolicy> DeviceMemoryResource for PerThreadPool<Up, P> {
    fn name(&self) -> &'static str {
        P::NAME
    }

    /// # Time complexity
    ///
    /// O(1) when the thread's shard has a fitting block on `stream`; O(free blocks of one
    /// other stream) when it takes that stream's; O(shards + their chunks) and one shared-pool
    /// allocation when it grows.
    #[inline]
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let b = bytes as u64;
        if b > P::DIRECT_ABOVE {
            return self.allocate_direct(bytes, stream);
        }
        let size = round_to_granule(b).ok_or(MrError::OutOfMemory {
            resource: P::NAME,
            requested: b,
            available: None,
        })?;
        let mine = self.my_shard();
        let (my_live, covered);
        {
            let mut s = self.lock_fast(mine);
            // Budget: one thread-local read, an uncontended lock, the pool's heap fast path.
            if let Some(p) = s
                .heap
                .slot_of(stream)
                .and_then(|slot| Self::allocate_in(&mut s, slot, size, b))
            {
                return Ok(p);
            }
            s.full = true;
            // The fast path finds no block also when the block slab cannot grow: then no
            // path below can record one either, and the host's refusal is the answer.
            s.heap
                .reserve_records(2)
                .map_err(|full| MrError::records_full(P::NAME, b, full))?;
            if let Some(p) = self.take_other_streams_block(&mut s, size, b, stream)? {
                return Ok(p);
            }
            if P::SUPERBLOCKS {
                // An arena takes a superblock from the global arena, and nothing from others.
                return match self.take_chunk(mine, s, size, b, stream) {
                    Err(e) if e.is_out_of_memory() => self.allocate_after_release(size, b, stream),
                    r => r,
                };
            }
            my_live = s.heap.live_bytes();
            covered = s
                .covered
                .iter()
                .filter(|c| c.waiter == stream)
                .copied()
                .collect::<Vec<_>>();
        }
        // This shard's lock is let go: growing locks the other shards in turn.
        match self.grow(mine, size, b, stream, my_live, &covered) {
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
        if b > P::DIRECT_ABOVE {
            return self.shared_deallocate(ptr, bytes, stream);
        }
        let mine = self.my_shard();
        match self.free_in(mine, ptr, b, stream) {
            Ok(result) => result,
            Err(_) => self.free_elsewhere(mine, ptr, b, stream),
        }
    }

    fn memory_info(&self) -> Option<MemInfo> {
        self.shared.memory_info()
    }

    fn chunk_moves(&self) -> Option<u64> {
        Some(self.moves.0.load(Ordering::Relaxed))
    }

    /// The shared pool's: the shards' chunks come from it.
    fn held(&self) -> Option<u64> {
        Some(self.shared.held_bytes())
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
                let _scope = CallerScope::enter(P::NAME);
                driver.context_synchronize()
            })?;
            if let Err(e) = self.give_back(&mut s, 0) {
                first_err.get_or_insert(e);
            }
        }
        let released = self.shared.release();
        self.shared_levels.store(self.shared.levels());
        first_err.map_or(released, Err)
    }

    fn driver(&self) -> &dyn Driver {
        self.shared.driver()
    }
}

impl<Up: DeviceMemoryResource, P: ChunkPolicy> Drop for PerThreadPool<Up, P> {
    fn drop(&mut self) {
        let _ctx = ContextScope::enter(self.shared.driver(), self.context);
        let _scope = CallerScope::enter(P::NAME);
        let driver = self.shared.driver();
        for s in self.shards.iter_mut() {
            let s = s.lock.get_mut();
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
