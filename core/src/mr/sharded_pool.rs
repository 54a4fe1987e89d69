//! [`ShardedPoolResource`]: per-thread shards — each a coalescing TLSF heap with per-stream free
//! lists — in front of one shared [`PoolResource`], so that many threads allocate at once
//! without sharing a lock.
//!
//! - **What it does**: every thread is given a shard on its first use, round robin (by default
//!   twice as many shards as hardware threads, so threads at once rarely share one; two
//!   threads on one shard interleave their blocks and hold more). A shard serves every request
//!   from chunks it takes from the shared pool (the request rounded up to [`SHARD_CHUNK`],
//!   1 MiB) and keeps them: a free never reaches the shared pool, so a thread whose live memory
//!   rises and falls — down to nothing at the end of each step of a loop — takes the same
//!   memory from its shard again, with no lock but its own and no driver call. Memory held
//!   stays bounded because a shard gives chunks back when memory is needed, not when it is
//!   freed: before it takes a chunk, a shard gives its own wholly free chunks back if it would
//!   otherwise hold more than 1.05 × its live bytes plus one chunk (as `PoolResource` does
//!   before it grows), and moves other shards' wholly free chunks beyond 1.05 × their live
//!   bytes (the smallest that makes up the chunk first) into the shared pool until they make
//!   up the chunk. So memory a
//!   thread stopped using serves the thread that grows, and the shared pool takes memory from
//!   the driver only when no shard has any to spare. When the shared pool runs out of memory, every shard's wholly free chunks go
//!   back and the request is tried once more; `release` gives them all back.
//! - **Thread safety**: `Send + Sync`. One lock per shard (on its own cache line), one for the
//!   shared pool; a thread takes its shard's lock, and the shared pool's only to move a chunk.
//!   A thread holds at most one shard's lock at a time (it lets its own go before it gathers
//!   other shards' chunks), and locks nest only shard → shared pool, so they cannot deadlock.
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
//!   attempts). Growth locks every shard in turn (O(shards + their chunks)) and takes one
//!   chunk from the shared pool; once a thread's shard holds what its peak needs, it does not
//!   grow again. The many-threads benchmark counts the shared-pool and driver calls per
//!   1 000 operations (README, "Many threads").

use std::cell::Cell;

use crate::attribution::CallerScope;
use crate::driver::{ContextId, DevicePtr, Driver, MemInfo, StreamId};
use crate::mr::detail::context_scope::ContextScope;
use crate::mr::detail::growth::TRIM_ABOVE_LIVE;
use crate::mr::detail::heap::{round_to_granule, Chunk, CoalescingHeap, FreeError};
use crate::mr::detail::stream_order::StreamOrder;
use crate::mr::pool::PoolResource;
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult};
use crate::sync::{thread_local, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};

const NAME: &str = "ShardedPoolResource";

/// Shards take chunks of the request rounded up to this (1 MiB) from the shared pool. Measured
/// here (README, "Many threads"): while shards gave chunks back on frees, W1 (1 B to 1 MiB) by
/// one thread moved 254 chunks through the shared pool per 1 000 operations with 512 KiB
/// chunks, 27 with 2 MiB and 2 with 8 MiB; once shards keep their chunks, the size sets how
/// finely memory moves between threads: on W2 by 2 and 4 threads, 1 MiB chunks moved 3.6–5.4
/// per 1 000 operations holding 1.13–1.16 × peak live, 2 MiB 3.2–65 holding 1.14–1.20; on
/// the W3-shaped churn of `tests/mr_sharded_pool.rs` (32 MB live per thread) 2 MiB chunks held
/// up to 1.54 × by 8 threads.
pub const SHARD_CHUNK: u64 = 1 << 20;

/// A shard that takes another's spare chunks takes up to this many bytes (8 MiB) at once, so
/// that one event orders them all: on W1 by 2 to 16 threads here, taking one chunk at a time
/// made 1.8–3.1 ordering calls per 1 000 operations.
const STEAL_BATCH: u64 = 8 << 20;

/// The chunk a shard takes for a request of `size` bytes, or `None` on overflow.
fn shard_chunk(size: u64) -> Option<u64> {
    Some(size.checked_add(SHARD_CHUNK - 1)? & !(SHARD_CHUNK - 1))
}

/// A shard holding more than this × its live bytes gives wholly free chunks back when memory is
/// needed — its own before it grows (beyond one spare chunk, as a pool trims before it grows),
/// another's when another shard grows: the pool's trim threshold, 1.05. A wider band for the
/// other shards (1.25) held up to 1.28 × peak live on W2 and moved no fewer chunks.
const KEEP_ABOVE_LIVE: f64 = TRIM_ABOVE_LIVE;

/// What a shard with `live` bytes live keeps: [`KEEP_ABOVE_LIVE`] × live plus `spare`.
fn band(live: u64, spare: u64) -> u64 {
    ((KEEP_ABOVE_LIVE * live as f64) as u64).saturating_add(spare)
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
    /// `(size, base)` of chunks a free left wholly free: where growth looks for spare chunks,
    /// so that it costs O(spare chunks), not O(chunks) (W1 by 16 threads: a shard holds
    /// hundreds of 1 MiB chunks). Entries go stale when a chunk is used again; they are
    /// checked before use and pruned.
    spare: Vec<(u64, u64)>,
}

impl Shard {
    /// Drops the entries of [`Shard::spare`] whose chunk is no longer wholly free, and
    /// duplicates.
    fn prune_spare(&mut self) {
        let heap = &self.heap;
        self.spare
            .retain(|&(_, base)| heap.free_chunk_size(base).is_some());
        self.spare.sort_unstable_by_key(|&(_, base)| base);
        self.spare.dedup_by_key(|&mut (_, base)| base);
    }

    /// Orders the live spare chunks for taking: the smallest of at least `need` bytes first,
    /// then the others largest first (the others keep the chunks their own large requests
    /// need).
    fn spare_in_order(&mut self, need: u64) {
        self.prune_spare();
        self.spare.sort_unstable_by_key(|&(size, base)| {
            if size >= need {
                (false, size, base)
            } else {
                (true, u64::MAX - size, base)
            }
        });
    }
}

/// A shard's lock on a cache line of its own, so that threads on neighbouring shards do not
/// slow each other down.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(Mutex<Shard>);

/// A counter on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct PaddedCount(AtomicU64);

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
    /// Chunks moved into or out of the shards, for [`DeviceMemoryResource::chunk_moves`]:
    /// counted on the slow paths only.
    moves: PaddedCount,
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
            moves: PaddedCount::default(),
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

    /// Takes `bytes` from the shared pool (its lock), counted.
    fn shared_allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        self.moves.0.fetch_add(1, Ordering::Relaxed);
        self.shared.allocate(bytes, stream)
    }

    /// Gives `ptr` back to the shared pool (its lock), counted.
    fn shared_deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        self.moves.0.fetch_add(1, Ordering::Relaxed);
        self.shared.deallocate(ptr, bytes, stream)
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
        let slot = s.heap.slot(stream);
        let Some(other) = s.heap.find_elsewhere(slot, size) else {
            return Ok(None);
        };
        let source = s.heap.stream_of(other);
        {
            let _ctx = ContextScope::enter(self.shared.driver(), self.context);
            let _scope = CallerScope::enter(NAME);
            s.order.order(self.shared.driver(), source, stream)?;
        }
        s.heap.adopt(slot, other);
        Ok(s.heap.allocate(slot, size, bytes).map(DevicePtr))
    }

    /// Nothing in shard `mine` fits: gather enough of the other shards' spare chunks into the
    /// shared pool, then take a chunk from it. Called with no shard locked.
    #[cold]
    #[inline(never)]
    fn grow(&self, mine: usize, size: u64, bytes: u64, stream: StreamId) -> MrResult<DevicePtr> {
        // Another shard's spare chunk that fits moves here whole: no shared-pool call, and the
        // shared pool does not split it for another size. On W2 by 2 threads here, moving
        // chunks through the shared pool instead took 4–100 shared-pool calls per 1 000
        // operations (the pool split big chunks for small requests) and ran 7–13 M ops/s
        // against 25–41 M.
        let stolen = self.steal(mine, size);
        if !stolen.is_empty() {
            self.moves.0.fetch_add(1, Ordering::Relaxed);
            let mut s = self.lock(mine);
            let live = s.heap.live_bytes().saturating_add(size);
            let got: u64 = stolen.iter().map(|(c, _)| c.size).sum();
            let target = band(live, SHARD_CHUNK).saturating_sub(got);
            if s.heap.held() > target {
                self.trim(&mut s, target, u64::MAX);
            }
            // The chunks join this shard's lists for `stream` once `stream` follows the
            // streams they were freed on (one event each; one stream per thread in the bench).
            let slot = s.heap.slot(stream);
            let mut ordered: Vec<StreamId> = Vec::new();
            for (c, from) in stolen {
                s.heap.add_chunk(slot, c.base, c.size);
                // Wholly free until used: spare for the next grower meanwhile.
                s.spare.push((c.size, c.base));
                if from != stream && !ordered.contains(&from) {
                    ordered.push(from);
                    let _ctx = ContextScope::enter(self.shared.driver(), self.context);
                    let _scope = CallerScope::enter(NAME);
                    s.order.order(self.shared.driver(), from, stream)?;
                }
            }
            if let Some(p) = s.heap.allocate(slot, size, bytes) {
                return Ok(DevicePtr(p));
            }
        }
        // Gather whatever the shared pool holds free already: a free block there may not fit
        // (another size, another chunk), and without the other shards' spares the pool would
        // take the chunk from the driver. Measured on W2 by 4 threads here, gathering only when
        // the pool held less free memory than the chunk held 2.0–3.4 × peak live.
        self.reclaim(mine, shard_chunk(size).unwrap_or(u64::MAX));
        let mut s = self.lock(mine);
        // Another thread may have freed into this shard meanwhile.
        if let Some(p) = s
            .heap
            .slot_of(stream)
            .and_then(|slot| s.heap.allocate(slot, size, bytes))
        {
            return Ok(DevicePtr(p));
        }
        self.take_chunk(&mut s, size, bytes, stream)
    }

    /// Takes a chunk for `size` bytes from the shared pool into `s` and serves the request from
    /// it; first, if `s` would then hold more than [`KEEP_ABOVE_LIVE`] allows, gives wholly
    /// free chunks back (none fits, or the request would not be here), largest first, until
    /// it would not.
    fn take_chunk(
        &self,
        s: &mut Shard,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        let oom = || MrError::OutOfMemory {
            resource: NAME,
            requested: bytes,
            available: None,
        };
        let chunk = shard_chunk(size).ok_or_else(oom)?;
        let n = usize::try_from(chunk).map_err(|_| oom())?;
        let live = s.heap.live_bytes().saturating_add(size);
        // One chunk spare, so that a thread allocating and freeing one block in a loop keeps
        // its chunk.
        let target = band(live, SHARD_CHUNK).saturating_sub(chunk);
        if s.heap.held() > target {
            self.trim(s, target, u64::MAX);
        }
        // Chunks come from the shared pool usable on `stream` at once.
        let c = self.shared_allocate(n, stream)?;
        let slot = s.heap.slot(stream);
        s.heap.add_chunk(slot, c.0, chunk);
        s.heap
            .allocate(slot, size, bytes)
            .map(DevicePtr)
            .ok_or_else(oom)
    }

    /// Takes from another shard the smallest wholly free chunk of at least `size` bytes that
    /// it holds beyond [`KEEP_ABOVE_LIVE`], and more of its spare chunks, largest first, up to
    /// [`STEAL_BATCH`] in all, each with the stream it was last freed on; one shard locked at a
    /// time.
    ///
    /// # Time complexity
    ///
    /// O(shards) lock acquisitions and O(spare · log spare) for a shard beyond its band with
    /// spare chunks.
    fn steal(&self, mine: usize, size: u64) -> Vec<(Chunk, StreamId)> {
        let mut out = Vec::new();
        for k in (0..self.shards.len()).filter(|&k| k != mine) {
            let mut s = self.lock(k);
            let target = band(s.heap.live_bytes(), 0);
            let held = s.heap.held();
            if held <= target || s.spare.is_empty() {
                continue;
            }
            // The smallest that fits first, then the largest.
            s.spare_in_order(size);
            let mut got = 0u64;
            let mut taken = 0;
            while let Some(&(c, base)) = s.spare.get(taken) {
                let fits = got > 0 || c >= size;
                let batch = got >= size.max(STEAL_BATCH);
                if !fits || batch || s.heap.held().saturating_sub(c) < target {
                    break;
                }
                // Pruned just now, under this lock: wholly free.
                if let Some(chunk) = s.heap.take_free_chunk_at(base) {
                    got += c;
                    out.push(chunk);
                }
                taken += 1;
            }
            s.spare.drain(..taken);
            if !out.is_empty() {
                break;
            }
        }
        out
    }

    /// Gives other shards' wholly free chunks beyond [`KEEP_ABOVE_LIVE`] back to the shared
    /// pool, one shard locked at a time, until `need` bytes went back. Taking no more than
    /// needed leaves the other threads their room: on W1 by 2 to 8 threads here (2 MiB
    /// chunks), taking every spare chunk moved 0.2–5.1 chunks per 1 000 operations, taking
    /// what was needed 0.8–1.6.
    ///
    /// # Time complexity
    ///
    /// O(shards) lock acquisitions, O(spare · log spare) for a shard beyond its band, and
    /// one shared-pool call per chunk given back.
    fn reclaim(&self, mine: usize, need: u64) {
        let mut got = 0u64;
        for k in (0..self.shards.len()).filter(|&k| k != mine) {
            if got >= need {
                return;
            }
            let mut s = self.lock(k);
            let target = band(s.heap.live_bytes(), 0);
            if s.heap.held() > target && !s.spare.is_empty() {
                got = got.saturating_add(self.trim(&mut s, target, need - got));
            }
        }
    }

    /// Gives wholly free chunks of `s` back to the shared pool until it holds at most `target`
    /// bytes or `need` bytes went back (`u64::MAX`: largest first); returns the bytes given.
    ///
    /// # Time complexity
    ///
    /// O(spare chunks · log spare chunks), and one shared-pool call per chunk given back.
    fn trim(&self, s: &mut Shard, target: u64, need: u64) -> u64 {
        // The smallest chunk that makes up `need` first, then the largest: the others keep the
        // chunks their own large requests need. On W2 by 2 threads here, largest first moved
        // 70–120 chunks per 1 000 operations, this order 4–32.
        s.spare_in_order(need);
        let mut given = 0u64;
        let mut taken = 0;
        while let Some(&(_, base)) = s.spare.get(taken) {
            if s.heap.held() <= target || given >= need {
                break;
            }
            taken += 1;
            if let Some((c, stream)) = s.heap.take_free_chunk_at(base) {
                given = given.saturating_add(c.size);
                // Chunk sizes came from `usize` requests, so they fit. A refusal leaves the
                // chunk with the shared pool, which gives it back on release.
                let _ = self.shared_deallocate(DevicePtr(c.base), c.size as usize, stream);
            }
        }
        s.spare.drain(..taken);
        given
    }

    /// Gives the shard's wholly free chunks, but `keep` of them, back to the shared pool.
    fn give_back(&self, s: &mut Shard, keep: usize) -> MrResult<u64> {
        let mut first_err = None;
        let mut given = 0;
        for (chunk, stream) in s.heap.take_free_chunks(keep) {
            given += chunk.size;
            // Chunk sizes came from `usize` requests, so they fit.
            if let Err(e) =
                self.shared_deallocate(DevicePtr(chunk.base), chunk.size as usize, stream)
            {
                first_err.get_or_insert(e);
            }
        }
        s.prune_spare();
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
        // The shard keeps what is freed: chunks go back only when memory is needed (`grow`).
        match s.heap.deallocate_in_chunk(ptr.0, bytes, slot) {
            Ok((_, None)) => Ok(Ok(())),
            Ok((_, Some(base))) => {
                let size = s.heap.free_chunk_size(base).unwrap_or(0);
                s.spare.push((size, base));
                // Stale entries are dropped now and then, so the list stays O(chunks).
                if s.spare.len() > 2 * s.heap.chunks().len() + 16 {
                    s.prune_spare();
                }
                Ok(Ok(()))
            }
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
        self.take_chunk(&mut s, size, bytes, stream)
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
    /// other stream) when it takes that stream's; O(shards + their chunks) and one shared-pool
    /// allocation when it grows.
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
        let mine = self.my_shard();
        {
            let mut s = self.lock(mine);
            // Budget: one thread-local read, an uncontended lock, the pool's heap fast path.
            if let Some(p) = s
                .heap
                .slot_of(stream)
                .and_then(|slot| s.heap.allocate(slot, size, b))
            {
                return Ok(DevicePtr(p));
            }
            if let Some(p) = self.take_other_streams_block(&mut s, size, b, stream)? {
                return Ok(p);
            }
        }
        // This shard's lock is let go: growing locks the other shards in turn.
        match self.grow(mine, size, b, stream) {
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

    fn chunk_moves(&self) -> Option<u64> {
        Some(self.moves.0.load(Ordering::Relaxed))
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
