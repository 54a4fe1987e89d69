//! Giving back the physical memory of an [`ExpandableSegment`]'s free blocks anywhere in its
//! range, and mapping it again where an allocation lands: trims, deferred unmaps, holes
//! filled.
//!
//! Where the pool would map memory (held grows nowhere else), the segment first gives back
//! what the mapping would take past the most it ever had mapped, or past the most live bytes
//! seen and 1 % ([`TrimPolicy`](super::granules::TrimPolicy)): it carves the handles the
//! largest free blocks wholly cover out as holes (`heap_holes`: in no list, so no allocation
//! lands there) and unmaps them, leaving alone the free blocks the request is to take. Only
//! the partial granules at free blocks' edges stay mapped, and held memory stops growing where
//! live memory does.
//!
//! A hole never merges with a free block (the fast paths must never hand one out), so a
//! request sees a run of holes and free blocks of its stream — and the room past the segment's
//! end when the run reaches it — as one range only through a *window*: the place in such a run
//! where it maps the fewest bytes ([`ExpandableSegment::best_window`]). Mapping the window's
//! holes makes them free blocks that merge with the free blocks between them, so a pool with
//! nothing live serves a request of nearly the whole device however its holes lie. A window
//! is taken when it maps no more than growing at the end would, or when the device is short.
//!
//! Handles that a trim unmaps are kept and mapped again where a request goes (`spare`):
//! memory moved in a steady loop costs an unmap and a map, not a release and a create as well
//! (the latter two are most of a VMM call's time: 14 and 13 µs a granule on an H200). A
//! request keeps what it does not use only while the mapped and kept bytes stay under the
//! policy's limit, so held memory (the driver counts kept handles) stays under it; `release`
//! gives them all back.
//!
//! Unmapping is not stream-ordered: a batch of holes goes back once an event recorded on the
//! stream whose lists held them (after every free into them) has completed — at once when the
//! stream is idle, else at the next look (a deferred unmap); before that the holes are in no
//! list, so nothing reuses them, and no window crosses them. A stream running behind the host
//! (a training step's kernels) still uses the holes, and mapping new memory beside them held
//! both: W2 with a kernel writing every block held 1.933 × live on the simulator, the
//! transformer and fine-tuning traces 1.074 and 1.148 on an H200. So a trim made to keep what
//! is mapped under the mark *lends* its holes' handles to the request
//! ([`ExpandableSegment::lend_pending`]): the request maps them where it goes — a second
//! mapping of the same physical memory, which CUDA allows — with its stream ordered after the
//! holes' event (`cuStreamWaitEvent`, or the same stream), and the holes' mappings go when the
//! event has completed, as before. Neither the host waits nor memory is mapped beside. A
//! handle maps whole, so where the lent handles (and spares) that fit cannot cover what the
//! request maps, the host waits for the event first and the holes go back before it maps
//! ([`ExpandableSegment::wait_pending`]): busy W2 then holds 1.016 with 28 % fewer waits than
//! waiting at every move. Tried: never waiting (busy W2 held 1.497: the holes' leftover handles
//! stay mapped, and their addresses stay out of the request's windows, until the stream is
//! done), and waiting only when the lent handles fall short of the excess alone, or by more
//! than 2 to 16 MiB (186 to 224 waits against 192, the same memory). After a context
//! synchronize (`release`, a device short of memory) everything goes back at once.
//!
//! Measured (four PyTorch traces in `benchmarks/traces`, W1–W3, `segment_calls` in emm-bench):
//! giving back every free handle whenever free bytes had grown by 0.5 % of mapped held the
//! traces at 1.001–1.016 but unmapped and mapped again in every step of a steady loop (W2: 17
//! µs of driver calls an operation on the simulator); a slack of 2 % over the live peak
//! instead of 1 % cut W2's calls a fifth and held the traces at up to 1.019; handles of 4 or
//! 16 granules for what a request maps cut the calls 2 to 100 times but held the decoding
//! trace at 1.05 (whole handles only go back); windows and moved handles took W2 from 127 to
//! 37 calls on physical memory per 1 000 operations, 2.0 to 0.7 µs of driver time an
//! operation; handles of any size kept between requests, to 26 (no create or release) and
//! 0.54 µs, and finetune-checkpoint's creates and releases from 96 to 26 per 1 000 (its steps
//! on an H200 then took as long as under the caching allocator). On an H200, W2 still took
//! 1.4–2.3 µs an operation: a map or unmap of up to 64 MiB costs tens of µs there. So moves
//! spend from a budget of the host's time ([`MoveBudget`](crate::mr::detail::move_budget)):
//! W2, which does nothing else, stops moving after its warm-up (32–41 ns an operation on an
//! H200, held 1.09–1.11), while the traces at their pace stay within it. Tried: a one-second
//! cap on saved credit refused the bursts in which the traces move after their warm-up.

use crate::driver::{Driver, EventId, StreamId};
use crate::error::DriverResult;
use crate::mr::detail::granules::handle_bytes;
use crate::mr::detail::heap::{CoalescingHeap, UNMAPPED};
use crate::mr::detail::heap_holes::FreeRun;
use crate::mr::detail::record::NIL;

use super::ExpandableSegment;

/// Which free blocks [`ExpandableSegment::trim`] gives the handles of back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Give {
    /// The largest below the free end (and the free end too when `wild`), none of them
    /// inside `keep`, until at least `bytes` go back.
    Excess {
        /// Bytes to give back.
        bytes: u64,
        /// Whether the free end may go back.
        wild: bool,
        /// A range whose free blocks stay: where the request is about to go.
        keep: (u64, u64),
    },
    /// Every one.
    All,
}

/// A piece of a run of address space a request may take: free in its slot (mapped), or to
/// be mapped (a hole, or the room past the segment's end).
#[derive(Debug, Clone, Copy)]
struct Piece {
    lo: u64,
    hi: u64,
    map: bool,
}

/// Where a request maps the fewest new bytes ([`ExpandableSegment::best_window`]).
#[derive(Debug)]
pub(super) struct Window {
    /// The request's first address.
    pub(super) start: u64,
    /// The bytes to map.
    pub(super) cost: u64,
    /// The ranges to map (granule multiples): holes, and room past the end.
    pub(super) ranges: Vec<(u64, u64)>,
    /// How many.
    pieces: usize,
}

/// Holes carved together, unmapped once `event` (recorded on `stream`) has completed.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) event: Option<EventId>,
    pub(super) stream: StreamId,
    pub(super) ranges: Vec<(u64, u64)>,
    /// Whether their handles were lent ([`ExpandableSegment::lend_pending`]).
    pub(super) lent: bool,
}

impl ExpandableSegment {
    /// An event recorded on `stream` now, from the spares or new.
    fn record(&mut self, driver: &dyn Driver, stream: StreamId) -> DriverResult<EventId> {
        let e = match self.more.spare_events.pop() {
            Some(e) => e,
            None => driver.event_create()?,
        };
        driver
            .event_record(e, stream)
            .inspect_err(|_| self.more.spare_events.push(e))?;
        Ok(e)
    }

    /// Looks for free blocks in `heap` that wholly cover mapped handles, carves those handles
    /// out as holes and unmaps them once the device is done with them (see the module docs);
    /// `give` says which blocks and when. `synchronized`: the caller waited for the device,
    /// so everything goes back now.
    ///
    /// # Errors
    ///
    /// The driver's first error unmapping; what it refused stays a hole, still mapped, and is
    /// tried again at the next look.
    ///
    /// # Time complexity
    ///
    /// O(free blocks × log handles) when it looks, plus one event record per stream holding
    /// such blocks and one query, and two driver calls per handle given back; O(1) otherwise.
    pub(crate) fn trim(
        &mut self,
        driver: &dyn Driver,
        heap: &mut CoalescingHeap,
        synchronized: bool,
        give: Give,
    ) -> DriverResult<()> {
        let look = !matches!(give, Give::Excess { bytes: 0, .. });
        if look {
            let mut cuts: Vec<(FreeRun, u64, u64)> = self.cuts(heap, give).collect();
            if let Give::Excess { bytes, .. } = give {
                // The largest first, as few as cover the excess.
                cuts.sort_by_key(|&(_, lo, hi)| std::cmp::Reverse(hi - lo));
                let mut sum = 0;
                let n = cuts
                    .iter()
                    .take_while(|&&(_, lo, hi)| {
                        let more = sum < bytes;
                        sum += hi - lo;
                        more
                    })
                    .count();
                cuts.truncate(n);
            }
            cuts.sort_by_key(|c| c.0.slot);
            for same in cuts.chunk_by(|a, b| a.0.slot == b.0.slot) {
                // Two records a carve at the most. Without them the memory stays mapped and
                // free: held longer, nothing lost.
                if heap.reserve_records(2 * same.len()).is_err() {
                    continue;
                }
                let stream = heap.stream_of(same[0].0.slot);
                let event = if synchronized {
                    None
                } else {
                    match self.record(driver, stream) {
                        Ok(e) => Some(e),
                        // A stream the user destroyed: its blocks wait for a synchronize.
                        Err(_) => continue,
                    }
                };
                for &(run, lo, hi) in same {
                    self.more.holes.carve(heap, run, lo, hi);
                }
                let ranges = same.iter().map(|&(_, lo, hi)| (lo, hi)).collect();
                self.pending.push(Pending {
                    event,
                    stream,
                    ranges,
                    lent: false,
                });
            }
        }
        self.settle(driver, heap, synchronized)
    }

    /// The handles each free block `give` names wholly covers, as one run: the block and
    /// the run's ends.
    fn cuts<'a>(
        &'a self,
        heap: &CoalescingHeap,
        give: Give,
    ) -> impl Iterator<Item = (FreeRun, u64, u64)> + 'a {
        let w = heap.wild().map(|(addr, _, _)| addr);
        heap.free_runs()
            .into_iter()
            .filter(move |r| match give {
                Give::Excess { wild, keep, .. } => {
                    (wild || Some(r.addr) != w) && (r.addr >= keep.1 || r.addr + r.size <= keep.0)
                }
                Give::All => true,
            })
            .filter_map(|r| {
                let (lo, hi) = self.more.maps.whole_run(r.addr, r.addr + r.size)?;
                Some((r, lo, hi))
            })
    }

    /// Bytes of the handles the free blocks `give` names wholly cover.
    pub(super) fn whole_free_bytes(&self, heap: &CoalescingHeap, give: Give) -> u64 {
        self.cuts(heap, give).map(|(_, lo, hi)| hi - lo).sum()
    }

    /// Unmaps the holes whose batch's event has completed (all of them when `synchronized`),
    /// then cuts a hole at the end of the chunk off it.
    pub(super) fn settle(
        &mut self,
        driver: &dyn Driver,
        heap: &mut CoalescingHeap,
        synchronized: bool,
    ) -> DriverResult<()> {
        let mut first_err = None;
        let mut k = 0;
        while k < self.pending.len() {
            let done = synchronized
                || self.pending[k]
                    .event
                    .is_none_or(|e| driver.event_query(e).unwrap_or(false));
            if !done {
                k += 1;
                continue;
            }
            let p = self.pending.swap_remove(k);
            let mut failed = Vec::new();
            for (lo, hi) in p.ranges {
                if let Err(e) = self.unmap_range(driver, lo, hi) {
                    first_err.get_or_insert(e);
                    failed.push((lo, hi));
                }
            }
            if let Some(e) = p.event {
                // What stayed mapped is lent no more: the event goes to another batch.
                self.more.lent.retain(|l| l.0 != e);
                self.more.spare_events.push(e);
            }
            if !failed.is_empty() {
                // Tried again at the next settle; the device is done with it.
                self.pending.push(Pending {
                    event: None,
                    stream: p.stream,
                    ranges: failed,
                    lent: false,
                });
                k = self.pending.len();
            }
        }
        while let Some((addr, size)) = self.more.holes.last(heap) {
            if self.more.maps.overlaps(addr, addr + size) {
                break;
            }
            self.more.holes.cut_tail(heap);
            self.end = addr;
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Lends the handles of the holes still mapped to the request about to map: it maps them
    /// where it goes (a second mapping of the same memory, as CUDA allows) with its stream
    /// ordered after the holes' event, instead of creating new ones beside memory a busy
    /// stream still uses; the holes are unmapped once the event has completed, as before.
    /// Holes the device is done with go back at once. Returns the bytes of the lent handles
    /// that fit in `need` bytes, and of the spares.
    pub(super) fn lend_pending(
        &mut self,
        driver: &dyn Driver,
        heap: &mut CoalescingHeap,
        need: u64,
    ) -> u64 {
        let _ = self.settle(driver, heap, false);
        for p in self.pending.iter_mut().filter(|p| !p.lent) {
            let Some(e) = p.event else { continue };
            p.lent = true;
            for &(lo, hi) in &p.ranges {
                for (_, h, n) in self.more.maps.inside(lo, hi) {
                    // A handle a request took from an earlier batch is not lent twice.
                    if !self.more.taken.iter().any(|t| t.0 == h) {
                        self.more.lent.push((e, p.stream, h, n));
                    }
                }
            }
        }
        let fit = |n: u64| if n <= need { n } else { 0 };
        let spare = self
            .more
            .spare
            .as_ref()
            .map_or(0, |s| s.iter().map(|&(_, n)| fit(n)).sum());
        spare + self.more.lent.iter().map(|l| fit(l.3)).sum::<u64>()
    }

    /// Waits for the device to pass the frees into the holes still mapped, and unmaps them:
    /// their handles (those no request took) go to the spares. The device's error leaves a
    /// hole to the next look.
    pub(super) fn wait_pending(&mut self, driver: &dyn Driver, heap: &mut CoalescingHeap) {
        if self.pending.is_empty() {
            return;
        }
        for e in self.pending.iter().filter_map(|p| p.event) {
            let _ = driver.event_synchronize(e);
        }
        let _ = self.settle(driver, heap, false);
    }

    /// Whether block `i` of `heap` may be part of a window for `slot`: free in `slot`'s lists
    /// (or its wilderness), or a hole whose memory went back (a hole still mapped waits for
    /// the device, and nothing may map over it).
    fn usable(&self, heap: &CoalescingHeap, i: u32, slot: usize) -> bool {
        if i == NIL {
            return false;
        }
        let b = heap.slab.get(i);
        if b.owner == UNMAPPED {
            !self.more.maps.overlaps(b.addr, b.addr + b.size())
        } else {
            b.is_free() && usize::from(b.owner) == slot
        }
    }

    /// The runs of address space `slot` may take that hold a hole: each a maximal sequence
    /// of blocks [`ExpandableSegment::usable`] for `slot`, with the room past the end of the
    /// reservation as one more piece to map when the run reaches the segment's end.
    ///
    /// # Time complexity
    ///
    /// O(holes + blocks of the runs).
    fn runs(&self, heap: &CoalescingHeap, slot: usize) -> Vec<Vec<Piece>> {
        let mut runs = Vec::new();
        let mut seen = 0;
        let room_end = self.base + self.reserved;
        for (addr, h) in self.more.holes.records() {
            if addr < seen || !self.usable(heap, h, slot) {
                continue;
            }
            let mut i = h;
            loop {
                let p = heap.slab.get(i).prev_phys;
                if !self.usable(heap, p, slot) {
                    break;
                }
                i = p;
            }
            let mut run = Vec::new();
            while self.usable(heap, i, slot) {
                let b = heap.slab.get(i);
                run.push(Piece {
                    lo: b.addr,
                    hi: b.addr + b.size(),
                    map: b.owner == UNMAPPED,
                });
                i = b.next_phys;
            }
            // The sentinel's link ends the chunk, which ends at `end`.
            if i == NIL && self.end < room_end {
                run.push(Piece {
                    lo: self.end,
                    hi: room_end,
                    map: true,
                });
            }
            seen = run.last().map_or(addr, |p| p.hi);
            runs.push(run);
        }
        runs
    }

    /// Where `size` bytes on `slot` map the fewest new bytes across holes and the free blocks
    /// between them (and the room past the end): holes never merge with free blocks, so a run
    /// of them is one free range only once its holes are mapped. `None` when no run holds the
    /// request within `room`.
    ///
    /// # Time complexity
    ///
    /// O(holes + blocks of the runs × log of that).
    pub(super) fn best_window(
        &self,
        heap: &CoalescingHeap,
        slot: usize,
        size: u64,
        room: Option<u64>,
    ) -> Option<Window> {
        let g = self.granularity;
        let mut best: Option<Window> = None;
        for run in self.runs(heap, slot) {
            let (lo, hi) = (run[0].lo, run[run.len() - 1].hi);
            if hi - lo < size {
                continue;
            }
            // The bytes to map before each piece.
            let mut before = Vec::with_capacity(run.len() + 1);
            let mut sum = 0;
            for p in &run {
                before.push(sum);
                sum += if p.map { p.hi - p.lo } else { 0 };
            }
            before.push(sum);
            let cost = |s: u64| -> (u64, usize) {
                let e = s + size;
                let i = run.partition_point(|p| p.hi <= s);
                let k = run.partition_point(|p| p.hi < e);
                let (first, last) = (&run[i], &run[k]);
                // Holes and the room past the end are granule multiples: the granules the
                // request touches in them.
                let part = |p: &Piece| {
                    if p.map {
                        p.hi.min(e.div_ceil(g) * g) - p.lo.max(s / g * g)
                    } else {
                        0
                    }
                };
                let mapped = if i == k {
                    part(first)
                } else {
                    part(first) + before[k] - before[i + 1] + part(last)
                };
                let pieces = run[i..=k].iter().filter(|p| p.map).count();
                (mapped, pieces)
            };
            // The cost is linear in the start between the points where the request starts or
            // ends at a piece's edge: the least is at one of them.
            let starts = run
                .iter()
                .flat_map(|p| [Some(p.lo), p.hi.checked_sub(size)])
                .flatten()
                .filter(|&s| s >= lo && s + size <= hi);
            for s in starts {
                let (bytes, pieces) = cost(s);
                if room.is_some_and(|r| bytes > r) {
                    continue;
                }
                let key = (bytes, pieces, s);
                if best
                    .as_ref()
                    .is_none_or(|w| key < (w.cost, w.pieces, w.start))
                {
                    let e = s + size;
                    let ranges = run
                        .iter()
                        .filter(|p| p.map && p.lo < e && p.hi > s)
                        .map(|p| (p.lo.max(s / g * g), p.hi.min(e.div_ceil(g) * g)))
                        .collect();
                    best = Some(Window {
                        start: s,
                        cost: bytes,
                        pieces,
                        ranges,
                    });
                }
            }
        }
        best
    }

    /// Maps the window [`ExpandableSegment::best_window`] finds for `size` bytes on `slot`,
    /// when that maps no more than growing at the end would (or `anyway`): its holes become
    /// free in `slot`, merged with the free blocks between them, and room past the end grows
    /// the segment. Returns whether it mapped one.
    ///
    /// # Errors
    ///
    /// The driver's (out of memory); nothing changed.
    ///
    /// # Time complexity
    ///
    /// That of `best_window`, plus two driver calls per handle mapped and one per range.
    pub(super) fn fill_for(
        &mut self,
        driver: &dyn Driver,
        heap: &mut CoalescingHeap,
        slot: usize,
        size: u64,
        room: Option<u64>,
        anyway: bool,
    ) -> DriverResult<bool> {
        let Some(w) = self.best_window(heap, slot, size, room) else {
            return Ok(false);
        };
        if w.cost > self.grow_bytes(heap, slot, size) && !anyway {
            return Ok(false);
        }
        // Two records a range at the most (a fill splits a hole twice, or the end grows), and
        // the split of the request: taken before any memory is mapped, so that what is mapped
        // is recorded. Without them, growing at the end reports the host's refusal.
        if heap.reserve_records(2 * w.ranges.len() + 1).is_err() {
            return Ok(false);
        }
        let g = self.granularity;
        let handles: u64 = w
            .ranges
            .iter()
            .map(|&(lo, hi)| (hi - lo).div_ceil(handle_bytes(hi - lo, g)))
            .sum();
        if handles > 1 {
            // Mapping stops at the first handle the device lacks: ask first.
            self.fit_free(driver, w.cost, w.cost)?;
        }
        for (k, &(lo, hi)) in w.ranges.iter().enumerate() {
            if let Err(e) = self.map_range(driver, lo, hi - lo, heap.stream_of(slot)) {
                // Nothing touched the memory mapped so far: no wait before unmapping it.
                for &(lo, hi) in &w.ranges[..k] {
                    let _ = self.unmap_range(driver, lo, hi);
                }
                return Err(e);
            }
        }
        for &(lo, hi) in &w.ranges {
            if lo >= self.end {
                debug_assert!(lo == self.end && hi.is_multiple_of(g));
                let extended = heap.extend_chunk(slot, hi - lo);
                debug_assert!(extended.is_ok(), "the records were reserved");
                self.end = hi;
            } else {
                let filled = self.more.holes.fill(heap, slot, lo, hi);
                debug_assert!(filled);
            }
        }
        debug_assert!(w.start + size <= self.end);
        Ok(true)
    }

    /// The bytes growing at the end would map for `size` bytes on `slot`, at the least.
    pub(super) fn grow_bytes(&self, heap: &CoalescingHeap, slot: usize, size: u64) -> u64 {
        size.saturating_sub(Self::wild_of(heap, slot))
            .div_ceil(self.granularity)
            .saturating_mul(self.granularity)
    }

    /// Gives back every wholly free handle, the holes waiting for the device included, and
    /// cuts the chunk where its free end starts; returns the bytes given back. The caller has
    /// waited for the device (an unmap is not stream-ordered).
    ///
    /// # Errors
    ///
    /// The driver's first error; what was unmapped before it is out of the heap.
    ///
    /// # Time complexity
    ///
    /// O(free blocks × log handles) plus two driver calls per handle given back.
    pub(crate) fn release_free(
        &mut self,
        driver: &dyn Driver,
        heap: &mut CoalescingHeap,
    ) -> DriverResult<u64> {
        let before = self.mapped() + self.spare_bytes();
        let r = self.trim(driver, heap, true, Give::All);
        self.release_spares(driver);
        r.map(|()| before - self.mapped())
    }

    /// Whether holes wait for the device before they are unmapped.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}
