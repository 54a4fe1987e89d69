//! One run of a scenario on a fresh simulated GPU, with or without a fault at one position,
//! and the checks a faulted run must pass against the clean one.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use emm_core::attribution::CallerScope;
use emm_core::contract::{Context, ManagerFactory};
use emm_core::{CudaCode, DeviceId, Driver, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, SimReport, TraceEvent, GIB};

use super::scenario::{Harness, Scenario};
use crate::sut::HARNESS;
use crate::transition::LANES;

/// Device memory of a sweep's machine: room for every workload prefix and the suite's
/// near-total requests.
pub const SWEEP_MEMORY: u64 = 4 * GIB;

/// What one run left behind.
#[derive(Debug)]
pub struct RunOutcome {
    /// The panic's message, if the run panicked.
    pub panic: Option<String>,
    /// Every error an operation returned, as text (`what: error`).
    pub errors: Vec<String>,
    /// Allocations that lost their contents.
    pub corrupted: Vec<String>,
    /// The driver calls, in order.
    pub trace: Vec<TraceEvent>,
    /// The simulator's report after teardown.
    pub report: SimReport,
}

/// Runs `scenario` against a manager of `factory` on a fresh machine; with `fault`, the
/// machine fails its `k`-th driver call (1-based, counting every call) with `code`.
///
/// # Errors
///
/// The simulator refuses its configuration (never with the constants here).
pub fn run(
    factory: &Arc<dyn ManagerFactory>,
    scenario: &Scenario,
    seed: u64,
    fault: Option<(u64, CudaCode)>,
) -> Result<RunOutcome, String> {
    let sim = Arc::new(SimDriver::new(
        SimConfig::new(seed).memory_per_device(SWEEP_MEMORY),
    )?);
    if let Some((nth, code)) = fault {
        sim.inject(Fault::FailNth {
            call: None,
            nth,
            code,
        });
    }
    let mut errors = Vec::new();
    let mut corrupted = Vec::new();
    let panic = catch_unwind(AssertUnwindSafe(|| {
        body(factory, scenario, &sim, &mut errors, &mut corrupted)
    }))
    .err()
    .map(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with no message".to_string())
    });
    {
        let _h = CallerScope::enter(HARNESS);
        let _ = sim.context_synchronize();
    }
    Ok(RunOutcome {
        panic,
        errors,
        corrupted,
        trace: sim.trace(),
        report: sim.report(),
    })
}

fn body(
    factory: &Arc<dyn ManagerFactory>,
    scenario: &Scenario,
    sim: &Arc<SimDriver>,
    errors: &mut Vec<String>,
    corrupted: &mut Vec<String>,
) {
    let mut streams = [StreamId::DEFAULT; LANES];
    {
        let _h = CallerScope::enter(HARNESS);
        for s in streams.iter_mut().skip(1) {
            if let Ok(id) = sim.stream_create(true) {
                *s = id;
            }
        }
    }
    let ctx = match Context::with_factory(Arc::clone(sim), DeviceId(0), &**factory) {
        Ok(c) => c,
        Err(e) => {
            errors.push(format!("creating the context: {e}"));
            destroy_streams(sim, &streams);
            return;
        }
    };
    let mut pageable = Vec::new();
    {
        let mut h = Harness::new(&ctx, sim, streams);
        h.run(scenario);
        h.verify("after the scenario");
        h.teardown();
        errors.extend(h.errors.drain(..).map(|(what, e)| format!("{what}: {e}")));
        corrupted.append(&mut h.corrupted);
        pageable.append(&mut h.pageable);
    }
    if let Err(e) = ctx.reset() {
        errors.push(format!("reset at teardown: {e}"));
    }
    drop(ctx);
    let _h = CallerScope::enter(HARNESS);
    for p in pageable {
        let _ = sim.pageable_free(p);
    }
    destroy_streams(sim, &streams);
}

fn destroy_streams(sim: &SimDriver, streams: &[StreamId; LANES]) {
    let _h = CallerScope::enter(HARNESS);
    for &s in streams.iter().skip(1) {
        if s != StreamId::DEFAULT {
            let _ = sim.stream_destroy(s);
        }
    }
}

/// The positions a sweep fails: every driver call the manager (not the harness) makes in the
/// clean run, 1-based in the order of all calls.
pub fn positions(clean: &RunOutcome) -> Vec<u64> {
    clean
        .trace
        .iter()
        .enumerate()
        .filter(|(_, e)| e.process == 0 && e.caller != HARNESS)
        .map(|(i, _)| i as u64 + 1)
        .collect()
}

/// Calls that give something back: when one fails, CUDA keeps the object, so the one object
/// it names may stay held (its failure must still be reported, or the run must recover).
pub fn is_release(call: CallKind) -> bool {
    matches!(
        call,
        CallKind::MemFree
            | CallKind::MemFreeAsync
            | CallKind::HostFree
            | CallKind::HostUnregister
            | CallKind::PageableFree
            | CallKind::StreamDestroy
            | CallKind::EventDestroy
            | CallKind::MemPoolDestroy
            | CallKind::IpcCloseMemHandle
            | CallKind::MemRelease
            | CallKind::MemUnmap
            | CallKind::MemAddressFree
    )
}

/// Whether `text` names the injected failure: the simulator's detail, the code's name, or
/// (for out of memory, which managers restate with sizes) the words.
fn names_fault(text: &str, code: CudaCode) -> bool {
    text.contains("injected")
        || text.contains(code.name())
        || (code == CudaCode::OUT_OF_MEMORY && text.to_lowercase().contains("out of memory"))
}

/// How a faulted run ended, when it passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A typed error naming the failure reached the caller.
    Surfaced,
    /// Every operation did what it did in the clean run (a retry, a fallback, or a call
    /// whose failure does not matter, like a query).
    Recovered,
    /// A release failed and the driver kept that one object, as CUDA does; the failure was
    /// reported or nothing else was lost.
    KeptByDriver,
}

/// Checks the faulted run `f` against the clean run `clean`; `Err` says what broke.
pub fn judge(
    clean: &RunOutcome,
    f: &RunOutcome,
    k: u64,
    code: CudaCode,
) -> Result<Verdict, String> {
    if let Some(p) = &f.panic {
        return Err(format!("panicked: {p}"));
    }
    let idx = usize::try_from(k - 1).unwrap_or(usize::MAX);
    let Some(call) = f.trace.get(idx) else {
        return Err(format!(
            "the run made fewer than {k} calls: the sweep is not deterministic"
        ));
    };
    if call.result != Err(code) || clean.trace.get(idx).map(|e| e.call) != Some(call.call) {
        return Err(format!(
            "call {k} is {} with {:?}, not the swept call failing with {code}: the sweep is not \
             deterministic",
            call.call.name(),
            call.result
        ));
    }
    if let Some(c) = f.corrupted.first() {
        return Err(format!("{c} (after {} failed)", call.call.name()));
    }
    if let Some(v) = f.report.violations.first() {
        return Err(format!("the simulator saw a violation: {v}"));
    }
    let named = |o: &RunOutcome| o.errors.iter().filter(|e| names_fault(e, code)).count();
    let surfaced = named(f) > named(clean);
    if f.errors.len() > clean.errors.len() && !surfaced {
        let new = f.errors.iter().find(|e| !clean.errors.contains(e));
        return Err(format!(
            "an operation failed after {} failed with {code}, but its error does not say so: {}",
            call.call.name(),
            new.map_or("?", String::as_str)
        ));
    }
    if !f.report.nothing_held() {
        // The harness's own buffers (a pageable buffer under a pin that could not be undone)
        // are held because of that one object, not beside it.
        let harness = f
            .report
            .leaks
            .iter()
            .filter(|l| l.caller == HARNESS)
            .count() as u64;
        let held = held_count(&f.report).saturating_sub(harness);
        let only_that = is_release(call.call)
            && held == 1
            && f.report
                .leaks
                .iter()
                .all(|l| l.addr == call.args[0] || l.caller == HARNESS);
        if !only_that {
            return Err(format!(
                "after {} failed with {code} and teardown, the simulator holds:\n{}",
                call.call.name(),
                f.report
            ));
        }
        return Ok(Verdict::KeptByDriver);
    }
    Ok(if surfaced {
        Verdict::Surfaced
    } else {
        Verdict::Recovered
    })
}

fn held_count(r: &SimReport) -> u64 {
    [
        r.device_memory,
        r.managed_memory,
        r.pinned_memory,
        r.registrations,
        r.pageable_memory,
        r.open_ipc_handles,
        r.streams,
        r.events,
        r.pools,
        r.reservations,
        r.mappings,
        r.physical_memory,
    ]
    .iter()
    .map(|o| o.count)
    .sum()
}
