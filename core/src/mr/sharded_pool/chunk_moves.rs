//! How chunks move when a shard has nothing that fits: it takes other shards' spare chunks or a
//! chunk from the shared pool, and gives its own wholly free chunks back.

use crate::attribution::CallerScope;
use crate::driver::{DevicePtr, StreamId};
use crate::mr::detail::context_scope::ContextScope;
use crate::mr::{DeviceMemoryResource, MrError, MrResult};
use crate::sync::Ordering;

use super::chunk_policy::{
    band, grow_chunk, shard_chunk, steal_batch, Keep, Scan, HELD_BUDGET, SCATTERED_MIN,
    SHARD_CHUNK, SUPERBLOCK,
};
use super::shard::{Covered, Shard, ShardGuard, StolenChunks};
use super::{ChunkPolicy, PerThreadPool};

impl<Up: DeviceMemoryResource, P: ChunkPolicy> PerThreadPool<Up, P> {
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
    pub(super) fn grow(
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
        if let Some(p) = self.coalesce_if_scattered(&mut s, size, bytes, stream)? {
            return Ok(p);
        }
        self.take_chunk(mine, s, size, bytes, stream)
    }

    /// Before a shard takes another chunk: when it holds more free memory than live (and at
    /// least [`SCATTERED_MIN`]) over several streams' lists, none of it fitting, merges every
    /// stream's free blocks into `stream`'s after a context synchronize and serves the request
    /// from them if it can. Blocks a stream freed in pieces that only merge with another
    /// stream's (one stream freeing what the one before it allocated, over thousands of
    /// streams) otherwise stay apart: each such stream kept its lists and the shard grew by a
    /// chunk a stream, to the device's end (8 123 streams' lists at once over 20 000 streams,
    /// against the pool's 63, which took the neighbouring block whole).
    ///
    /// # Time complexity
    ///
    /// O(streams seen) when it does nothing; else a context synchronize and O(free blocks +
    /// chunks), once the shard's free memory has passed its live bytes and
    /// [`SCATTERED_MIN`] again.
    fn coalesce_if_scattered(
        &self,
        s: &mut ShardGuard<'_>,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> MrResult<Option<DevicePtr>> {
        let live = s.heap.live_bytes();
        let free = s.heap.free_bytes();
        if free < SCATTERED_MIN.max(live).max(size) {
            return Ok(None);
        }
        let driver = self.shared.driver();
        let _ctx = ContextScope::enter(driver, self.context);
        let merged = s.heap.coalesce_streams(stream, || {
            let _scope = CallerScope::enter(P::NAME);
            driver.context_synchronize()
        })?;
        if !merged {
            return Ok(None);
        }
        s.note_whole_chunks(stream);
        s.heap.sweep_slots_if_due();
        let slot = s.heap.slot(stream);
        Ok(Self::allocate_in(s, slot, size, bytes))
    }

    /// Whether the shared pool, giving a shard a chunk of `chunk` bytes now, would hold at
    /// most [`HELD_BUDGET`] × the largest total of live bytes seen (`live` now among them),
    /// by its levels after the last exchange. Reading them under the shared pool's lock, as
    /// before, took 23 µs a check on the H100 host with W2 by 8 threads, where threads
    /// exchanging chunks held that lock.
    ///
    /// # Time complexity
    ///
    /// O(1), no lock.
    pub(super) fn within_budget(&self, live: u64, chunk: u64) -> bool {
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
    pub(super) fn adopt_stolen(
        &self,
        mine: usize,
        stolen: StolenChunks,
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
        // A record for each chunk and one for the split: where the slab cannot grow, the
        // chunks go to the shared pool instead (wholly free, on the streams they were freed
        // on), and the host's refusal is the answer.
        if let Err(full) = s.heap.reserve_records(stolen.chunks.len() + 1) {
            drop(s);
            for (c, from, _) in stolen.chunks {
                let _ = self.shared_deallocate(DevicePtr(c.base), c.size as usize, from);
            }
            return Err(MrError::records_full(P::NAME, bytes, full));
        }
        let slot = s.heap.slot(stream);
        let mut ordered: Vec<StreamId> = Vec::new();
        let mut first_err = None;
        for (c, from, covered) in stolen.chunks {
            // One event per source stream orders every chunk freed on it.
            let mut ready = covered || ordered.contains(&from);
            if !ready && first_err.is_none() {
                let _ctx = ContextScope::enter(self.shared.driver(), self.context);
                let _scope = CallerScope::enter(P::NAME);
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
            if s.heap.add_chunk(to, c.base, c.size).is_err() {
                // Reserved above, under this lock: not reached; the chunk is not lost.
                let _ = self.shared_deallocate(DevicePtr(c.base), c.size as usize, on);
                continue;
            }
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
    pub(super) fn take_chunk(
        &self,
        mine: usize,
        mut s: ShardGuard<'_>,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        let oom = || MrError::OutOfMemory {
            resource: P::NAME,
            requested: bytes,
            available: None,
        };
        // Records first, so that the chunk taken is always recorded.
        s.heap
            .reserve_records(2)
            .map_err(|full| MrError::records_full(P::NAME, bytes, full))?;
        let live = s.heap.live_bytes().saturating_add(size);
        let chunk = if P::SUPERBLOCKS {
            SUPERBLOCK
        } else {
            grow_chunk(size, live).ok_or_else(oom)?
        };
        let n = usize::try_from(chunk).map_err(|_| oom())?;
        // One chunk spare, so that a thread allocating and freeing one block in a loop keeps
        // its chunk (an arena gave back the others on its frees).
        let target = band(live, SHARD_CHUNK).saturating_sub(chunk);
        let back = if s.heap.held() > target && !P::SUPERBLOCKS {
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
            // the shared pool's already). An arena takes superblocks only.
            Err(e) if e.is_out_of_memory() && !P::SUPERBLOCKS => match shard_chunk(size) {
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
        // Another thread on this shard may have used the records reserved before the lock
        // was let go.
        if let Err(full) = s
            .heap
            .reserve_records(2)
            .and_then(|()| s.heap.add_chunk(slot, c.0, chunk))
        {
            drop(s);
            let _ = self.shared_deallocate(c, chunk as usize, stream);
            return Err(MrError::records_full(P::NAME, bytes, full));
        }
        Self::allocate_in(&mut s, slot, size, bytes).ok_or_else(oom)
    }

    /// Bytes shard `k` holds beyond what it keeps by `keep`, while it lists spare chunks, as
    /// `scan` reads it.
    pub(super) fn room(&self, k: usize, keep: Keep, scan: Scan) -> u64 {
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
    pub(super) fn steal_order(&self, mine: usize, keep: Keep, scan: Scan) -> Vec<usize> {
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
    pub(super) fn steal(
        &self,
        mine: usize,
        size: u64,
        stream: StreamId,
        covered: &[Covered],
        my_live: u64,
        (keep, scan): (Keep, Scan),
    ) -> StolenChunks {
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
            let mut out = StolenChunks {
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
        StolenChunks::default()
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
    pub(super) fn reclaim(&self, mine: usize, need: u64, keep: Keep, scan: Scan) {
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
    pub(super) fn trim(&self, s: &mut Shard, target: u64, need: u64) -> u64 {
        let back = s.take_beyond(target, need);
        if !back.is_empty() {
            // A refusal leaves the chunks with the shared pool, which gives them back on
            // release.
            let _ = self.shared_exchange(&back, 0, StreamId::DEFAULT);
        }
        back.iter().map(|&(_, n, _)| n as u64).sum()
    }

    /// Gives the shard's wholly free chunks, but `keep` of them, back to the shared pool.
    pub(super) fn give_back(&self, s: &mut Shard, keep: usize) -> MrResult<u64> {
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
}
