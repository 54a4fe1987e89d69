//! Concurrency stress: 8–32 threads, each on its own stream, doing mixed allocations, frees
//! (plain and stream-ordered), views, IPC exports and `defer_cleanup` scopes against one
//! manager on the simulated GPU, whose race detection is always on. A run passes with zero
//! overlaps between live allocations, zero races or other violations the simulator saw, zero
//! allocations whose contents changed, zero errors, and nothing held after teardown.
//!
//! # Determinism
//!
//! What each thread does is fixed by the seed alone ([`ops::thread_ops`]: one SplitMix64 per
//! thread); the simulated GPU is seeded with it too. What real threads add is the order in
//! which their operations reach the manager: each operation takes a ticket from one atomic
//! counter as it starts, and the run keeps the order of the tickets ([`StressReport::order`]).
//! [`replay`] runs the same op lists on one thread in exactly that order, on a fresh machine
//! of the same seed, so it is deterministic, call for call. It reproduces every failure that
//! depends on the order of operations; one that needs two operations to overlap *inside* the
//! manager replays as a pass, and is reproduced by running the seed threaded again (each
//! report names its seed).
//!
//! - [`ops`]: [`ThreadOp`] and the per-thread op lists.
//! - `worker`: one thread's state and the execution of one op, shared by both modes.

pub mod ops;
mod worker;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use emm_core::attribution::CallerScope;
use emm_core::contract::{Context, ManagerFactory};
use emm_core::{DeviceId, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

pub use ops::{thread_ops, ThreadOp};
use worker::{Shared, Worker};

use crate::sut::HARNESS;

/// One stress run: which manager, how many threads, how many ops each, which seed.
#[derive(Clone)]
pub struct StressConfig {
    /// The manager's name in reports.
    pub name: String,
    /// Makes the manager.
    pub factory: Arc<dyn ManagerFactory>,
    /// Threads, each on its own stream (8 to 32 in the suite).
    pub threads: usize,
    /// Ops per thread (before the final frees).
    pub ops: usize,
    /// The seed of the op lists and of the simulated GPU.
    pub seed: u64,
}

/// What a stress run saw.
#[derive(Debug, Clone, Default)]
pub struct StressReport {
    /// The manager.
    pub name: String,
    /// The seed.
    pub seed: u64,
    /// Threads.
    pub threads: usize,
    /// Operations run over all threads.
    pub ops_run: usize,
    /// Live allocations that overlapped another.
    pub overlaps: Vec<String>,
    /// Allocations whose contents changed under their owner.
    pub corrupted: Vec<String>,
    /// Errors returned by the manager.
    pub errors: Vec<String>,
    /// Races and other violations the simulator saw.
    pub violations: Vec<String>,
    /// What the simulator still held after teardown, if anything.
    pub leaked: Option<String>,
    /// A panic, if one happened (in a thread or at teardown).
    pub panic: Option<String>,
    /// The thread of each operation, in the order they started: [`replay`]'s input.
    pub order: Vec<u16>,
    /// The simulator's hash of every driver call, in order (equal for two equal runs).
    pub trace_hash: u64,
}

impl StressReport {
    /// Whether the run saw nothing wrong.
    pub fn passed(&self) -> bool {
        self.overlaps.is_empty()
            && self.corrupted.is_empty()
            && self.errors.is_empty()
            && self.violations.is_empty()
            && self.leaked.is_none()
            && self.panic.is_none()
    }
}

impl fmt::Display for StressReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} threads, {} ops, seed {}: {} overlaps, {} races/violations, {} corrupted, \
             {} errors, {}",
            self.name,
            self.threads,
            self.ops_run,
            self.seed,
            self.overlaps.len(),
            self.violations.len(),
            self.corrupted.len(),
            self.errors.len(),
            if self.leaked.is_some() {
                "leaked"
            } else {
                "nothing leaked"
            }
        )?;
        let all = self
            .panic
            .iter()
            .chain(&self.overlaps)
            .chain(&self.violations);
        for x in all.chain(&self.corrupted).chain(&self.errors).take(10) {
            writeln!(f, "  - {x}")?;
        }
        if let Some(l) = &self.leaked {
            writeln!(f, "{l}")?;
        }
        Ok(())
    }
}

/// A fresh machine of `seed` with room for every thread's live set.
fn machine(seed: u64) -> Result<Arc<SimDriver>, String> {
    Ok(Arc::new(SimDriver::new(
        SimConfig::new(seed).memory_per_device(16 * GIB),
    )?))
}

fn streams(sim: &SimDriver, n: usize) -> Result<Vec<StreamId>, String> {
    let _h = CallerScope::enter(HARNESS);
    (0..n)
        .map(|_| sim.stream_create(true).map_err(|e| e.to_string()))
        .collect()
}

fn finish(
    mut report: StressReport,
    ctx: Context<SimDriver>,
    sim: &SimDriver,
    streams: &[StreamId],
) -> StressReport {
    if let Err(e) = ctx.reset() {
        report.errors.push(format!("reset at teardown: {e}"));
    }
    drop(ctx);
    let _h = CallerScope::enter(HARNESS);
    let _ = sim.context_synchronize();
    for &s in streams {
        let _ = sim.stream_destroy(s);
    }
    report.trace_hash = sim.trace_hash();
    let r = sim.report();
    report.violations = r.violations.iter().map(ToString::to_string).collect();
    if !r.nothing_held() {
        report.leaked = Some(r.to_string());
    }
    report
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".to_string())
}

type Setup = (Arc<SimDriver>, Vec<StreamId>, Context<SimDriver>, Shared);

/// The machine, one stream per thread, the context with the manager under test, and the
/// state the threads share: what [`run`] and [`replay`] both start from.
fn setup(config: &StressConfig) -> Result<Setup, String> {
    let sim = machine(config.seed)?;
    let streams = streams(&sim, config.threads)?;
    let ctx = Context::with_factory(Arc::clone(&sim), DeviceId(0), &*config.factory)
        .map_err(|e| e.to_string())?;
    let shared = Shared {
        live: Mutex::new(BTreeMap::new()),
        ticket: AtomicU64::new(0),
        stream_ordered: ctx.capabilities().stream_ordered,
        ipc: ctx.capabilities().ipc,
    };
    Ok((sim, streams, ctx, shared))
}

/// Runs `config` with real threads.
///
/// # Errors
///
/// The machine, its streams or the context cannot be made.
pub fn run(config: &StressConfig) -> Result<StressReport, String> {
    let (sim, streams, ctx, shared) = setup(config)?;
    let mut report = StressReport {
        name: config.name.clone(),
        seed: config.seed,
        threads: config.threads,
        ..StressReport::default()
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..config.threads)
            .map(|t| {
                let (ctx, sim, shared) = (&ctx, &*sim, &shared);
                let list = thread_ops(config.seed, t, config.ops);
                let stream = streams[t];
                s.spawn(move || {
                    let mut w = Worker::new(t, stream);
                    let mut tickets = Vec::with_capacity(list.len());
                    for op in &list {
                        tickets.push(shared.ticket.fetch_add(1, Ordering::SeqCst));
                        w.step(ctx, sim, shared, *op);
                    }
                    w.end();
                    (w, tickets)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut order: Vec<(u64, u16)> = Vec::new();
    for (t, r) in results.into_iter().enumerate() {
        match r {
            Ok((w, tickets)) => {
                report.ops_run += tickets.len();
                let t = u16::try_from(t).unwrap_or(u16::MAX);
                order.extend(tickets.into_iter().map(|k| (k, t)));
                w.into_report(&mut report);
            }
            Err(p) => report.panic = Some(format!("thread {t} panicked: {}", panic_text(p))),
        }
    }
    order.sort_unstable();
    report.order = order.into_iter().map(|(_, t)| t).collect();
    Ok(finish(report, ctx, &sim, &streams))
}

/// Runs `config`'s op lists on this thread in `order` (the thread of each op, as
/// [`StressReport::order`] recorded it): deterministic, call for call.
///
/// # Errors
///
/// The machine, its streams or the context cannot be made; `order` names a thread the
/// config does not have.
pub fn replay(config: &StressConfig, order: &[u16]) -> Result<StressReport, String> {
    let (sim, streams, ctx, shared) = setup(config)?;
    let lists: Vec<Vec<ThreadOp>> = (0..config.threads)
        .map(|t| thread_ops(config.seed, t, config.ops))
        .collect();
    let mut workers: Vec<Worker> = (0..config.threads)
        .map(|t| Worker::new(t, streams[t]))
        .collect();
    let mut next = vec![0usize; config.threads];
    let mut report = StressReport {
        name: config.name.clone(),
        seed: config.seed,
        threads: config.threads,
        order: order.to_vec(),
        ..StressReport::default()
    };
    for &t in order {
        let t = usize::from(t);
        let op = lists.get(t).and_then(|l| l.get(next[t])).ok_or_else(|| {
            format!(
                "the order names op {} of thread {t}, which has none",
                next[t]
            )
        })?;
        next[t] += 1;
        workers[t].step(&ctx, &sim, &shared, *op);
        report.ops_run += 1;
    }
    for mut w in workers {
        w.end();
        w.into_report(&mut report);
    }
    Ok(finish(report, ctx, &sim, &streams))
}
