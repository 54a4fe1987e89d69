//! The manager's lifecycle: `initialize`, `reset`, `defer_cleanup`, out-of-memory recovery and
//! teardown, with the leak checks that follow each.

use emm_core::attribution::{CallerScope, UNATTRIBUTED};
use emm_core::contract::EmmError;
use emm_core::mr::MrError;
use emm_core::units::Bytes;
use emm_core::DeviceId;

use super::device::Request;
use super::{guarded, Finding, Found, Sut, HARNESS};
use crate::assertions::check_for_breach;
use crate::checks::CheckId;
use crate::transition::Size;

/// How far a sandboxed plugin's linear memory may rise after the steady state settles: two wasm
/// pages. A guest heap that reuses what it frees stays put (the example plugins do); one that
/// grows by a page every few requests passes this within a few rounds.
pub const GUEST_SLACK: u64 = 2 * 65_536;

impl Sut {
    /// Initializes the manager before its first allocation, as a context does.
    pub(super) fn ensure_initialized(&mut self) -> Found {
        if self.model.initialized {
            return Ok(());
        }
        self.call_initialize()
    }

    fn call_initialize(&mut self) -> Found {
        const C: CheckId = CheckId::InitializeKeepsState;
        match self.call(|m| m.initialize())? {
            Ok(Ok(())) => {
                self.model.initialized = true;
                Ok(())
            }
            Ok(Err(e)) => Err(self.fail(C, format!("initialize() failed: {e}"))),
            Err(p) => Err(self.fail(C, format!("initialize(): {p}"))),
        }
    }

    /// `initialize()` again, then a probe: every live allocation still reads back, and a new
    /// allocation overlaps none of them.
    pub(super) fn initialize(&mut self) -> Found {
        const C: CheckId = CheckId::InitializeKeepsState;
        // What was overwritten before `initialize()` is no fault of it.
        self.verify_all(CheckId::WritesStayInTheirAllocation)?;
        self.call_initialize()?;
        self.verify_all(C)?;
        let bytes = Size::Pages(0).bytes(self.device_total);
        let mark = self.mark();
        let r = self.call(|m| m.memalloc(bytes))?;
        let req = Request {
            what: "memalloc (a probe after initialize)",
            size: Size::Pages(0),
            bytes,
            stream: None,
            align: crate::assertions::ALIGNMENT,
            overlap: C,
            mark,
        };
        if let Some(id) = self.allocated(&req, r)? {
            let at = self.handles.iter().rposition(|h| h.buffer() == Some(id));
            if let Some(i) = at {
                let h = self.handles.remove(i);
                self.release(h)?;
            }
        }
        // The probe's free is an ordinary free: what it overwrites is no fault of initialize.
        self.verify_all(CheckId::WritesStayInTheirAllocation)
    }

    /// Drops every handle and guard the suite holds, each after its uses are ordered.
    pub(super) fn drop_everything(&mut self) -> Found {
        self.check_scope_kept_chunks()?;
        while let Some(g) = self.guards.pop() {
            guarded(|| drop(g)).map_err(|p| {
                self.fail(CheckId::DeferCleanupNests, format!("dropping a guard: {p}"))
            })?;
        }
        while let Some(h) = self.handles.pop() {
            self.release(h)?;
        }
        Ok(())
    }

    /// Waits for all work of the context (pools release what they keep past their threshold).
    fn synchronize(&self, check: CheckId) -> Found {
        let _h = CallerScope::enter(HARNESS);
        self.driver
            .context_synchronize()
            .map_err(|e| self.harness_error(check, "cuCtxSynchronize", e))
    }

    /// Device memory in use beyond what was in use before the manager was made: counted by
    /// the backend where it keeps its own count (a real GPU's free memory also moves with the
    /// driver's own lazy allocations), else from the driver's free memory.
    fn check_baseline(&self, check: CheckId, when: &str) -> Found {
        self.synchronize(check)?;
        if let (Some(before), Some(now)) =
            (self.baseline_in_use, self.machine.device_bytes_in_use())
        {
            if now <= before {
                return Ok(());
            }
            let live = self
                .machine
                .describe_in_use()
                .map_or(String::new(), |d| format!(" ({d})"));
            return Err(self.fail(
                check,
                format!(
                    "{} of device memory is still allocated {when}{live}",
                    Bytes(now - before)
                ),
            ));
        }
        let free = {
            let _h = CallerScope::enter(HARNESS);
            self.driver
                .mem_get_info()
                .map_err(|e| self.harness_error(check, "cuMemGetInfo", e))?
                .free
        };
        if free >= self.baseline_free {
            return Ok(());
        }
        Err(self.fail(
            check,
            format!(
                "{} of device memory is still allocated {when}",
                Bytes(self.baseline_free - free)
            ),
        ))
    }

    /// A context reset: every pointer and guard goes, then `reset()` must leave no device
    /// memory allocated and no host range pinned.
    pub(super) fn reset(&mut self) -> Found {
        self.drop_everything()?;
        self.synchronize(CheckId::ResetFreesEverything)?;
        let before_initialize = !self.model.initialized;
        let check_for = |e: Option<&EmmError>| match e {
            _ if before_initialize => CheckId::ResetBeforeInitialize,
            Some(EmmError::DeallocationsFailed { .. })
            | Some(EmmError::Resource(MrError::InvalidFree { .. })) => CheckId::FinalizerRunsOnce,
            _ => CheckId::ResetFreesEverything,
        };
        match self.call(|m| m.reset())? {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let when = if before_initialize {
                    " before initialize"
                } else {
                    ""
                };
                return Err(self.fail(check_for(Some(&e)), format!("reset(){when} failed: {e}")));
            }
            Err(p) => return Err(self.fail(check_for(None), format!("reset(): {p}"))),
        }
        self.check_baseline(
            CheckId::ResetFreesEverything,
            "after every pointer was dropped and reset() ran",
        )?;
        self.coverage.resets += 1;
        self.check_unpinned("after its pointer was dropped and reset() ran")
    }

    pub(super) fn defer_cleanup(&mut self) -> Found {
        let g = self
            .call(|m| m.defer_cleanup())?
            .map_err(|p| self.fail(CheckId::DeferCleanupNests, format!("defer_cleanup(): {p}")))?;
        self.guards.push(g);
        self.coverage.defer_scopes += 1;
        self.coverage.deepest_defer = self.coverage.deepest_defer.max(self.guards.len() as u32);
        Ok(())
    }

    /// While a `defer_cleanup()` scope is open the plugin must not give memory back to the
    /// driver ("expensive cleanup operations are avoided whilst it is active"), unless the
    /// driver refused it memory in the same operation (releasing a cache rather than failing a
    /// request is no cleanup that could wait). Checked over the current operation.
    pub(super) fn check_scope_kept_chunks(&self) -> Found {
        if self.guards.is_empty() {
            return Ok(());
        }
        let Some(calls) = self.defer_mark.and_then(|m| self.machine.upstream_since(m)) else {
            return Ok(());
        };
        if calls.returns == 0 || calls.refused_allocations > 0 {
            return Ok(());
        }
        Err(self.fail(
            CheckId::DeferCleanupNests,
            format!(
                "while {} defer_cleanup() scope(s) were open, the plugin gave {} allocation(s) \
                 back to the driver (cuMemFree/cuMemRelease) with no request refused for want \
                 of memory; cleanup must wait until the outermost scope ends",
                self.guards.len(),
                calls.returns
            ),
        ))
    }

    pub(super) fn end_defer_cleanup(&mut self) -> Found {
        if self.guards.len() == 1 {
            self.check_scope_kept_chunks()?;
        }
        match self.guards.pop() {
            Some(g) => guarded(|| drop(g)).map_err(|p| {
                self.fail(
                    CheckId::DeferCleanupNests,
                    format!("dropping the guard: {p}"),
                )
            }),
            None => Ok(()),
        }
    }

    /// A scope holding a guard, left early by an error, as `?` leaves it.
    pub(super) fn defer_cleanup_with_error(&mut self) -> Found {
        self.ensure_initialized()?;
        let m = self.manager()?;
        let r = guarded(|| {
            let scope = || -> Result<(), EmmError> {
                let _cleanup = m.defer_cleanup();
                drop(m.memalloc(0)?);
                Ok(())
            };
            scope()
        })
        .map_err(|p| {
            self.fail(
                CheckId::DeferCleanupNests,
                format!("inside defer_cleanup(): {p}"),
            )
        })?;
        match r {
            Err(_) => Ok(()),
            Ok(()) => Err(self.fail(
                CheckId::ZeroSizeIsAnError,
                "memalloc(0) inside defer_cleanup() returned memory; it must be refused",
            )),
        }
    }

    /// After every pointer and guard is gone, the last request that ran out of memory must
    /// succeed.
    pub(super) fn free_all_and_retry(&mut self) -> Found {
        const C: CheckId = CheckId::OutOfMemoryIsAnError;
        self.drop_everything()?;
        let Some(bytes) = self.model.last_oom.take() else {
            return Ok(());
        };
        // A GPU hands out large allocations in whole pages of its allocation granularity
        // (2 MiB), cuMemAlloc and cuMemMap alike: a request that needs more pages than the
        // device had free before the manager existed (a real GPU keeps some for itself) could
        // be served by no allocator, so its failure proves nothing.
        let page = self
            .driver
            .mem_get_allocation_granularity(DeviceId(0))
            .map_or(1, |g| g.max(1) as u64);
        if (bytes as u64).div_ceil(page) * page > self.baseline_free {
            return Ok(());
        }
        self.synchronize(C)?;
        let mark = self.mark();
        let r = self.call(|m| m.memalloc(bytes))?;
        let retry = match r {
            // A configured limit (`PluginLimits::max_held_bytes`) that the request passes on its
            // own: no free makes room under it, so the answer stays honest.
            Ok(Err(e)) if e.is_out_of_memory() && self.refused_for_a_limit() => {
                self.coverage.oom_at_limit += 1;
                return self.drop_everything();
            }
            Ok(Err(e)) => {
                if !self.device_serves((bytes as u64).div_ceil(page) * page)? {
                    self.coverage.oom_retries_unservable += 1;
                    return Ok(());
                }
                return Err(self.fail(
                    C,
                    format!(
                        "memalloc({}) ran out of memory; after every allocation was freed the same \
                         request still fails: {e} (the driver serves it once the manager is reset)",
                        Bytes(bytes as u64)
                    ),
                ));
            }
            other => other,
        };
        let req = Request {
            what: "memalloc (the retry after out of memory)",
            size: Size::Mib(0),
            bytes,
            stream: None,
            align: crate::assertions::ALIGNMENT,
            overlap: CheckId::MemallocNeverOverlaps,
            mark,
        };
        self.allocated(&req, retry)?;
        self.drop_everything()
    }

    /// Whether the driver itself serves `bytes` (`cuMemAlloc`; whole pages, as any allocator
    /// must take them) once the manager is reset, which gives everything back (a reset that
    /// does not is a finding of its own). A GPU keeps memory for its page tables and context
    /// beyond what `cuMemGetInfo` counts as used, so a request within a few MiB of the free
    /// memory may be one no allocator can serve: its failure after frees proves nothing.
    fn device_serves(&mut self, bytes: u64) -> Result<bool, Finding> {
        const C: CheckId = CheckId::OutOfMemoryIsAnError;
        self.reset()?;
        let _h = CallerScope::enter(HARNESS);
        let Ok(bytes) = usize::try_from(bytes) else {
            return Ok(false);
        };
        match self.driver.mem_alloc(bytes) {
            Ok(p) => {
                self.driver
                    .mem_free(p)
                    .map_err(|e| self.harness_error(C, "cuMemFree", e))?;
                Ok(true)
            }
            Err(e) if e.is_out_of_memory() => Ok(false),
            Err(e) => Err(self.harness_error(C, "cuMemAlloc", e)),
        }
    }

    /// The end of a case: read everything back, reset, drop the manager; then nothing may be
    /// left allocated, pinned or attributed to anyone but the plugin.
    pub(super) fn teardown(&mut self) -> Found {
        self.verify_all(CheckId::WritesStayInTheirAllocation)?;
        self.reset()?;
        self.take_seen()?;
        let manager = self.manager.take();
        guarded(|| drop(manager)).map_err(|p| {
            self.fail(
                CheckId::FinalizerRunsOnce,
                format!("dropping the manager: {p}"),
            )
        })?;
        self.check_baseline(CheckId::FinalizerRunsOnce, "after the manager was dropped")?;
        if self.observes.host_leaks {
            if let Some(held) = self.machine.held() {
                for (n, what, check) in [
                    (
                        held.pinned,
                        "pinned host allocation(s)",
                        CheckId::FinalizerRunsOnce,
                    ),
                    (
                        held.managed,
                        "managed allocation(s)",
                        CheckId::FinalizerRunsOnce,
                    ),
                    (
                        held.registrations,
                        "pinned host range(s)",
                        CheckId::MempinUnpinsInFinalizer,
                    ),
                ] {
                    if n > 0 {
                        return Err(self.fail(
                            check,
                            format!("{n} {what} outlived the manager: a finalizer never ran"),
                        ));
                    }
                }
            }
        }
        if self.observes.attribution {
            let stray = self
                .machine
                .device_allocations()
                .into_iter()
                .find(|a| a.caller == UNATTRIBUTED || a.caller == HARNESS);
            if let Some(a) = stray {
                return Err(self.fail(
                    CheckId::OnlyThePluginAllocates,
                    format!(
                        "{}({}) was made with caller tag [{}]: no layer of the plugin made it (each layer \
                         wraps its driver calls in CallerScope::enter(its name))",
                        a.call,
                        Bytes(a.bytes),
                        a.caller
                    ),
                ));
            }
        }
        self.take_seen()?;
        self.free_pageable();
        let _h = CallerScope::enter(HARNESS);
        for s in self.streams.iter().skip(1) {
            let _ = self.driver.stream_destroy(*s);
        }
        Ok(())
    }

    /// Device memory the manager holds now: what was free before it existed less what is
    /// free now, once all work is done.
    fn held_now(&self, check: CheckId) -> Result<u64, super::Finding> {
        self.synchronize(check)?;
        let _h = CallerScope::enter(HARNESS);
        let free = self
            .driver
            .mem_get_info()
            .map_err(|e| self.harness_error(check, "cuMemGetInfo", e))?
            .free;
        Ok(self.baseline_free.saturating_sub(free))
    }

    /// Rounds of the same requests, freed in a rotating order, with a reset every fourth
    /// round of the warm-up (the first quarter of the rounds, where a pool may still be
    /// settling) and none after: what the plugin holds after a round of the second half must
    /// never exceed the most it held after a round of the second quarter by more than one
    /// round's requests. Growth that goes on
    /// between resets is a leak in slow motion, whatever a reset later gives back.
    ///
    /// A sandboxed plugin's linear memory is held to the same rule, with [`GUEST_SLACK`] for
    /// slack: a guest's heap settles during the warm-up, and memory it grows after that under
    /// the same requests is never given back.
    pub(super) fn steady_state(&mut self, rounds: u16) -> Found {
        const C: CheckId = CheckId::HeldBytesStaySteady;
        /// The requests of a round: odd and even, small and a few MiB.
        const ROUND: [usize; 12] = [
            1,
            3000,
            4096,
            65_537,
            1 << 20,
            (3 << 20) + 5,
            256,
            777,
            12_345,
            2 << 20,
            100_001,
            511,
        ];
        self.drop_everything()?;
        self.ensure_initialized()?;
        let rounds = usize::from(rounds.max(8));
        let (warm, settled) = (rounds / 4, rounds / 2);
        let mut ceiling = 0u64;
        // What one round asks for, plus a granule: a bounded cache or a queue of deferred
        // frees moves by up to about this much from round to round; a leak passes it.
        let slack: u64 = ROUND.iter().map(|&b| b as u64).sum::<u64>() + self.granule();
        let mut ptrs = Vec::with_capacity(ROUND.len());
        let mut guest_ceiling = 0u64;
        for round in 0..rounds {
            for &bytes in &ROUND {
                match self.call(|m| m.memalloc(bytes))? {
                    Ok(Ok(p)) => ptrs.push(p),
                    Ok(Err(e)) => {
                        let text = e.to_string();
                        return Err(self.fail(
                            check_for_breach(&text).unwrap_or(C),
                            format!(
                                "round {round} of {rounds}: memalloc({bytes}) failed: {text}; \
                                 the same requests succeeded before"
                            ),
                        ));
                    }
                    Err(e) => {
                        return Err(self.fail(
                            C,
                            format!(
                                "round {round} of {rounds}: memalloc({bytes}) failed: {e}; the \
                                 same requests succeeded before"
                            ),
                        ))
                    }
                }
            }
            self.coverage.requests += ROUND.len() as u64;
            ptrs.rotate_left(round % ROUND.len());
            let freed = guarded(|| ptrs.clear());
            freed.map_err(|p| self.fail(CheckId::FinalizerRunsOnce, format!("freeing: {p}")))?;
            let held = self.held_now(C)?;
            let guest = self.guest_memory();
            if guest.is_some() {
                self.coverage.guest_memory_checked += 1;
            }
            let guest = guest.unwrap_or(0);
            if round >= warm && round < settled {
                ceiling = ceiling.max(held);
                guest_ceiling = guest_ceiling.max(guest);
            } else if round >= settled && guest > guest_ceiling.saturating_add(GUEST_SLACK) {
                return Err(self.fail(
                    CheckId::GuestMemoryStaysSteady,
                    format!(
                        "after round {round} of {rounds} of the same {} requests, all freed, the \
                         plugin's linear memory is {}, more than the most it was after any of \
                         rounds {warm} to {} ({}) plus {}: it grows its memory and never \
                         reuses it, a leak inside the guest that ends at \
                         PluginLimits::memory_cap",
                        ROUND.len(),
                        Bytes(guest),
                        settled - 1,
                        Bytes(guest_ceiling),
                        Bytes(GUEST_SLACK)
                    ),
                ));
            } else if round >= settled && held > ceiling.saturating_add(slack) {
                return Err(self.fail(
                    C,
                    format!(
                        "after round {round} of {rounds} of the same {} requests, all freed, the \
                         plugin holds {}, more than the most it held after any of rounds {warm} \
                         to {} ({}) plus one round's requests ({}): what it holds keeps growing",
                        ROUND.len(),
                        Bytes(held),
                        settled - 1,
                        Bytes(ceiling),
                        Bytes(slack)
                    ),
                ));
            }
            if round < warm && round % 4 == 3 {
                match self.call(|m| m.reset())? {
                    Ok(Ok(())) => self.coverage.resets += 1,
                    Ok(Err(e)) => {
                        return Err(self.fail(
                            CheckId::ResetFreesEverything,
                            format!("reset() in round {round} failed: {e}"),
                        ))
                    }
                    Err(e) => {
                        return Err(self.fail(
                            CheckId::ResetFreesEverything,
                            format!("reset() in round {round} failed: {e}"),
                        ))
                    }
                }
            }
        }
        Ok(())
    }
}
