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
//!   (README, "Many threads").

use std::cell::Cell;

use crate::attribution::CallerScope;
use crate::driver::{ContextId, DevicePtr, Driver, MemInfo, StreamId};
use crate::mr::detail::block::MAX_CHUNK;
use crate::mr::detail::context_scope::ContextScope;
use crate::mr::detail::growth::TRIM_ABOVE_LIVE;
use crate::mr::detail::heap::{round_to_granule, Chunk, CoalescingHeap, FreeError};
use crate::mr::detail::stream_order::StreamOrder;
use crate::mr::pool::{PoolLevels, PoolResource};
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult};
use crate::sync::{thread_local, AtomicU64, AtomicUsize, Ordering, SpinGuard, SpinMutex};

const NAME: &str = "ShardedPoolResource";

/// Shards take chunks of the request rounded up to this (1 MiB) from the shared pool (more for
/// a shard with much live, `grow_chunk`). Measured
/// here (README, "Many threads"): while shards gave chunks back on frees, W1 (1 B to 1 MiB) by
/// one thread moved 254 chunks through the shared pool per 1 000 operations with 512 KiB
/// chunks, 27 with 2 MiB and 2 with 8 MiB; once shards keep their chunks, the size sets how
/// finely memory moves between threads: on W2 by 2 and 4 threads, 1 MiB chunks moved 3.6–5.4
/// per 1 000 operations holding 1.13–1.16 × peak live, 2 MiB 3.2–65 holding 1.14–1.20; on
/// the W3-shaped churn of `tests/mr_sharded_pool.rs` (32 MB live per thread) 2 MiB chunks held
/// up to 1.54 × by 8 threads.
pub const SHARD_CHUNK: u64 = 1 << 20;

/// A growing shard takes from the shared pool at least this fraction (1/64) of its live bytes
/// (up to [`GROW_MAX`]), so that a thread whose live memory climbs moves a chunk every few
/// allocations, not every one: on W1 by 8 and 16 threads here (about 130 MB live a thread),
/// 1 MiB growths made 0.8–2.6 chunk moves per 1 000 operations, growths of up to 2 MiB
/// 0.4–0.9. At 1/32, W3's shards (35 MB live a thread) took 2 MiB chunks too and held 1.14 ×
/// peak live by one thread against 1.08 with 1 MiB.
const GROW_DIVISOR: u64 = 64;

/// The most a growth takes beyond the request (2 MiB, the shared pool's own granularity, so
/// it wastes nothing there): growths of up to 8 MiB made 0.05–0.3 chunk moves per 1 000
/// operations on W1 but held 1.19 × peak live by one thread against 1.08 — W1's requests of
/// up to 1 MiB fragment larger chunks, and a larger chunk is wholly free, and so able to move
/// to another thread, more rarely.
const GROW_MAX: u64 = 2 << 20;

/// A thief takes up to this fraction (1/8) of its live bytes in one steal, when that is more
/// than [`STEAL_BATCH`]: on W2 (1 B to 64 MiB) one chunk is already larger than the batch, so
/// each steal took one. On W2 by 8 threads on own streams here (with growths of up to 8 MiB
/// then), 1.6–1.9 chunk moves per 1 000 operations against 2.3–2.8 in five runs each.
const STEAL_DIVISOR: u64 = 8;

/// The chunk a growing shard with `live` bytes live (the request's included) takes from the
/// shared pool for a request of `size` bytes, or `None` on overflow: a power of two of at least
/// 1 MiB (a small request's chunk is 1 or 2 MiB; a large one's, see [`LARGE_GROW_DIVISOR`]).
///
/// Chunks of a few sizes are interchangeable: one that a shard gives back serves another's
/// growth whole, so the shared pool neither splits chunks nor trades them with the driver.
/// Rounding large chunks to a power of two, on the simulated GPU with 32 shards and threads in
/// lockstep (`examples/sharded_counts.rs --lockstep 64 --drift 0.3` and `--drift 1`), W2 by 8
/// threads moved 0.37–0.85 chunks per 1 000 operations against 1.5–4.2, made 0.000–0.004
/// `cuMemAlloc`/`cuMemFree` calls per 1 000 against 0.24–0.44, and held 1.17–1.20 × peak live
/// against 1.18–1.21 (one thread: 1.127 against 1.180).
fn grow_chunk(size: u64, live: u64) -> Option<u64> {
    if size > MAX_CHUNK {
        return None;
    }
    if size > GROW_MAX {
        let large = (live / LARGE_GROW_DIVISOR).min(LARGE_GROW_TIMES.saturating_mul(size));
        // A heap's block is below 1 TiB: clamped, still at least `size`.
        let pow2 = size
            .max(large)
            .checked_next_power_of_two()
            .unwrap_or(u64::MAX);
        return Some(pow2.min(MAX_CHUNK));
    }
    shard_chunk(size.max((live / GROW_DIVISOR).clamp(SHARD_CHUNK, GROW_MAX)))
}

/// A request above [`GROW_MAX`] takes a chunk of up to 1/64 of the shard's live bytes, at most
/// [`LARGE_GROW_TIMES`] × the request: request-sized chunks never merge, so a shard serving
/// large requests (W2: up to 64 MiB) kept taking new ones. On the simulated GPU with 32 shards
/// and threads in lockstep (`examples/sharded_counts.rs --lockstep 64 --drift 0.3`), W2 by 8
/// threads on own streams moved 3.6 chunks per 1 000 operations with request-sized chunks,
/// 1.5 with this, holding 1.19 × peak live against 1.18; 1/32 moved 0.35 but held 1.25–1.29.
const LARGE_GROW_DIVISOR: u64 = 64;

/// See [`LARGE_GROW_DIVISOR`].
const LARGE_GROW_TIMES: u64 = 4;

/// Bytes a thief with `live` bytes live takes at most in one steal for `size` bytes.
fn steal_batch(size: u64, live: u64) -> u64 {
    size.max(STEAL_BATCH).max(live / STEAL_DIVISOR)
}

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

/// A shard's recent peak of live bytes is the largest live over the current window of this
/// many allocations and the peak before it, which halves its distance to the window's largest
/// at each window's end: what the shard's thread needed a while ago it will likely need
/// again, so other shards take only what lies beyond it while memory held stays within
/// [`HELD_BUDGET`]. A long window (65 536), because a thread whose peak decays soon gives up
/// chunks it needs again a few thousand operations later, and then takes them back from
/// another: with threads in lockstep here (`examples/sharded_counts.rs --lockstep 64
/// --drift 0.3`), W1 by 16 threads made 0.86 steals per 1 000 operations with a window of
/// 1 024 allocations, 0.32 with 65 536 and 0.29 with no decay; W2 by 8 threads 5.5, 3.3–4.8
/// and 2.9–5.2 (the budget, not the window, then decides which shard gives).
const PEAK_WINDOW: u32 = 65_536;

/// While the shared pool holds at most this × the largest total of live bytes seen (with the
/// chunk a grower wants), a grower takes memory from the shared pool rather than from a shard
/// within its recent peak; beyond it, growers take spare chunks down to the other shards'
/// [`band`] as before. Below the bench's bound of 1.25 × peak live, as the estimate only ever
/// falls short of the true peak. W2 alone holds 1.13 by one thread, so with 1.15 most of its
/// growths by many threads found the pool beyond the budget and took chunks from shards that
/// soon needed them again: on the H200 host (`docs/results/2026-11-24-h100-s8`, call 42), W2
/// by 16 threads ran 71–127 M ops/s with 1.15 and 114–158 M with 1.20, held ≤ 1.200 × peak
/// live, and moved about 3× fewer chunks (call 43). With 2.0 they held 1.42.
const HELD_BUDGET: f64 = 1.20;

thread_local! {
    /// The shard this thread last used, and the resource it belongs to (the address of the
    /// resource's shard table): one entry, so a thread using one sharded pool reads its shard
    /// with one comparison.
    static MY_SHARD: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// A chunk a free (or an adoption) left wholly free, as a shard's spare list records it. Its
/// size, stream and stamp are as [`Shard::prune_spare`] last read them from the heap: every
/// reader prunes first.
#[derive(Debug, Clone, Copy)]
struct Spare {
    size: u64,
    base: u64,
    /// The stream whose lists hold it (a hint for ordering steals: the heap says for sure).
    stream: StreamId,
    /// The shard's [`Shard::wholes`] when it became wholly free: no free reached it after.
    stamp: u64,
}

/// What a shard knows of the stream ordering its growths made: `waiter` waited on an event
/// recorded on `source` after shard `victim` had counted `stamp` chunks made wholly free, so a
/// chunk of `victim` freed on `source` with a stamp up to `stamp` reaches `waiter` with no
/// new event (the victim's lock orders its free before the count was read, the count before
/// the record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Covered {
    waiter: StreamId,
    source: StreamId,
    victim: usize,
    stamp: u64,
}

/// Entries of [`Shard::covered`] kept; the oldest go first (one stream per thread and 32
/// shards need at most 31).
const COVERED_KEPT: usize = 64;

/// Which of its chunks a shard keeps from a grower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Up to [`band`] of its recent peak of live bytes (or of live, if higher).
    Peak,
    /// Up to [`band`] of its live bytes.
    Live,
}

/// How a grower reads what the other shards hold and keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// As each published at its last unlock ([`Published`]): no lock.
    Published,
    /// Under each shard's lock in turn: before the shared pool grows beyond the budget.
    Locked,
}

/// What a shard with `live` bytes live and a recent peak of `peak` keeps from a grower, by
/// `keep`: the rule behind [`Shard::keep`] and [`Published::room`] alike.
fn kept(keep: Keep, live: u64, peak: u64) -> u64 {
    match keep {
        Keep::Peak => band(live.max(peak), 0),
        Keep::Live => band(live, 0),
    }
}

/// One shard: a heap over chunks of the shared pool, and its event cache.
#[derive(Debug, Default)]
struct Shard {
    heap: CoalescingHeap,
    order: StreamOrder,
    /// Chunks a free or an adoption left wholly free: where growth looks for spare chunks,
    /// so that it costs O(spare chunks), not O(chunks) (W1 by 16 threads: a shard holds
    /// hundreds of 1 MiB chunks). Entries go stale when a chunk is used again; they are
    /// checked before use and pruned.
    spare: Vec<Spare>,
    /// Chunks made wholly free so far: the stamp of [`Spare`] entries.
    wholes: u64,
    /// The recent peak of live bytes before the current window ([`PEAK_WINDOW`]).
    peak: u64,
    /// The largest live bytes of the current window.
    window_max: u64,
    /// Allocations in the current window.
    window_allocs: u32,
    /// The orderings this shard's growths made ([`Covered`]).
    covered: Vec<Covered>,
}

impl Shard {
    /// Records an allocation for the recent peak: O(1), on the fast path.
    #[inline]
    fn note_allocation(&mut self) {
        let live = self.heap.live_bytes();
        if live > self.window_max {
            self.window_max = live;
        }
        self.window_allocs += 1;
        if self.window_allocs >= PEAK_WINDOW {
            self.roll_window();
        }
    }

    #[cold]
    fn roll_window(&mut self) {
        // Decays: half the way down to the window's largest each window.
        let w = self.window_max;
        self.peak = w.max(self.peak - self.peak.saturating_sub(w) / 2);
        self.window_max = self.heap.live_bytes();
        self.window_allocs = 0;
    }

    /// The recent peak of live bytes, the current window's largest included.
    fn recent_peak(&self) -> u64 {
        self.peak.max(self.window_max)
    }

    /// What the shard keeps from a grower, by `keep`.
    fn keep(&self, keep: Keep) -> u64 {
        kept(keep, self.heap.live_bytes(), self.recent_peak())
    }

    /// Bytes the shard holds beyond what it keeps by `keep`, or 0 when it lists no spare
    /// chunk (it has nothing to give).
    fn room(&self, keep: Keep) -> u64 {
        if self.spare.is_empty() {
            0
        } else {
            self.heap.held().saturating_sub(self.keep(keep))
        }
    }

    /// Records that the chunk at `base` (in `stream`'s lists) is wholly free now: stamps it, and
    /// lists it unless it is listed already. No sorting here, as this runs on frees: W2 (1 B
    /// to 64 MiB) makes a chunk wholly free on most frees, and listing every one, pruned by a
    /// sort whenever the list outgrew twice the chunks, cost one thread 66 ns per op against
    /// the pool's 40 on the simulated GPU here.
    ///
    /// # Time complexity
    ///
    /// O(1) expected: one map lookup.
    fn push_spare(&mut self, base: u64, stream: StreamId) {
        self.wholes += 1;
        if self.heap.mark_chunk(base, self.wholes) == Some(0) {
            self.spare.push(Spare {
                size: 0,
                base,
                stream,
                stamp: self.wholes,
            });
        }
    }

    /// Drops the entries of [`Shard::spare`] whose chunk is no longer wholly free (clearing its
    /// mark, so that it is listed again when it is) and duplicates, and refreshes the others'
    /// size, stream and stamp from the heap.
    ///
    /// # Time complexity
    ///
    /// O(spare · log spare).
    fn prune_spare(&mut self) {
        let heap = &mut self.heap;
        self.spare.retain_mut(|e| match heap.free_chunk(e.base) {
            Some((size, stamp, stream)) if stamp != 0 => {
                *e = Spare {
                    size,
                    base: e.base,
                    stream,
                    stamp,
                };
                true
            }
            _ => {
                let _ = heap.mark_chunk(e.base, 0);
                false
            }
        });
        // A chunk given away and taken back at the same address may be listed twice.
        self.spare.sort_unstable_by_key(|e| e.base);
        self.spare.dedup_by_key(|e| e.base);
    }

    /// Orders the live spare chunks for taking: the smallest of at least `need` bytes first,
    /// then the others largest first (the others keep the chunks their own large requests
    /// need); among those that fit, first those `covered` says need no event.
    ///
    /// # Time complexity
    ///
    /// O(spare · (log spare + the cost of `covered`)): each key is computed once.
    fn spare_in_order(&mut self, need: u64, covered: impl Fn(&Spare) -> bool) {
        self.prune_spare();
        self.spare.sort_by_cached_key(|e| {
            if e.size >= need {
                (false, !covered(e), e.size, e.base)
            } else {
                (true, false, u64::MAX - e.size, e.base)
            }
        });
    }

    /// Takes wholly free chunks out of the heap until the shard holds at most `target` bytes or
    /// `need` bytes were taken (`u64::MAX`: largest first), for the shared pool: each as its
    /// base, size and the stream whose lists held it.
    ///
    /// # Time complexity
    ///
    /// O(spare chunks · log spare chunks).
    fn take_beyond(&mut self, target: u64, need: u64) -> Vec<(DevicePtr, usize, StreamId)> {
        // The smallest chunk that makes up `need` first, then the largest: the others keep the
        // chunks their own large requests need. On W2 by 2 threads here, largest first moved
        // 70–120 chunks per 1 000 operations, this order 4–32.
        self.spare_in_order(need, |_| false);
        let mut out = Vec::new();
        let mut given = 0u64;
        let mut taken = 0;
        while let Some(&e) = self.spare.get(taken) {
            if self.heap.held() <= target || given >= need {
                break;
            }
            taken += 1;
            if let Some((c, stream)) = self.heap.take_free_chunk_at(e.base) {
                given = given.saturating_add(c.size);
                // Chunk sizes came from `usize` requests, so they fit.
                out.push((DevicePtr(c.base), c.size as usize, stream));
            } else {
                let _ = self.heap.mark_chunk(e.base, 0);
            }
        }
        self.spare.drain(..taken);
        out
    }

    /// Records every wholly free chunk as spare after an adoption merged another stream's
    /// blocks into `stream`'s lists: a chunk made whole so is otherwise unknown to growth
    /// until `release`.
    ///
    /// # Time complexity
    ///
    /// O(chunks), after an adoption's event and O(free blocks).
    fn note_adopted(&mut self, stream: StreamId) {
        let bases: Vec<u64> = self
            .heap
            .chunks()
            .iter()
            .filter(|c| self.heap.free_chunk(c.base).is_some())
            .map(|c| c.base)
            .collect();
        for base in bases {
            self.push_spare(base, stream);
        }
        self.prune_spare();
    }

    /// Whether `covered` (this shard's, for one waiter) orders a chunk of shard `victim`,
    /// freed on `source` by stamp `stamp`, before the waiter.
    fn is_covered(covered: &[Covered], victim: usize, source: StreamId, stamp: u64) -> bool {
        covered
            .iter()
            .any(|c| c.victim == victim && c.source == source && c.stamp >= stamp)
    }

    /// Remembers that `waiter` now follows `source` up to `victim`'s `stamp`.
    fn remember(&mut self, waiter: StreamId, source: StreamId, victim: usize, stamp: u64) {
        let same = |c: &Covered| c.waiter == waiter && c.source == source && c.victim == victim;
        if let Some(c) = self.covered.iter_mut().find(|c| same(c)) {
            c.stamp = c.stamp.max(stamp);
            return;
        }
        if self.covered.len() >= COVERED_KEPT {
            self.covered.remove(0);
        }
        self.covered.push(Covered {
            waiter,
            source,
            victim,
            stamp,
        });
    }
}

/// Chunks taken from one shard by a grower.
#[derive(Debug, Default)]
struct Stolen {
    /// Each chunk, the stream whose lists held it, and whether the thief's stream already
    /// follows that stream's frees into it.
    chunks: Vec<(Chunk, StreamId, bool)>,
    /// The shard they came from, and its [`Shard::wholes`] then.
    victim: usize,
    stamp: u64,
}

/// A shard's lock on a cache line of its own, so that threads on neighbouring shards do not
/// slow each other down, and what it published at its last unlock ([`Published`]).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded {
    lock: SpinMutex<Shard>,
    published: Published,
}

/// What a shard publishes as it unlocks, for growers to read with no lock: its live bytes (for
/// the budget), and what it holds and keeps (for choosing whom to take spare chunks from).
/// Locking every shard in turn to read them instead cost a grower 19–23 µs on the H100 host
/// with W2 by 8 threads (`docs/results/2026-11-24-h100-s6/c17-diag.txt`), and took every
/// shard's lock away from its owner's bias.
#[derive(Debug, Default)]
struct Published {
    live: Hint,
    /// Bytes held, or 0 when the shard lists no spare chunk (it has nothing to give).
    held_if_spare: Hint,
    /// Its recent peak of live bytes (the window's largest included).
    peak: Hint,
}

impl Published {
    /// Bytes the shard holds beyond what it keeps by `keep`, as of its last unlock.
    fn room(&self, keep: Keep) -> u64 {
        let (live, peak) = (
            self.live.load(Ordering::Relaxed),
            self.peak.load(Ordering::Relaxed),
        );
        self.held_if_spare
            .load(Ordering::Relaxed)
            .saturating_sub(kept(keep, live, peak))
    }
}

/// A figure published for growers to read with no lock (a shard's live bytes, the shared
/// pool's levels): a hint for their budget, which no safety property rests on, so std's atomic
/// under loom too (a modelled one multiplied the interleavings of every lock and unlock).
type Hint = std::sync::atomic::AtomicU64;

/// A locked shard; unlocking publishes what growers read ([`Published`]): its live bytes
/// always, and the rest when `full` (the fast path changes the rest only in a direction
/// growers can afford to miss: [`ShardedPoolResource::lock_fast`]).
struct ShardGuard<'a> {
    shard: SpinGuard<'a, Shard>,
    published: &'a Published,
    full: bool,
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = Shard;
    fn deref(&self) -> &Shard {
        &self.shard
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut Shard {
        &mut self.shard
    }
}

impl Drop for ShardGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Still locked: the fields drop after this.
        let s = &*self.shard;
        let p = self.published;
        p.live.store(s.heap.live_bytes(), Ordering::Relaxed);
        if !self.full {
            return;
        }
        let spare = u64::from(!s.spare.is_empty()).wrapping_neg();
        p.held_if_spare
            .store(s.heap.held() & spare, Ordering::Relaxed);
        p.peak.store(s.recent_peak(), Ordering::Relaxed);
    }
}

/// The shared pool's [`PoolLevels`] as [`Hint`]s, on a cache line of their own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct PaddedLevels {
    held: Hint,
    free: Hint,
}

impl PaddedLevels {
    fn store(&self, l: PoolLevels) {
        self.held.store(l.held, Ordering::Relaxed);
        self.free.store(l.free, Ordering::Relaxed);
    }
}

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
        let shared_levels = PaddedLevels::default();
        shared_levels.store(shared.levels());
        ShardedPoolResource {
            shards: (0..n).map(|_| Padded::default()).collect(),
            mask: n - 1,
            next: AtomicUsize::new(0),
            moves: PaddedCount::default(),
            peak_live: PaddedCount::default(),
            shared_levels,
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
            let _scope = CallerScope::enter(NAME);
            s.order.order(self.shared.driver(), source, stream)?;
        }
        s.heap.adopt(slot, other);
        // Merging the two streams' blocks may have left chunks wholly free that no free
        // recorded: growth finds spare chunks only through the list.
        s.note_adopted(stream);
        Ok(Self::allocate_in(s, slot, size, bytes))
    }

    /// Allocates from `slot`'s lists of `s`, noting the allocation for the recent peak.
    #[inline]
    fn allocate_in(s: &mut Shard, slot: usize, size: u64, bytes: u64) -> Option<DevicePtr> {
        let p = s.heap.allocate(slot, size, bytes)?;
        s.note_allocation();
        Some(DevicePtr(p))
    }

    /// Nothing in shard `mine` fits: take another shard's spare chunks, or a chunk from the
    /// shared pool. Called with no shard locked; `my_live` is shard `mine`'s live bytes and
    /// `covered` its [`Covered`] entries for `stream`.
    ///
    /// First another shard's chunks beyond its recent peak; if there are none and the shared
    /// pool holds at most [`HELD_BUDGET`] × the largest total live seen, a chunk from the
    /// shared pool (the driver's, if it has none free); else other shards' chunks beyond
    /// their live bytes, as when the peaks were not kept.
    #[cold]
    #[inline(never)]
    fn grow(
        &self,
        mine: usize,
        size: u64,
        bytes: u64,
        stream: StreamId,
        my_live: u64,
        covered: &[Covered],
    ) -> MrResult<DevicePtr> {
        let chunk = shard_chunk(size).unwrap_or(u64::MAX);
        // Another shard's spare chunk that fits moves here whole: no shared-pool call, and the
        // shared pool does not split it for another size. On W2 by 2 threads here, moving
        // chunks through the shared pool instead took 4–100 shared-pool calls per 1 000
        // operations (the pool split big chunks for small requests) and ran 7–13 M ops/s
        // against 25–41 M.
        let peak = (Keep::Peak, Scan::Published);
        let stolen = self.steal(mine, size, stream, covered, my_live, peak);
        if let Some(p) = self.adopt_stolen(mine, stolen, size, bytes, stream)? {
            return Ok(p);
        }
        let keep = if self.within_budget(self.total_live().saturating_add(size), chunk) {
            Keep::Peak
        } else {
            Keep::Live
        };
        if keep == Keep::Live {
            let stolen = self.steal(
                mine,
                size,
                stream,
                covered,
                my_live,
                (keep, Scan::Published),
            );
            if let Some(p) = self.adopt_stolen(mine, stolen, size, bytes, stream)? {
                return Ok(p);
            }
        }
        // Gather whatever the shared pool holds free already: a free block there may not fit
        // (another size, another chunk), and without the other shards' spares the pool would
        // take the chunk from the driver. Measured on W2 by 4 threads here, gathering only when
        // the pool held less free memory than the chunk held 2.0–3.4 × peak live.
        self.reclaim(mine, chunk, keep, Scan::Published);
        if keep == Keep::Live && self.shared_levels.free.load(Ordering::Relaxed) < chunk {
            // Beyond the budget, the shared pool would now take memory from the driver: look
            // at every shard under its lock first, as a grower's view of what they published
            // may be old. On 2 cores under 10× load, `tests/mr_sharded_pool.rs`'s W1-shaped
            // churn by 4 threads held over 1.25 × peak live in 5 runs of 30 going by what was
            // published alone, in 1 of 100 with this look (a paused thread's shard held its
            // free memory in chunks partly live, which no other shard can take).
            let stolen = self.steal(mine, size, stream, covered, my_live, (keep, Scan::Locked));
            if let Some(p) = self.adopt_stolen(mine, stolen, size, bytes, stream)? {
                return Ok(p);
            }
            self.reclaim(mine, chunk, keep, Scan::Locked);
        }
        let mut s = self.lock(mine);
        // Another thread may have freed into this shard meanwhile.
        if let Some(p) = s
            .heap
            .slot_of(stream)
            .and_then(|slot| Self::allocate_in(&mut s, slot, size, bytes))
        {
            return Ok(p);
        }
        self.take_chunk(mine, s, size, bytes, stream)
    }

    /// Whether the shared pool, giving a shard a chunk of `chunk` bytes now, would hold at
    /// most [`HELD_BUDGET`] × the largest total of live bytes seen (`live` now among them),
    /// by its levels after the last exchange. Reading them under the shared pool's lock, as
    /// before, took 23 µs a check on the H100 host with W2 by 8 threads, where threads
    /// exchanging chunks held that lock (`docs/results/2026-11-24-h100-s6/c17-diag.txt`).
    ///
    /// # Time complexity
    ///
    /// O(1), no lock.
    fn within_budget(&self, live: u64, chunk: u64) -> bool {
        let peak = self
            .peak_live
            .0
            .fetch_max(live, Ordering::Relaxed)
            .max(live);
        let budget = HELD_BUDGET * peak as f64;
        let held = self.shared_levels.held.load(Ordering::Relaxed);
        // Within the budget even if the pool grows by the chunk; else only if its free memory
        // may serve the chunk without growing.
        held.saturating_add(chunk) as f64 <= budget
            || (held as f64 <= budget && self.shared_levels.free.load(Ordering::Relaxed) >= chunk)
    }

    /// Adds the chunks `stolen` to shard `mine`, each after ordering `stream` behind the
    /// stream it was freed on unless [`Covered`] says it already is, and serves the request
    /// from them; `None` when nothing was stolen or it does not fit.
    fn adopt_stolen(
        &self,
        mine: usize,
        stolen: Stolen,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> MrResult<Option<DevicePtr>> {
        if stolen.chunks.is_empty() {
            return Ok(None);
        }
        self.moves.0.fetch_add(1, Ordering::Relaxed);
        let mut s = self.lock(mine);
        let live = s.heap.live_bytes().saturating_add(size);
        let got: u64 = stolen.chunks.iter().map(|(c, _, _)| c.size).sum();
        let target = band(live, SHARD_CHUNK).saturating_sub(got);
        if s.heap.held() > target {
            self.trim(&mut s, target, u64::MAX);
        }
        let slot = s.heap.slot(stream);
        let mut ordered: Vec<StreamId> = Vec::new();
        let mut first_err = None;
        for (c, from, covered) in stolen.chunks {
            // One event per source stream orders every chunk freed on it.
            let mut ready = covered || ordered.contains(&from);
            if !ready && first_err.is_none() {
                let _ctx = ContextScope::enter(self.shared.driver(), self.context);
                let _scope = CallerScope::enter(NAME);
                match s.order.order(self.shared.driver(), from, stream) {
                    Ok(()) => {
                        ordered.push(from);
                        s.remember(stream, from, stolen.victim, stolen.stamp);
                        ready = true;
                    }
                    Err(e) => first_err = Some(MrError::from(e)),
                }
            }
            // Not ordered: the chunk stays in the lists of the stream it was freed on.
            let (to, on) = if ready {
                (slot, stream)
            } else {
                (s.heap.slot(from), from)
            };
            s.heap.add_chunk(to, c.base, c.size);
            // Wholly free until used: spare for the next grower meanwhile.
            s.push_spare(c.base, on);
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        Ok(Self::allocate_in(&mut s, slot, size, bytes))
    }

    /// Takes a chunk for `size` bytes from the shared pool into shard `mine` (locked as `s`) and
    /// serves the request from it; first, if the shard would then hold more than
    /// [`KEEP_ABOVE_LIVE`] allows, gives wholly free chunks back (none fits, or the request
    /// would not be here), largest first, until it would not.
    ///
    /// The shard is unlocked while the shared pool works: it may call the driver (`cuMemAlloc`
    /// of a large chunk, `cuMemFree`s when it trims), and every grower locks every shard in
    /// turn, so a shard locked over a driver call stalled each thread that needed memory.
    fn take_chunk(
        &self,
        mine: usize,
        mut s: ShardGuard<'_>,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        let oom = || MrError::OutOfMemory {
            resource: NAME,
            requested: bytes,
            available: None,
        };
        let live = s.heap.live_bytes().saturating_add(size);
        let chunk = grow_chunk(size, live).ok_or_else(oom)?;
        let n = usize::try_from(chunk).map_err(|_| oom())?;
        // One chunk spare, so that a thread allocating and freeing one block in a loop keeps
        // its chunk.
        let target = band(live, SHARD_CHUNK).saturating_sub(chunk);
        let back = if s.heap.held() > target {
            s.take_beyond(target, u64::MAX)
        } else {
            Vec::new()
        };
        // Chunks come from the shared pool usable on `stream` at once. Those given back and
        // the one taken move under one lock of the shared pool: on W2 by 8 threads in lockstep
        // here, half the growths that took a chunk gave chunks back first.
        drop(s);
        let (c, chunk) = match self.shared_exchange(&back, n, stream) {
            Ok(c) => (c, chunk),
            // Rounding up to a power of two must not fail a request that fits: near the
            // device's limit, take the request rounded to 1 MiB (the chunks given back are
            // the shared pool's already).
            Err(e) if e.is_out_of_memory() => match shard_chunk(size) {
                Some(least) if least < chunk => {
                    let n = usize::try_from(least).map_err(|_| oom())?;
                    (self.shared_exchange(&[], n, stream)?, least)
                }
                _ => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let mut s = self.lock(mine);
        let slot = s.heap.slot(stream);
        s.heap.add_chunk(slot, c.0, chunk);
        Self::allocate_in(&mut s, slot, size, bytes).ok_or_else(oom)
    }

    /// Bytes shard `k` holds beyond what it keeps by `keep`, while it lists spare chunks, as
    /// `scan` reads it.
    fn room(&self, k: usize, keep: Keep, scan: Scan) -> u64 {
        match scan {
            Scan::Published => self.shards[k].published.room(keep),
            Scan::Locked => self.lock(k).room(keep),
        }
    }

    /// The shards a grower on shard `mine` may take spare chunks from, the one with the most
    /// memory beyond what it keeps by `keep` first, as `scan` reads them (the victim is
    /// checked again under its lock). Taking from the richest first moves more memory a steal
    /// and leaves alone the shards whose threads will soon need theirs: on W1 by 16 threads in
    /// lockstep here (`examples/sharded_counts.rs --lockstep 64 --drift 0.3`), taking from the
    /// first shard in index order made 1.7 steals per 1 000 operations, from the richest
    /// 0.86; on W2 by 8 threads 10.8 and 5.5.
    ///
    /// # Time complexity
    ///
    /// O(shards · log shards); by [`Scan::Locked`], a lock of each shard in turn too.
    fn steal_order(&self, mine: usize, keep: Keep, scan: Scan) -> Vec<usize> {
        let mut order: Vec<(u64, usize)> = Vec::new();
        for k in (0..self.shards.len()).filter(|&k| k != mine) {
            let room = self.room(k, keep, scan);
            if room > 0 {
                order.push((room, k));
            }
        }
        order.sort_unstable_by_key(|&(room, k)| (std::cmp::Reverse(room), k));
        order.into_iter().map(|(_, k)| k).collect()
    }

    /// Takes from another shard the smallest wholly free chunk of at least `size` bytes that
    /// it holds beyond what it keeps by `keep`, and more of its spare chunks, largest first,
    /// up to [`STEAL_BATCH`] in all, each with the stream it was last freed on and whether
    /// `covered` (the thief's, for `stream`) orders it before `stream` already; those that
    /// need no event are taken first. The victim is the shard with the most memory beyond what
    /// it keeps, else the next ([`Self::steal_order`], by `scan`). One shard locked at a time.
    ///
    /// # Time complexity
    ///
    /// O(shards) loads, a lock of each shard that published spare memory until one gives,
    /// and O(spare · log spare) for that shard.
    fn steal(
        &self,
        mine: usize,
        size: u64,
        stream: StreamId,
        covered: &[Covered],
        my_live: u64,
        (keep, scan): (Keep, Scan),
    ) -> Stolen {
        let order = self.steal_order(mine, keep, scan);
        for k in order {
            let mut s = self.lock(k);
            // Looked at unlocked since: it may have used its spare memory meanwhile.
            if s.room(keep) == 0 {
                continue;
            }
            let target = s.keep(keep);
            let ready = |from: StreamId, stamp: u64| {
                from == stream || Shard::is_covered(covered, k, from, stamp)
            };
            // The smallest that fits first, then the largest.
            s.spare_in_order(size, |e| ready(e.stream, e.stamp));
            let mut out = Stolen {
                chunks: Vec::new(),
                victim: k,
                stamp: s.wholes,
            };
            let mut got = 0u64;
            let mut taken = 0;
            while let Some(&e) = s.spare.get(taken) {
                let fits = got > 0 || e.size >= size;
                let batch = got >= steal_batch(size, my_live);
                if !fits || batch || s.heap.held().saturating_sub(e.size) < target {
                    break;
                }
                // Pruned just now, under this lock: wholly free. The heap says which stream's
                // lists held it; the entry's stamp is the latest free into it.
                if let Some((chunk, from)) = s.heap.take_free_chunk_at(e.base) {
                    got += e.size;
                    out.chunks.push((chunk, from, ready(from, e.stamp)));
                } else {
                    let _ = s.heap.mark_chunk(e.base, 0);
                }
                taken += 1;
            }
            s.spare.drain(..taken);
            if !out.chunks.is_empty() {
                return out;
            }
        }
        Stolen::default()
    }

    /// Gives other shards' wholly free chunks beyond what they keep by `keep` back to the
    /// shared pool, one shard locked at a time, until `need` bytes went back. Taking no more
    /// than needed leaves the other threads their room: on W1 by 2 to 8 threads here (2 MiB
    /// chunks), taking every spare chunk moved 0.2–5.1 chunks per 1 000 operations, taking
    /// what was needed 0.8–1.6.
    ///
    /// # Time complexity
    ///
    /// O(shards) loads, a lock of each shard that published memory beyond its band,
    /// O(spare · log spare) for each, and one shared-pool call per shard that gives.
    fn reclaim(&self, mine: usize, need: u64, keep: Keep, scan: Scan) {
        let mut got = 0u64;
        for k in (0..self.shards.len()).filter(|&k| k != mine) {
            if got >= need {
                return;
            }
            // Checked again under its lock.
            if scan == Scan::Published && self.room(k, keep, scan) == 0 {
                continue;
            }
            let mut s = self.lock(k);
            if s.room(keep) > 0 {
                let target = s.keep(keep);
                got = got.saturating_add(self.trim(&mut s, target, need - got));
            }
        }
    }

    /// Gives wholly free chunks of `s` back to the shared pool, in one exchange, until it
    /// holds at most `target` bytes or `need` bytes went back (`u64::MAX`: largest first);
    /// returns the bytes given.
    ///
    /// # Time complexity
    ///
    /// O(spare chunks · log spare chunks), and one shared-pool call.
    fn trim(&self, s: &mut Shard, target: u64, need: u64) -> u64 {
        let back = s.take_beyond(target, need);
        if !back.is_empty() {
            // A refusal leaves the chunks with the shared pool, which gives them back on
            // release.
            let _ = self.shared_exchange(&back, 0, StreamId::DEFAULT);
        }
        back.iter().map(|&(_, n, _)| n as u64).sum()
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
            resource: NAME,
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
            None if s.heap.is_live(ptr.0) => s.heap.slot(stream),
            None => return Err(FreeError::NotLive),
        };
        // The shard keeps what is freed: chunks go back only when memory is needed (`grow`).
        match s.heap.deallocate_in_chunk(ptr.0, bytes, slot) {
            Ok((_, None)) => Ok(Ok(())),
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
        let mine = self.my_shard();
        let s = self.lock(mine);
        self.take_chunk(mine, s, size, bytes, stream)
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
            if let Some(p) = self.take_other_streams_block(&mut s, size, b, stream)? {
                return Ok(p);
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
        let released = self.shared.release();
        self.shared_levels.store(self.shared.levels());
        first_err.map_or(released, Err)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_powers_of_two_a_share_of_live_for_large_requests_at_most_2_mib_for_small() {
        const MIB: u64 = 1 << 20;
        // Small requests: the request rounded to 1 MiB, or 1/64 of live up to 2 MiB.
        assert_eq!(grow_chunk(1000, 0), Some(MIB));
        assert_eq!(grow_chunk(1000, 4096 * MIB), Some(2 * MIB));
        assert_eq!(grow_chunk(2 * MIB, 4096 * MIB), Some(2 * MIB));
        // Large ones: 1/64 of live, at most 4 × the request, never less than the request,
        // rounded up to a power of two.
        assert_eq!(grow_chunk(8 * MIB, 4096 * MIB), Some(32 * MIB));
        assert_eq!(grow_chunk(40 * MIB, 4096 * MIB), Some(64 * MIB));
        assert_eq!(grow_chunk(40 * MIB, 5000 * MIB), Some(128 * MIB));
        assert_eq!(grow_chunk(3 * MIB, 64 * MIB), Some(4 * MIB));
        assert_eq!(grow_chunk(65 * MIB, 0), Some(128 * MIB));
        assert_eq!(grow_chunk(u64::MAX - 1, u64::MAX), None);
        // A heap's block is below 1 TiB: past 512 GiB a chunk is clamped to `MAX_CHUNK`
        // (still holding the request), and a larger request is refused.
        assert_eq!(grow_chunk(600 << 30, 0), Some(MAX_CHUNK));
        assert_eq!(grow_chunk(MAX_CHUNK, u64::MAX), Some(MAX_CHUNK));
        assert_eq!(grow_chunk(MAX_CHUNK + 1, 0), None);
        // Every chunk up to 512 GiB is a power of two, so one given back serves another shard
        // whole.
        for size in (1..200).map(|k| k * 700_001) {
            for live in [0, 10 * MIB, 3000 * MIB] {
                assert!(
                    grow_chunk(size, live).unwrap().is_power_of_two(),
                    "{size} {live}"
                );
            }
        }
    }

    #[test]
    fn a_chunk_made_wholly_free_again_and_again_is_listed_once() {
        const MIB: u64 = 1 << 20;
        let stream = StreamId::DEFAULT;
        let mut s = Shard::default();
        let slot = s.heap.slot(stream);
        s.heap.add_chunk(slot, MIB, MIB);
        s.heap.add_chunk(slot, 4 * MIB, MIB);
        let cycle = |s: &mut Shard| {
            let p = s.heap.allocate(slot, 4096, 4096).unwrap();
            let (_, whole) = s.heap.deallocate_in_chunk(p, 4096, slot).unwrap();
            s.push_spare(whole.unwrap(), stream);
        };
        for _ in 0..100 {
            cycle(&mut s);
        }
        assert_eq!(s.spare.len(), 1);
        s.prune_spare();
        let e = s.spare[0];
        assert_eq!((e.size, e.stamp, e.stream), (MIB, 100, stream));
        // In use again: pruning drops it and clears its mark, so it is listed when next whole.
        let p = s.heap.allocate(slot, 4096, 4096).unwrap();
        s.prune_spare();
        assert!(s.spare.is_empty());
        s.heap.deallocate_in_chunk(p, 4096, slot).unwrap();
        cycle(&mut s);
        s.prune_spare();
        assert_eq!(s.spare.len(), 1);
        assert_eq!(s.spare[0].stamp, 101);
    }
}
