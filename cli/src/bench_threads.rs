//! `emm bench --threads LIST`: the standard workloads replayed by 1, 2, 4, … threads at once
//! against named resources, each thread on its own stream or all on the default stream
//! (`emm_bench::threads`).

use std::sync::Arc;

use emm_bench::threads::{self, ThreadsConfig, ThreadsResult};
use emm_core::driver::counting::CallCounts;
use emm_core::mr::named;
use emm_core::workloads::Workload;
use emm_core::Driver;

use super::progress::Bar;

/// What one threads run needs besides the driver.
#[derive(Debug, Clone)]
pub struct ThreadsPlan {
    /// Named resources.
    pub resources: Vec<String>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Stream modes: `false` own stream per thread, `true` the shared default stream.
    pub shared: Vec<bool>,
    /// Timed rounds.
    pub passes: usize,
    /// Operations per thread in a timed round, at least (the list is replayed to reach it).
    pub round_ops: usize,
    /// No cell starts after this instant: those left are skipped (the report's budget).
    pub deadline: Option<std::time::Instant>,
}

/// What [`run`] did: the results, whether a cell failed, and the cells skipped for the
/// deadline.
#[derive(Debug, Default)]
pub struct ThreadsRun {
    /// One result a cell run.
    pub results: Vec<ThreadsResult>,
    /// Whether a cell failed.
    pub failed: bool,
    /// The cells not started because the deadline had passed, as `resource W by n threads
    /// (stream)`.
    pub skipped: Vec<String>,
}

impl ThreadsPlan {
    /// The cells of the table: each workload, resource, stream mode and thread count.
    pub fn cells(&self) -> usize {
        self.workloads.len() * self.resources.len() * self.shared.len() * self.threads.len()
    }
}

/// One line of the threads table (or a JSON line), or a note that a cell was skipped.
pub fn print(r: &ThreadsResult, backend: &str, json: bool) {
    if json {
        let mut v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("kind".into(), "threads".into());
            o.insert("backend".into(), backend.into());
        }
        println!("{v}");
    } else {
        let per_kop = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        let calls = |class: fn(&CallCounts) -> u64| {
            per_kop(r.driver_calls.as_ref().map(|c| r.per_kop(class(c))))
        };
        println!(
            "{:<10} {:<4} {:>7} {:>7} {:>14.0} {:>10.3} {:>8} {:>8} {:>8} {:>10}",
            r.resource,
            r.workload,
            r.threads,
            if r.shared_stream { "shared" } else { "own" },
            r.ops_per_s,
            r.held_over_live(),
            calls(|c| c.memory),
            calls(|c| c.ordering),
            calls(|c| c.other),
            per_kop(r.chunk_moves_per_kop())
        );
    }
    if !r.within_held_bound() {
        eprintln!(
            "emm bench: {} {} by {} threads ({} streams) held {:.3} × peak live, over the bound of {}",
            r.resource,
            r.workload,
            r.threads,
            if r.shared_stream { "shared" } else { "own" },
            r.held_over_live(),
            threads::HELD_BOUND
        );
    }
}

/// The table's header: the last four columns are the resource's driver calls by class
/// (memory, ordering, other) and chunk moves (`DeviceMemoryResource::chunk_moves`) per 1 000
/// operations of the timed rounds.
pub fn header() {
    println!(
        "{:<10} {:<4} {:>7} {:>7} {:>14} {:>10} {:>8} {:>8} {:>8} {:>10}",
        "resource",
        "wl",
        "threads",
        "stream",
        "ops/s",
        "held/live",
        "mem/kop",
        "ord/kop",
        "oth/kop",
        "moves/kop"
    );
}

/// Runs the plan; `driver` makes the driver of each cell (a fresh simulated GPU, or the one
/// real GPU). Cells whose peak live memory would pass 60 % of the device are skipped with a
/// note on stderr (W2 by 16 threads needs 72 GB live). Returns the results and whether a cell
/// failed, and the cells skipped once the plan's deadline passed. `bar` steps once a cell.
pub fn run(
    plan: &ThreadsPlan,
    driver: &dyn Fn() -> Result<Arc<dyn Driver>, String>,
    bar: &Bar,
    mut each: impl FnMut(&ThreadsResult),
) -> Result<ThreadsRun, String> {
    let mut out = Vec::new();
    let mut failed = false;
    let mut skipped = Vec::new();
    for w in &plan.workloads {
        let peak = w.summary().peak_live_bytes;
        for r in &plan.resources {
            for &shared in &plan.shared {
                for &n in &plan.threads {
                    let cell = format!("{r} {} by {n} threads", w.name);
                    if plan
                        .deadline
                        .is_some_and(|d| std::time::Instant::now() >= d)
                    {
                        let stream = if shared { "shared" } else { "own" };
                        skipped.push(format!("{cell} ({stream} streams)"));
                        bar.step(cell);
                        continue;
                    }
                    bar.message(&cell);
                    let d = driver()?;
                    let total = d.mem_get_info().map(|m| m.total).unwrap_or(u64::MAX);
                    if (peak as f64) * n as f64 > 0.6 * total as f64 {
                        bar.error(&format!(
                            "emm bench: {r} {} by {n} threads skipped: {n} × {} MB live passes 60 % of the device",
                            w.name,
                            peak >> 20
                        ));
                        bar.step(cell);
                        continue;
                    }
                    let config = ThreadsConfig {
                        threads: n,
                        shared_stream: shared,
                        timed_passes: plan.passes,
                        measure_held: true,
                        min_ops_per_round: plan.round_ops,
                        // As the peers' harness: every 16th allocation on W3.
                        held_poll_every: if w.name == "W3" { 16 } else { 1 },
                    };
                    // Built over a counting driver: its calls per 1 000 operations are what a
                    // GPU's slow paths cost, which the simulated GPU's clock does not show.
                    let build = |counting| named::build(r, counting);
                    match threads::run_counting(Arc::clone(&d), build, r, w, &config) {
                        Ok(res) => {
                            bar.out(|| each(&res));
                            out.push(res);
                        }
                        Err(e) => {
                            failed = true;
                            bar.error(&format!("emm bench: {r} on {} by {n} threads: {e}", w.name));
                        }
                    }
                    bar.step(cell);
                }
            }
        }
    }
    if !skipped.is_empty() {
        bar.error(&format!(
            "emm bench: the time budget ran out: {} many-threads cells skipped",
            skipped.len()
        ));
    }
    Ok(ThreadsRun {
        results: out,
        failed,
        skipped,
    })
}
