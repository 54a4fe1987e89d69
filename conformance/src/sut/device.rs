//! Device memory: `memalloc`, `memalloc_async`, `memfree_async`, views, writes, read-backs
//! and drops.

use emm_core::attribution::CallerScope;
use emm_core::contract::{EmmError, EmmResult, Finalizer, MemoryPointer};
use emm_core::mr::{DeviceMemoryResource, MrError};
use emm_core::units::Bytes;
use emm_core::StreamId;

use super::{guarded, BufKind, Buffer, Found, Handle, Sut, HARNESS};
use crate::assertions::{
    check_for_breach, check_memalloc_aligned, check_memalloc_in_device_memory,
    check_memalloc_never_overlaps, check_out_of_memory_is_an_error,
    check_writes_stay_in_their_allocation, check_zero_size_is_an_error, ALIGNMENT,
};
use crate::checks::CheckId;
use crate::model::Region;
use crate::transition::{align_log, Lane, Pick, Size};

/// Bytes the suite writes and reads at each end of an allocation.
pub(super) const EDGE: usize = 64;

/// The ranges `(offset, len)` of an allocation of `size` bytes that the suite writes.
pub(super) fn spans(size: usize) -> [(usize, usize); 2] {
    if size <= 2 * EDGE {
        let head = size.min(EDGE);
        [(0, head), (head, size - head)]
    } else {
        [(0, EDGE), (size - EDGE, EDGE)]
    }
}

/// How an allocation came about, for the checks it must pass.
pub(super) struct Request {
    pub what: &'static str,
    pub size: Size,
    pub bytes: usize,
    /// The stream of a stream-ordered request.
    pub stream: Option<StreamId>,
    /// The alignment asked for (256 for `memalloc`, which takes none).
    pub align: u64,
    /// The check an overlap breaks (a probe after `initialize` files it there).
    pub overlap: CheckId,
    /// The driver-call mark taken just before the request, where the backend counts calls.
    pub mark: Option<u64>,
}

impl Sut {
    pub(super) fn memalloc(&mut self, size: Size) -> Found {
        self.ensure_initialized()?;
        let bytes = self.resolve(size);
        let mark = self.mark();
        let r = self.call(|m| m.memalloc(bytes))?;
        let req = Request {
            what: "memalloc",
            size,
            bytes,
            stream: None,
            align: ALIGNMENT,
            overlap: CheckId::MemallocNeverOverlaps,
            mark,
        };
        self.allocated(&req, r).map(drop)
    }

    pub(super) fn memalloc_async(&mut self, size: Size, lane: Lane) -> Found {
        self.ensure_initialized()?;
        let bytes = self.resolve(size);
        let stream = self.lane(lane);
        let mark = self.mark();
        let r = self.call(|m| m.memalloc_async(bytes, stream))?;
        if !self.caps.stream_ordered {
            return match r {
                Ok(Err(EmmError::Unsupported { .. })) => Ok(()),
                Ok(other) => Err(self.fail(
                    CheckId::StreamOrderedReuse,
                    format!(
                        "capabilities().stream_ordered is false, so memalloc_async must say \
                         Unsupported; it returned {:?}",
                        other.map(|p| p.device_ptr())
                    ),
                )),
                Err(p) => Err(self.fail(CheckId::StreamOrderedReuse, p)),
            };
        }
        let req = Request {
            what: "memalloc_async",
            size,
            bytes,
            stream: Some(stream),
            align: ALIGNMENT,
            overlap: CheckId::MemallocNeverOverlaps,
            mark,
        };
        let r = self.allocated(&req, r)?;
        if r.is_some() {
            self.coverage.lanes |= 1 << (usize::from(lane) % crate::transition::LANES);
        }
        Ok(())
    }

    /// `allocate_aligned(size, 2^align)` through a sandboxed plugin's resource, the one path
    /// of a manager that carries an alignment (`emm_alloc`'s `align`). The pointer is held as
    /// `memalloc`'s are, its finalizer frees it through the resource. An answer of
    /// "unsupported alignment" is the ABI's own (`-2`: a policy may decline an alignment it
    /// cannot honour); memory that comes back must be aligned as asked.
    pub(super) fn memalloc_aligned(&mut self, size: Size, align: u8) -> Found {
        let Some(resource) = self.sandbox.clone() else {
            return Ok(());
        };
        self.ensure_initialized()?;
        let bytes = self.resolve(size);
        let log = align_log(align);
        let alignment = 1u64 << log;
        let Ok(align_arg) = usize::try_from(alignment) else {
            return Ok(());
        };
        let mark = self.mark();
        let context = self.context;
        let r =
            guarded(|| resource.allocate_aligned(bytes, align_arg, StreamId::DEFAULT)).map(|r| {
                match r {
                    Ok(ptr) => {
                        let owner = resource.clone();
                        let free = Finalizer::new(move || {
                            // A refused free is recorded by the resource and quarantines the
                            // plugin; the next operation reports it.
                            let _ = owner.deallocate(ptr, bytes, StreamId::DEFAULT);
                        });
                        Ok(MemoryPointer::new(context, ptr, bytes, Some(free)))
                    }
                    Err(e) => Err(EmmError::from(e)),
                }
            });
        let unsupported = matches!(
            r,
            Ok(Err(EmmError::Resource(
                MrError::UnsupportedAlignment { .. }
            ))) | Ok(Err(EmmError::Unsupported { .. }))
        );
        if unsupported {
            self.coverage.alignments_unsupported |= 1 << log;
            return Ok(());
        }
        let req = Request {
            what: "allocate_aligned",
            size,
            bytes,
            stream: None,
            align: alignment,
            overlap: CheckId::MemallocNeverOverlaps,
            mark,
        };
        if self.allocated(&req, r)?.is_some() {
            self.coverage.alignments_served |= 1 << log;
        }
        Ok(())
    }

    /// Checks what an allocation returned; keeps and writes a new pointer. Returns its buffer.
    pub(super) fn allocated(
        &mut self,
        req: &Request,
        r: Result<EmmResult<MemoryPointer>, String>,
    ) -> Result<Option<u32>, super::Finding> {
        let asked = format!("{}({})", req.what, Bytes(req.bytes as u64));
        if req.size != Size::Zero && !req.size.is_absurd() {
            self.coverage.request(req.bytes as u64);
        }
        let r = match r {
            Ok(r) => r,
            Err(panic) => {
                let check = if req.size == Size::Zero {
                    CheckId::ZeroSizeIsAnError
                } else if req.size.is_absurd() || self.exceeds_free(req.bytes) {
                    CheckId::OutOfMemoryIsAnError
                } else {
                    CheckId::MemallocInDeviceMemory
                };
                return Err(self.fail(check, format!("{asked}: {panic}")));
            }
        };
        if req.size == Size::Zero {
            return check_zero_size_is_an_error(req.what, &r)
                .map(|()| None)
                .map_err(|m| self.fail(CheckId::ZeroSizeIsAnError, m));
        }
        if req.size.is_absurd() {
            return check_out_of_memory_is_an_error(req.what, req.bytes, &r)
                .map(|()| None)
                .map_err(|m| self.fail(CheckId::OutOfMemoryIsAnError, m));
        }
        let ptr = match r {
            Ok(p) => p,
            Err(e) if e.is_out_of_memory() => {
                if req.bytes as u64 <= self.device_total {
                    if req.stream.is_none() {
                        self.model.last_oom = Some(req.bytes);
                    }
                    self.check_oom_honest(req, &asked, &e)?;
                }
                return Ok(None);
            }
            Err(e) => {
                let text = e.to_string();
                let check = match check_for_breach(&text) {
                    Some(CheckId::MemallocNeverOverlaps) => req.overlap,
                    Some(c) => c,
                    None if req.stream.is_some() => CheckId::StreamOrderedReuse,
                    None => CheckId::MemallocInDeviceMemory,
                };
                return Err(self.fail(check, format!("{asked} failed: {text}")));
            }
        };
        let base = ptr.device_ptr();
        check_memalloc_aligned(base, req.bytes, req.align)
            .map_err(|m| self.fail(CheckId::MemallocAligned, m))?;
        check_memalloc_in_device_memory(&*self.driver, &ptr, req.bytes)
            .map_err(|m| self.fail(CheckId::MemallocInDeviceMemory, m))?;
        check_memalloc_never_overlaps(&self.model, &asked, base, req.bytes)
            .map_err(|m| self.fail(req.overlap, m))?;
        // A real cross-stream reuse: memory freed in stream order on one stream (its last use
        // queued there, maybe still running) handed out for another. Memory freed after the
        // host waited for it exercises nothing.
        let now = req.stream.unwrap_or(StreamId::DEFAULT);
        if let Some(Region::Freed {
            stream: Some(freed_on),
            ..
        }) = self.model.reused(base.0)
        {
            if freed_on != now {
                self.coverage.cross_stream_reuses += 1;
            }
        }
        self.coverage.largest_served = self.coverage.largest_served.max(req.bytes as u64);
        let id = self.new_buffer(Buffer {
            base,
            size: req.bytes,
            kind: BufKind::Device,
            alloc_stream: req.stream,
            last_stream: req.stream.unwrap_or(StreamId::DEFAULT),
            fill: 0,
            handles: 1,
        });
        self.model
            .insert_live(base.0, req.bytes as u64, id, req.stream);
        self.handles.push(Handle::Pointer { buffer: id, ptr });
        self.coverage.live_high_water =
            self.coverage.live_high_water.max(self.buffers.len() as u64);
        let stream = req.stream.unwrap_or(StreamId::DEFAULT);
        self.fill(id, stream, CheckId::MemallocInDeviceMemory)?;
        Ok(Some(id))
    }

    /// A mark of the driver calls so far, where the backend sees which layer calls it.
    pub(super) fn mark(&self) -> Option<u64> {
        if self.observes.attribution {
            self.machine.call_mark()
        } else {
            None
        }
    }

    /// The bytes of a request of `size` on this machine. A near-total request is measured
    /// from the memory that was free before the manager existed, in whole allocation granules
    /// (a GPU hands out large allocations in 2 MiB pages), so that it fits once nothing else is
    /// live and its out-of-memory answer, and the retry after frees, prove something.
    pub(super) fn resolve(&self, size: Size) -> usize {
        let Size::NearTotal(n) = size else {
            return size.bytes(self.device_total);
        };
        let granule = self.granule();
        let usable = self.baseline_free / granule * granule;
        let bytes = usable.saturating_sub((u64::from(n) + 1) << 20).max(1);
        usize::try_from(bytes).unwrap_or(usize::MAX)
    }

    /// An out-of-memory answer is honest only when the memory was really not available: the
    /// host refused the plugin a chunk for a configured limit (`PluginLimits::max_held_bytes`,
    /// `max_chunks`: the answer never reaches the driver, so the resource counts it), the
    /// plugin's upstream refused it in that call, or the request does not fit in what the
    /// device had free before the manager existed less what is live now (with a granule of
    /// slack per live allocation for rounding, and 1/64 of the device for reservations). A plugin that refuses a request that fits
    /// without asking its upstream could have served it.
    fn check_oom_honest(&mut self, req: &Request, asked: &str, e: &EmmError) -> Found {
        self.coverage.oom_answers += 1;
        if self.refused_for_a_limit() {
            self.coverage.oom_checked += 1;
            self.coverage.oom_at_limit += 1;
            return Ok(());
        }
        let Some(calls) = req.mark.and_then(|m| self.machine.upstream_since(m)) else {
            return Ok(());
        };
        self.coverage.oom_checked += 1;
        if calls.refused_allocations > 0 {
            return Ok(());
        }
        let granule = self.granule();
        let live: u64 = self.buffers.values().map(|b| b.size as u64).sum();
        // Rounding, and the reservations of pools that map memory in large steps: a request
        // within 1/64 of the device's free memory may not fit after all.
        let slack = granule
            .saturating_mul(self.buffers.len() as u64 + 1)
            .saturating_add(self.baseline_free / 64);
        let needed = (req.bytes as u64)
            .div_ceil(granule)
            .saturating_mul(granule)
            .saturating_add(live)
            .saturating_add(slack);
        if needed > self.baseline_free {
            return Ok(());
        }
        Err(self.fail(
            CheckId::OutOfMemoryIsHonest,
            format!(
                "{asked} answered out of memory ({e}), but the plugin asked its upstream for \
                 nothing in that call, no configured limit refused it a chunk, and the memory \
                 was there: the device had {} free before the manager existed and {} is live in \
                 {} allocation(s). Answer out of memory only after the upstream refused the \
                 request, or a configured limit was reached",
                Bytes(self.baseline_free),
                Bytes(live),
                self.buffers.len()
            ),
        ))
    }

    /// The device's allocation granularity (1 when the driver cannot tell).
    pub(super) fn granule(&self) -> u64 {
        let _h = CallerScope::enter(HARNESS);
        self.driver
            .mem_get_allocation_granularity(emm_core::DeviceId(0))
            .map_or(1, |g| g.max(1) as u64)
    }

    fn exceeds_free(&self, bytes: usize) -> bool {
        let _h = CallerScope::enter(HARNESS);
        self.driver
            .mem_get_info()
            .map_or(true, |i| bytes as u64 > i.free)
    }

    pub(super) fn new_buffer(&mut self, b: Buffer) -> u32 {
        let id = self.next_buffer;
        self.next_buffer += 1;
        self.buffers.insert(id, b);
        id
    }

    /// Writes a new pattern at both ends of buffer `id`, on `stream` (ordered after its last
    /// use).
    pub(super) fn fill(&mut self, id: u32, stream: StreamId, check: CheckId) -> Found {
        let Some(b) = self.buffers.get(&id) else {
            return Ok(());
        };
        self.order(b.last_stream, stream, check)?;
        // Never 0 (fresh memory) nor the simulator's poison byte.
        let fill = (id.wrapping_mul(37).wrapping_add(u32::from(b.fill)) % 199 + 1) as u8;
        let (base, size) = (b.base, b.size);
        let _h = CallerScope::enter(HARNESS);
        for (off, len) in spans(size).into_iter().filter(|s| s.1 > 0) {
            self.driver
                .memset_d8(base.offset(off as u64), fill, len, Some(stream))
                .map_err(|e| self.harness_error(check, "writing the allocation", e))?;
        }
        if let Some(b) = self.buffers.get_mut(&id) {
            b.fill = fill;
            b.last_stream = stream;
        }
        Ok(())
    }

    /// Reads back both ends of every live buffer and compares them with what was written.
    pub(super) fn verify_all(&mut self, check: CheckId) -> Found {
        let _h = CallerScope::enter(HARNESS);
        let mut read = [0u8; EDGE];
        for (&id, b) in &self.buffers {
            for (off, len) in spans(b.size).into_iter().filter(|s| s.1 > 0) {
                let dst = &mut read[..len];
                self.driver
                    .memcpy_dtoh(dst, b.base.offset(off as u64), Some(b.last_stream))
                    .map_err(|e| {
                        let note = b.kind.fault_note(&e);
                        self.fail(
                            check,
                            format!("reading back allocation #{id} failed: {e}{note}"),
                        )
                    })?;
                check_writes_stay_in_their_allocation(id, off as u64, b.fill, dst)
                    .map_err(|m| self.fail(check, m))?;
            }
        }
        Ok(())
    }

    /// The `pick`th buffer of those `keep` accepts, if any.
    pub(super) fn pick_buffer(&self, pick: Pick, keep: impl Fn(&Buffer) -> bool) -> Option<u32> {
        let ids: Vec<u32> = self
            .buffers
            .iter()
            .filter(|(_, b)| keep(b))
            .map(|(&id, _)| id)
            .collect();
        (!ids.is_empty()).then(|| ids[usize::from(pick) % ids.len()])
    }

    /// Some pointer (owner or view) of buffer `id`.
    pub(super) fn pointer_of(&self, id: u32) -> Option<MemoryPointer> {
        self.handles.iter().find_map(|h| match h {
            Handle::Pointer { buffer, ptr } | Handle::View { buffer, ptr } if *buffer == id => {
                Some(ptr.owner())
            }
            _ => None,
        })
    }

    pub(super) fn write(&mut self, pick: Pick, lane: Lane) -> Found {
        let stream = self.lane(lane);
        match self.pick_buffer(pick, |_| true) {
            Some(id) => self.fill(id, stream, CheckId::WritesStayInTheirAllocation),
            None => Ok(()),
        }
    }

    pub(super) fn view(&mut self, pick: Pick, start: u16) -> Found {
        let Some(id) = self.pick_buffer(pick, |b| b.kind == BufKind::Device) else {
            return Ok(());
        };
        let Some(owner) = self.pointer_of(id) else {
            return Ok(());
        };
        let off = usize::from(start) % owner.size().max(1);
        let view = owner.view(off..).map_err(|e| {
            self.fail(
                CheckId::MemallocInDeviceMemory,
                format!("a view failed: {e}"),
            )
        })?;
        self.handles.push(Handle::View {
            buffer: id,
            ptr: view,
        });
        if let Some(b) = self.buffers.get_mut(&id) {
            b.handles += 1;
        }
        Ok(())
    }

    pub(super) fn drop_handle(&mut self, pick: Pick) -> Found {
        if self.handles.is_empty() {
            return Ok(());
        }
        let h = self.handles.remove(usize::from(pick) % self.handles.len());
        self.release(h)
    }

    /// Drops one handle; the last handle of a buffer is dropped only after every use of the
    /// buffer is ordered before the stream its free happens on.
    pub(super) fn release(&mut self, h: Handle) -> Found {
        if let Some(id) = h.buffer() {
            let last = match self.buffers.get_mut(&id) {
                Some(b) => {
                    b.handles -= 1;
                    b.handles == 0
                }
                None => false,
            };
            if last {
                let freed_on = self.before_free(id, None)?;
                if let Some(b) = self.buffers.remove(&id) {
                    self.model.free(b.base.0, freed_on, self.step);
                }
            }
        }
        guarded(|| drop(h)).map_err(|p| {
            self.fail(
                CheckId::FinalizerRunsOnce,
                format!("dropping a pointer: {p}"),
            )
        })
    }

    /// Orders every use of buffer `id` before its free: on `on` (or its own stream, for
    /// stream-ordered memory), or before the host for memory freed synchronously. Returns
    /// the stream the free is ordered on (`None`: the host waited for the last use).
    pub(super) fn before_free(
        &mut self,
        id: u32,
        on: Option<StreamId>,
    ) -> Result<Option<StreamId>, super::Finding> {
        let Some(b) = self.buffers.get(&id) else {
            return Ok(None);
        };
        let (last, alloc) = (b.last_stream, b.alloc_stream);
        match (alloc, on) {
            (Some(own), on) => {
                let to = on.unwrap_or(own);
                self.order(last, to, CheckId::StreamOrderedReuse)?;
                Ok(Some(to))
            }
            (None, _) => {
                let _h = CallerScope::enter(HARNESS);
                self.driver.stream_synchronize(last).map_err(|e| {
                    self.harness_error(CheckId::FinalizerRunsOnce, "synchronizing", e)
                })?;
                Ok(None)
            }
        }
    }

    pub(super) fn free_async(&mut self, pick: Pick, lane: Lane) -> Found {
        let is_pointer = |s: &Sut, id: u32| {
            s.handles
                .iter()
                .any(|h| matches!(h, Handle::Pointer { buffer, .. } if *buffer == id))
        };
        let Some(id) = self
            .pick_buffer(pick, |b| b.handles == 1 && b.kind == BufKind::Device)
            .filter(|&id| is_pointer(self, id))
        else {
            return Ok(());
        };
        let stream = self.lane(lane);
        let at = self
            .handles
            .iter()
            .position(|h| matches!(h, Handle::Pointer { buffer, .. } if *buffer == id));
        let Some(Handle::Pointer { ptr, .. }) = at.map(|i| self.handles.remove(i)) else {
            return Ok(());
        };
        let freed_on = self.before_free(id, Some(stream))?;
        if let Some(b) = self.buffers.remove(&id) {
            self.model.free(b.base.0, freed_on, self.step);
        }
        match self.call(|m| m.memfree_async(ptr, stream))? {
            Ok(Ok(())) => {
                self.coverage.lanes |= 1 << (usize::from(lane) % crate::transition::LANES);
                Ok(())
            }
            Ok(Err(EmmError::Unsupported { .. })) if !self.caps.stream_ordered => Ok(()),
            Ok(Err(e)) => Err(self.fail(
                CheckId::StreamOrderedReuse,
                format!("memfree_async of the only owner on {stream} failed: {e}"),
            )),
            Err(p) => Err(self.fail(CheckId::StreamOrderedReuse, format!("memfree_async: {p}"))),
        }
    }
}
