//! The soak: random workloads for a set time against long-lived managers on one simulated
//! GPU each, with periodic fault injection and plugin quarantines, checking that nothing
//! creeps: memory the managers hold after a `reset`, bytes still live after a round, the
//! simulator's leak counters, and this process's resident memory (`emm soak`, `cargo xtask
//! soak --minutes N`).
//!
//! Each round picks a manager (round-robin) and a workload from a seeded SplitMix64: a prefix
//! of W1, W2 or W3 of random length, or a short concurrency stress on 8 threads. Every
//! `fault_every`-th round runs with random failures of the driver's acquiring calls (out of
//! memory or a failed launch; releases never fail, so nothing is owed to the driver after);
//! every `quarantine_every`-th round loads a hostile plugin beside the managers, lets it break
//! a rule until it is quarantined, and checks that its good allocations survive and its
//! memory comes back.
//!
//! - `quarantine`: the hostile plugin and its round.
//! - `summary`: [`SoakSummary`] and its printed form.

use std::sync::Arc;
use std::time::{Duration, Instant};

use emm_core::attribution::CallerScope;
use emm_core::contract::{Context, MemoryPointer};
use emm_core::workloads::{self, Op as WorkOp, SplitMix64};
use emm_core::{CudaCode, DeviceId, Driver};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, GIB};

mod quarantine;
mod summary;

use quarantine::{hostile, quarantine_round};
pub use summary::SoakSummary;

use crate::stress::{self, StressConfig};
use crate::sut::HARNESS;
use crate::sweep::Subject;

/// What to soak.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// The managers (each gets one long-lived machine and context).
    pub subjects: Vec<Subject>,
    /// How long to run.
    pub duration: Duration,
    /// The seed of the round choices.
    pub seed: u64,
    /// Every n-th round runs with random driver failures.
    pub fault_every: u64,
    /// Every n-th round quarantines a hostile plugin.
    pub quarantine_every: u64,
    /// The most ops of a workload round (its length is drawn from 100 to this).
    pub max_ops: u64,
}

/// One manager's machine and context, kept for the whole soak.
struct Long {
    subject: Subject,
    sim: Arc<SimDriver>,
    ctx: Context<SimDriver>,
    /// Device memory in use after the first round's reset: the level it must keep.
    baseline: Option<u64>,
    /// The most device memory seen in use after a reset.
    max_after_reset: u64,
    /// Rounds run on this machine.
    rounds: u64,
}

/// Rounds a machine serves before it is torn down (and checked to hold nothing) and replaced:
/// the simulator never reuses an address, so a manager that allocates from the driver on
/// every request (`default`) would use up its 16 TiB range after some thousand rounds.
const ROUNDS_PER_MACHINE: u64 = 200;

/// A fresh machine and context for `subject`.
fn machine(subject: &Subject, seed: u64) -> Result<(Arc<SimDriver>, Context<SimDriver>), String> {
    let sim = Arc::new(SimDriver::new(
        SimConfig::new(seed)
            .memory_per_device(8 * GIB)
            .record_trace(false),
    )?);
    let ctx = Context::with_factory(Arc::clone(&sim), DeviceId(0), &*subject.factory)
        .map_err(|e| format!("{}: {e}", subject.name))?;
    Ok((sim, ctx))
}

/// Tears `ctx` down; what the machine still holds after is a failure.
fn retire(name: &str, sim: &SimDriver, ctx: Context<SimDriver>, failures: &mut Vec<String>) {
    drop(ctx);
    let r = sim.report();
    if !r.is_clean() {
        failures.push(format!("{name}: after teardown:\n{r}"));
    }
}

/// This process's resident memory in KiB (Linux; 0 elsewhere).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4)
}

/// The acquiring calls a fault round fails at random.
const ACQUIRING: [CallKind; 6] = [
    CallKind::MemAlloc,
    CallKind::MemAllocAsync,
    CallKind::MemAllocFromPoolAsync,
    CallKind::MemAllocManaged,
    CallKind::HostAlloc,
    CallKind::MemCreate,
];

/// Runs one workload prefix on `l`; returns (ops, errors).
fn workload_round(
    l: &Long,
    rng: &mut SplitMix64,
    max_ops: u64,
    failures: &mut Vec<String>,
) -> (u64, u64, Option<String>) {
    let w = match rng.below(3) {
        0 => workloads::w1(),
        1 => workloads::w2(),
        _ => workloads::w3(),
    };
    let n = usize::try_from(rng.range(100.min(max_ops), max_ops.max(1))).unwrap_or(100);
    let mut live: Vec<Option<(MemoryPointer, u8)>> = Vec::new();
    let (mut ops, mut errors) = (0u64, 0u64);
    let mut first = None;
    let mut tag = 0u8;
    let check = |p: &MemoryPointer, v: u8| {
        let _h = CallerScope::enter(HARNESS);
        let mut b = [0u8];
        l.sim.memcpy_dtoh(&mut b, p.device_ptr(), None).is_ok() && b[0] == v
    };
    let drain = w.ops.iter().take(n).copied().collect::<Vec<_>>();
    for op in drain {
        ops += 1;
        match op {
            WorkOp::Alloc(size) => {
                match l.ctx.memalloc(usize::try_from(size).unwrap_or(usize::MAX)) {
                    Ok(p) => {
                        tag = tag.wrapping_add(1).max(1);
                        let _h = CallerScope::enter(HARNESS);
                        let _ = l.sim.memcpy_htod(p.device_ptr(), &[tag], None);
                        live.push(Some((p, tag)));
                    }
                    Err(e) => {
                        errors += 1;
                        first.get_or_insert_with(|| format!("{} op {}: {e}", w.name, ops - 1));
                        live.push(None);
                    }
                }
            }
            WorkOp::Free(j) if j < live.len() => {
                if let Some((p, v)) = live.swap_remove(j) {
                    if !check(&p, v) {
                        failures.push(format!(
                            "{}: {} lost its contents",
                            l.subject.name,
                            p.device_ptr()
                        ));
                    }
                }
            }
            WorkOp::Free(_) => {}
        }
    }
    for (p, v) in live.into_iter().flatten() {
        if !check(&p, v) {
            failures.push(format!(
                "{}: {} lost its contents",
                l.subject.name,
                p.device_ptr()
            ));
        }
    }
    (ops, errors, first)
}

/// Runs the soak; `progress` hears of every 1000th round.
///
/// # Errors
///
/// A machine or a context cannot be made.
pub fn soak(
    config: &SoakConfig,
    mut progress: impl FnMut(&SoakSummary),
) -> Result<SoakSummary, String> {
    let start = Instant::now();
    let mut longs = Vec::new();
    for subject in &config.subjects {
        let (sim, ctx) = machine(subject, config.seed)?;
        longs.push(Long {
            subject: subject.clone(),
            sim,
            ctx,
            baseline: None,
            max_after_reset: 0,
            rounds: 0,
        });
    }
    if longs.is_empty() {
        return Err("nothing to soak: no managers".into());
    }
    let hostile = hostile()?;
    let mut rng = SplitMix64::new(config.seed);
    let mut sum = SoakSummary::default();
    while start.elapsed() < config.duration {
        let round = sum.rounds;
        sum.rounds += 1;
        let i = usize::try_from(round).unwrap_or(0) % longs.len();
        let faulty = config.fault_every > 0 && round % config.fault_every == config.fault_every - 1;
        let l = &mut longs[i];
        if faulty {
            sum.fault_rounds += 1;
            let code = if rng.below(2) == 0 {
                CudaCode::OUT_OF_MEMORY
            } else {
                CudaCode::LAUNCH_FAILED
            };
            l.sim.inject(Fault::Random {
                calls: ACQUIRING.to_vec(),
                per_million: 20_000,
                code,
            });
        }
        if rng.below(4) == 0 && !faulty {
            // A short stress on its own machine (threads need a fresh, race-checked one).
            let c = StressConfig {
                name: l.subject.name.clone(),
                factory: Arc::clone(&l.subject.factory),
                threads: 8,
                ops: usize::try_from(config.max_ops / 50)
                    .unwrap_or(60)
                    .clamp(10, 100),
                seed: rng.next_u64(),
            };
            match stress::run(&c) {
                Ok(r) if r.passed() => sum.ops += r.ops_run as u64,
                Ok(r) => sum.failures.push(r.to_string()),
                Err(e) => sum.failures.push(e),
            }
        } else {
            let (ops, errors, first) =
                workload_round(l, &mut rng, config.max_ops, &mut sum.failures);
            sum.ops += ops;
            if faulty {
                sum.errors_surfaced += errors;
            } else if errors > 0 {
                sum.failures.push(format!(
                    "{}: round {round}: {errors} errors without faults, the first: {}",
                    l.subject.name,
                    first.unwrap_or_default()
                ));
            }
        }
        l.sim.clear_faults();
        if let Err(e) = l.ctx.reset() {
            sum.failures.push(format!("{}: reset: {e}", l.subject.name));
        }
        let held = l.sim.device_memory_used(DeviceId(0));
        let base = *l.baseline.get_or_insert(held);
        l.max_after_reset = l.max_after_reset.max(held);
        if held > base {
            sum.failures.push(format!(
                "{}: round {round}: {held} B held after reset, {base} B after the first",
                l.subject.name
            ));
        }
        if config.quarantine_every > 0
            && round % config.quarantine_every == config.quarantine_every - 1
        {
            let sim = Arc::clone(&l.sim);
            if quarantine_round(&hostile, &sim, &mut sum.failures) {
                sum.quarantines += 1;
            }
        }
        l.rounds += 1;
        if l.rounds % ROUNDS_PER_MACHINE == 0 {
            let (sim, ctx) = machine(&l.subject, config.seed.wrapping_add(round))?;
            let old_ctx = std::mem::replace(&mut l.ctx, ctx);
            let old_sim = std::mem::replace(&mut l.sim, sim);
            retire(&l.subject.name, &old_sim, old_ctx, &mut sum.failures);
            sum.machines += 1;
        }
        if round == 0 {
            sum.rss_kib.0 = rss_kib();
        }
        if sum.rss_warm_kib == 0 && start.elapsed() >= config.duration / 4 {
            sum.rss_warm_kib = rss_kib();
        }
        if sum.rounds % 1000 == 0 {
            sum.elapsed = start.elapsed();
            progress(&sum);
        }
    }
    for l in longs {
        sum.held_after_reset.push((
            l.subject.name.clone(),
            l.baseline.unwrap_or(0),
            l.max_after_reset,
        ));
        retire(&l.subject.name, &l.sim, l.ctx, &mut sum.failures);
    }
    sum.rss_kib.1 = rss_kib();
    // Resident memory grows while caches warm (the first quarter); a leak keeps growing with
    // rounds, so the last three quarters may add at most a quarter more, plus 32 MiB.
    let warm = sum.rss_warm_kib;
    if warm > 0 && sum.rss_kib.1 > warm + warm / 4 + 32 * 1024 {
        sum.failures.push(format!(
            "resident memory grew from {warm} KiB (a quarter in) to {} KiB",
            sum.rss_kib.1
        ));
    }
    sum.elapsed = start.elapsed();
    Ok(sum)
}
