//! One shard: a coalescing heap over chunks of the shared pool, its event cache, its list of
//! wholly free (spare) chunks and its recent peak of live bytes; and the shard's lock, which
//! publishes at unlock what growers read with no lock.

use crate::driver::{DevicePtr, StreamId};
use crate::mr::detail::heap::{Chunk, CoalescingHeap};
use crate::mr::detail::stream_order::StreamOrder;
use crate::mr::pool::PoolLevels;
use crate::sync::{AtomicU64, Ordering, SpinGuard, SpinMutex};

use super::chunk_policy::{kept, Keep, PEAK_WINDOW};

/// A chunk a free (or an adoption) left wholly free, as a shard's spare list records it. Its
/// size, stream and stamp are as [`Shard::prune_spare`] last read them from the heap: every
/// reader prunes first.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spare {
    pub(super) size: u64,
    pub(super) base: u64,
    /// The stream whose lists hold it (a hint for ordering steals: the heap says for sure).
    pub(super) stream: StreamId,
    /// The shard's [`Shard::wholes`] when it became wholly free: no free reached it after.
    pub(super) stamp: u64,
}

/// What a shard knows of the stream ordering its growths made: `waiter` waited on an event
/// recorded on `source` after shard `victim` had counted `stamp` chunks made wholly free, so a
/// chunk of `victim` freed on `source` with a stamp up to `stamp` reaches `waiter` with no
/// new event (the victim's lock orders its free before the count was read, the count before
/// the record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Covered {
    pub(super) waiter: StreamId,
    pub(super) source: StreamId,
    pub(super) victim: usize,
    pub(super) stamp: u64,
}

/// Entries of [`Shard::covered`] kept; the oldest go first (one stream per thread and 32
/// shards need at most 31).
pub(super) const COVERED_KEPT: usize = 64;
/// One shard: a heap over chunks of the shared pool, and its event cache.
#[derive(Debug, Default)]
pub(super) struct Shard {
    pub(super) heap: CoalescingHeap,
    pub(super) order: StreamOrder,
    /// Chunks a free or an adoption left wholly free: where growth looks for spare chunks,
    /// so that it costs O(spare chunks), not O(chunks) (W1 by 16 threads: a shard holds
    /// hundreds of 1 MiB chunks). Entries go stale when a chunk is used again; they are
    /// checked before use and pruned.
    pub(super) spare: Vec<Spare>,
    /// Chunks made wholly free so far: the stamp of [`Spare`] entries.
    pub(super) wholes: u64,
    /// The recent peak of live bytes before the current window ([`PEAK_WINDOW`]).
    pub(super) peak: u64,
    /// The largest live bytes of the current window.
    pub(super) window_max: u64,
    /// Allocations in the current window.
    pub(super) window_allocs: u32,
    /// The orderings this shard's growths made ([`Covered`]).
    pub(super) covered: Vec<Covered>,
}

impl Shard {
    /// Records an allocation for the recent peak: O(1), on the fast path.
    #[inline]
    pub(super) fn note_allocation(&mut self) {
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
    pub(super) fn roll_window(&mut self) {
        // Decays: half the way down to the window's largest each window.
        let w = self.window_max;
        self.peak = w.max(self.peak - self.peak.saturating_sub(w) / 2);
        self.window_max = self.heap.live_bytes();
        self.window_allocs = 0;
    }

    /// The recent peak of live bytes, the current window's largest included.
    pub(super) fn recent_peak(&self) -> u64 {
        self.peak.max(self.window_max)
    }

    /// What the shard keeps from a grower, by `keep`.
    pub(super) fn keep(&self, keep: Keep) -> u64 {
        kept(keep, self.heap.live_bytes(), self.recent_peak())
    }

    /// Bytes the shard holds beyond what it keeps by `keep`, or 0 when it lists no spare
    /// chunk (it has nothing to give).
    pub(super) fn room(&self, keep: Keep) -> u64 {
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
    pub(super) fn push_spare(&mut self, base: u64, stream: StreamId) {
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
    pub(super) fn prune_spare(&mut self) {
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
    pub(super) fn spare_in_order(&mut self, need: u64, covered: impl Fn(&Spare) -> bool) {
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
    pub(super) fn take_beyond(
        &mut self,
        target: u64,
        need: u64,
    ) -> Vec<(DevicePtr, usize, StreamId)> {
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

    /// Records every wholly free chunk as spare after the streams' free blocks were merged
    /// into `stream`'s lists (a coalescing): a chunk made whole so is otherwise unknown to
    /// growth until `release`.
    ///
    /// # Time complexity
    ///
    /// O(chunks), after a context synchronize and O(free blocks).
    pub(super) fn note_whole_chunks(&mut self, stream: StreamId) {
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
    pub(super) fn is_covered(
        covered: &[Covered],
        victim: usize,
        source: StreamId,
        stamp: u64,
    ) -> bool {
        covered
            .iter()
            .any(|c| c.victim == victim && c.source == source && c.stamp >= stamp)
    }

    /// Remembers that `waiter` now follows `source` up to `victim`'s `stamp`.
    pub(super) fn remember(
        &mut self,
        waiter: StreamId,
        source: StreamId,
        victim: usize,
        stamp: u64,
    ) {
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
pub(super) struct StolenChunks {
    /// Each chunk, the stream whose lists held it, and whether the thief's stream already
    /// follows that stream's frees into it.
    pub(super) chunks: Vec<(Chunk, StreamId, bool)>,
    /// The shard they came from, and its [`Shard::wholes`] then.
    pub(super) victim: usize,
    pub(super) stamp: u64,
}

/// A shard's lock on a cache line of its own, so that threads on neighbouring shards do not
/// slow each other down, and what it published at its last unlock ([`Published`]).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct PaddedShard {
    pub(super) lock: SpinMutex<Shard>,
    pub(super) published: Published,
}

/// What a shard publishes as it unlocks, for growers to read with no lock: its live bytes (for
/// the budget), and what it holds and keeps (for choosing whom to take spare chunks from).
/// Locking every shard in turn to read them instead cost a grower 19–23 µs on the H100 host
/// with W2 by 8 threads, and took every
/// shard's lock away from its owner's bias.
#[derive(Debug, Default)]
pub(super) struct Published {
    pub(super) live: Hint,
    /// Bytes held, or 0 when the shard lists no spare chunk (it has nothing to give).
    pub(super) held_if_spare: Hint,
    /// Its recent peak of live bytes (the window's largest included).
    pub(super) peak: Hint,
}

impl Published {
    /// Bytes the shard holds beyond what it keeps by `keep`, as of its last unlock.
    pub(super) fn room(&self, keep: Keep) -> u64 {
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
pub(super) type Hint = std::sync::atomic::AtomicU64;

/// A locked shard; unlocking publishes what growers read ([`Published`]): its live bytes
/// always, and the rest when `full` (the fast path changes the rest only in a direction
/// growers can afford to miss: [`ShardedPoolResource::lock_fast`]).
pub(super) struct ShardGuard<'a> {
    pub(super) shard: SpinGuard<'a, Shard>,
    pub(super) published: &'a Published,
    pub(super) full: bool,
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
pub(super) struct PaddedLevels {
    pub(super) held: Hint,
    pub(super) free: Hint,
}

impl PaddedLevels {
    pub(super) fn store(&self, l: PoolLevels) {
        self.held.store(l.held, Ordering::Relaxed);
        self.free.store(l.free, Ordering::Relaxed);
    }
}

/// A counter on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct PaddedCount(pub(super) AtomicU64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_made_wholly_free_again_and_again_is_listed_once() {
        const MIB: u64 = 1 << 20;
        let stream = StreamId::DEFAULT;
        let mut s = Shard::default();
        let slot = s.heap.slot(stream);
        s.heap.add_chunk(slot, MIB, MIB).unwrap();
        s.heap.add_chunk(slot, 4 * MIB, MIB).unwrap();
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
