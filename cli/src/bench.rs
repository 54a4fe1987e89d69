//! `emm bench`: the standard workloads (`emm_core::workloads`) against named resources, on the
//! simulated GPU or the real one, as a table or one JSON object per (resource, workload).

use std::sync::Arc;

use emm_bench::harness::{self, BenchConfig, BenchResult};
use emm_core::mr::named::{self, NAMED_RESOURCES};
use emm_core::workloads;
use emm_core::Driver;
use emm_sim::{SimConfig, SimDriver, GIB};

use super::args::{BenchArgs, Streams};
use super::progress::Bar;
use super::{EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};

/// Operations per thread in a timed round of `--threads`, unless `--round-ops` says.
pub(crate) const THREADS_ROUND_OPS: usize = 1_000_000;
/// Operations per thread in a timed round of `--report`'s many threads, unless `--round-ops`
/// says: 90 cells of up to 16 threads, five rounds each, at a million a round ran past 570 s
/// on a 16-core host; at this size the whole report runs in minutes on two cores.
pub(crate) const REPORT_ROUND_OPS: usize = 20_000;

/// The parsed command line.
#[derive(Clone)]
pub(crate) struct Plan {
    pub(crate) backend: String,
    pub(crate) resources: Vec<String>,
    pub(crate) resources_given: bool,
    pub(crate) workloads: Vec<workloads::Workload>,
    pub(crate) passes: usize,
    pub(crate) threads: Option<Vec<usize>>,
    pub(crate) shared: Vec<bool>,
    pub(crate) devices: Option<Vec<u32>>,
    pub(crate) report: Option<std::path::PathBuf>,
    pub(crate) peers: Vec<std::path::PathBuf>,
    pub(crate) round_ops: usize,
    /// `--budget`: the report's time budget for starting many-threads cells (`None`: none).
    pub(crate) budget: Option<std::time::Duration>,
    /// `--threads-resource`: the report's many-threads resources, when given.
    pub(crate) threads_resources: Option<Vec<String>>,
    pub(crate) json: bool,
    /// `--quiet`: no progress, no notes.
    pub(crate) quiet: bool,
}

/// The plan of the command line `a`; `quiet` shows no progress.
pub(crate) fn parse(a: BenchArgs, quiet: bool) -> Plan {
    let resources_given = a.resource.is_some();
    let round_ops = a.round_ops.unwrap_or(if a.report.is_some() {
        REPORT_ROUND_OPS
    } else {
        THREADS_ROUND_OPS
    });
    let all = || NAMED_RESOURCES.iter().map(|(n, _)| n.to_string()).collect();
    let resources = a.resource.unwrap_or_else(all);
    let names = a
        .workload
        .unwrap_or_else(|| workloads::NAMES.map(String::from).to_vec());
    // clap took only W1, W2 and W3 (any case).
    let workloads = names.iter().filter_map(|n| workloads::by_name(n)).collect();
    let streams = a
        .streams
        .unwrap_or_else(|| vec![Streams::Own, Streams::Shared]);
    Plan {
        backend: a.backend.name().to_string(),
        resources,
        resources_given,
        workloads,
        passes: a.passes.max(1),
        threads: a.threads,
        shared: streams.iter().map(|s| *s == Streams::Shared).collect(),
        devices: a.devices,
        report: a.report,
        peers: a.peers,
        round_ops,
        budget: (a.budget > 0).then(|| std::time::Duration::from_secs(a.budget)),
        threads_resources: a.threads_resource,
        json: a.json,
        quiet,
    }
}

/// The driver of one measurement: a fresh simulated GPU, or the one real GPU.
pub(crate) fn make_driver(cuda: &Option<Arc<dyn Driver>>) -> Result<Arc<dyn Driver>, String> {
    match cuda {
        Some(d) => Ok(Arc::clone(d)),
        None => SimDriver::new(
            SimConfig::new(1)
                .memory_per_device(80 * GIB)
                .track_contents(false)
                .record_trace(false),
        )
        .map(|d| Arc::new(d) as Arc<dyn Driver>),
    }
}

/// The device's name, for tables and titles.
pub fn device_name(driver: &dyn Driver) -> String {
    driver
        .current_context()
        .and_then(|c| driver.context_device(c))
        .and_then(|d| driver.device_properties(d))
        .map(|p| p.name)
        .unwrap_or_default()
}

/// One thread, every resource and workload: prints each result; returns them and whether one
/// failed.
pub fn single_results(
    backend: &str,
    resources: &[String],
    wl: &[workloads::Workload],
    passes: usize,
    cuda: &Option<Arc<dyn Driver>>,
    json: bool,
    bar: &Bar,
) -> Result<(Vec<BenchResult>, bool), String> {
    let config = BenchConfig {
        timed_passes: passes,
        ..BenchConfig::default()
    };
    if !json {
        let virt = if cuda.is_none() {
            format!(" {:>14}", "virtual ns/op")
        } else {
            String::new()
        };
        bar.out(|| {
            println!(
                "{:<10} {:<4} {:>9} {:>11} {:>14}{virt}",
                "resource", "wl", "ops", "ns/op", "held/live"
            )
        });
    }
    let mut failed = false;
    let mut out = Vec::new();
    for r in resources {
        for w in wl {
            bar.message(format!("{r} {}", w.name));
            // A fresh simulated GPU per run; the real one is shared (and must be idle).
            let driver = make_driver(cuda)?;
            let device = device_name(&*driver);
            match harness::run_named(&driver, r, w, &config) {
                Ok(res) => {
                    let virtual_ns = if cuda.is_none() {
                        virtual_ns_per_op(r, w)
                    } else {
                        None
                    };
                    bar.out(|| print_result(&res, backend, &device, virtual_ns, json));
                    out.push(res);
                }
                Err(e) => {
                    failed = true;
                    bar.error(&format!("emm bench: {r} on {}: {e}", w.name));
                }
            }
            bar.step(format!("{r} {}", w.name));
        }
    }
    Ok((out, failed))
}

pub(crate) fn single(plan: &Plan, cuda: &Option<Arc<dyn Driver>>) -> i32 {
    let cells = plan.resources.len() * plan.workloads.len();
    let bar = Bar::new(cells as u64, "runs", plan.quiet);
    match single_results(
        &plan.backend,
        &plan.resources,
        &plan.workloads,
        plan.passes,
        cuda,
        plan.json,
        &bar,
    ) {
        Ok((_, false)) => EXIT_PASS,
        Ok((_, true)) => EXIT_FAIL,
        Err(e) => {
            eprintln!("emm bench: {e}");
            EXIT_CANNOT_RUN
        }
    }
}

/// The simulator's prediction for a GPU: virtual nanoseconds per operation of one warm pass
/// (the cost model calibrated on an H100), with a final synchronize as the peers time it.
fn virtual_ns_per_op(resource: &str, w: &workloads::Workload) -> Option<f64> {
    let sim = SimDriver::new(
        SimConfig::new(1)
            .memory_per_device(80 * GIB)
            .track_contents(false)
            .record_trace(false),
    )
    .ok()?;
    let driver: Arc<dyn Driver> = Arc::new(sim.clone());
    let r = named::build(resource, driver).ok()?;
    let stream = emm_core::StreamId::DEFAULT;
    harness::replay_once(&*r, w, stream, || Ok(())).ok()?;
    let t0 = sim.now_ns();
    harness::replay_once(&*r, w, stream, || Ok(())).ok()?;
    sim.context_synchronize().ok()?;
    Some((sim.now_ns() - t0) as f64 / w.ops.len().max(1) as f64)
}

fn print_result(r: &BenchResult, backend: &str, device: &str, virtual_ns: Option<f64>, json: bool) {
    if json {
        let mut v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("backend".into(), backend.into());
            o.insert("device".into(), device.into());
            if let Some(ns) = virtual_ns {
                o.insert("virtual_ns_per_op".into(), ns.into());
            }
        }
        println!("{v}");
    } else {
        let virt = virtual_ns.map_or(String::new(), |ns| format!(" {ns:>14.0}"));
        println!(
            "{:<10} {:<4} {:>9} {:>11.1} {:>14}{virt}",
            r.resource,
            r.workload,
            r.ops,
            r.ns_per_op,
            r.held_cell()
        );
    }
}
