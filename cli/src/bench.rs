//! `emm bench`: the standard workloads (`shared/workloads.md`) against named resources, on the
//! simulated GPU or the real one, as a table or one JSON object per (resource, workload).

use std::sync::Arc;

use emm_bench::harness::{self, BenchConfig, BenchResult};
use emm_core::mr::named::{self, NAMED_RESOURCES};
use emm_core::workloads;
use emm_core::Driver;
use emm_sim::{SimConfig, SimDriver, GIB};

use super::{Args, Command, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};

/// `emm bench`.
pub const COMMAND: Command = Command {
    name: "bench",
    summary: "time the standard workloads W1-W3 against named resources (emm bench --json)",
    usage: "usage: emm bench [flags]

Replays the standard workloads against each resource the peers' way: one stream, one
untimed warm-up pass, the median of the timed passes, ns per operation; and memory held
from the device at peak over peak live bytes.

flags:
  --backend NAME     sim (the default: 80 GiB, contents tracking off) or cuda (this GPU)
  --resource LIST    comma-separated names (default: all of pool, pool-vmm, sharded,
                     arena, binning, async, managed, cuda)
  --workload LIST    comma-separated W1, W2, W3 (default: all)
  --passes N         timed passes (default 3)
  --threads LIST     many threads instead: each of LIST (e.g. 1,2,4,8,16) threads replays
                     its own copy of each workload at once; ops/s and held / peak live
  --streams LIST     with --threads: own (a stream per thread), shared (the default
                     stream), or both (the default)
  --round-ops N      with --threads: operations per thread in a timed round, at least
                     (default 1000000; each thread replays its list to reach it)
  --devices LIST     instead, on a simulated node of each of LIST devices (e.g. 1,2,4,8,16)
                     with every pair peer-enabled: virtual ns per op of one pass, where each
                     cuMemAlloc pays peer registration
  --report DIR       everything into DIR: one thread, many threads (--threads, default
                     1,2,4,8,16; resources pool, sharded, arena), memory held against
                     time (W1), cost against free holes, peer registration (sim only):
                     results.jsonl, report.md and SVG charts
  --threads-resource LIST
                     with --report: the many-threads section's resources (default pool,
                     sharded, arena; the shared pool is slow by 16 threads, so name fewer
                     where a run must fit a time limit)
  --peers FILES      comma-separated outputs of the peers' harness (RESULT and THREADS
                     lines) to put beside emm's figures in the report
  --json             one JSON object per line: resource, workload, ops, ns_per_op,
                     peak_held_bytes, peak_live_bytes, backend, device
",
    run,
};

fn list(v: Option<String>, all: &[&str]) -> Vec<String> {
    match v {
        Some(s) => s
            .split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect(),
        None => all.iter().map(|s| s.to_string()).collect(),
    }
}

fn numbers<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<Option<Vec<T>>, String> {
    v.map(|s| {
        s.split(',')
            .map(|x| {
                x.trim()
                    .parse::<T>()
                    .map_err(|_| format!("{flag}: {x:?} is not a number"))
            })
            .collect()
    })
    .transpose()
}

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
    pub(crate) peers: Vec<String>,
    pub(crate) round_ops: usize,
    /// `--threads-resource`: the report's many-threads resources, when given.
    pub(crate) threads_resources: Option<Vec<String>>,
    pub(crate) json: bool,
}

pub(crate) fn parse(mut a: Args) -> Result<Plan, String> {
    let backend = a.value("--backend")?.unwrap_or_else(|| "sim".into());
    let given = a.value("--resource")?;
    let resources_given = given.is_some();
    let resources = list(
        given,
        &NAMED_RESOURCES.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
    );
    let names = list(a.value("--workload")?, &workloads::NAMES);
    let passes = a.number::<usize>("--passes")?.unwrap_or(3).max(1);
    let threads = numbers::<usize>("--threads", a.value("--threads")?)?;
    let streams = list(a.value("--streams")?, &["own", "shared"]);
    let devices = numbers::<u32>("--devices", a.value("--devices")?)?;
    let report = a.value("--report")?.map(std::path::PathBuf::from);
    let peers = list(a.value("--peers")?, &[]);
    let round_ops = a.number::<usize>("--round-ops")?.unwrap_or(1_000_000);
    let threads_resources = a.value("--threads-resource")?.map(|v| list(Some(v), &[]));
    let json = a.flag("--json");
    a.finish()?;
    let mut shared = Vec::new();
    for s in &streams {
        match s.as_str() {
            "own" => shared.push(false),
            "shared" => shared.push(true),
            other => return Err(format!("--streams: {other:?} is neither own nor shared")),
        }
    }
    let mut wl = Vec::new();
    for n in &names {
        wl.push(
            workloads::by_name(n).ok_or_else(|| format!("no workload {n:?}; known: W1, W2, W3"))?,
        );
    }
    if let Some(d) = &devices {
        if let Some(bad) = d.iter().find(|&&n| !(1..=16).contains(&n)) {
            return Err(format!("--devices: {bad} is outside 1 to 16"));
        }
    }
    Ok(Plan {
        backend,
        resources,
        resources_given,
        workloads: wl,
        passes,
        threads,
        shared,
        devices,
        report,
        peers,
        round_ops,
        threads_resources,
        json,
    })
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

fn run(a: Args) -> i32 {
    let plan = match parse(a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("emm bench: {e}\n\n{}", COMMAND.usage);
            return EXIT_CANNOT_RUN;
        }
    };
    let cuda = match plan.backend.as_str() {
        "sim" => None,
        "cuda" => match emm_cuda::CudaDriver::new() {
            Ok(d) => Some(Arc::new(d) as Arc<dyn Driver>),
            Err(e) => {
                eprintln!("emm bench: {e}");
                return EXIT_CANNOT_RUN;
            }
        },
        other => {
            eprintln!("emm bench: no backend {other:?}; use sim or cuda");
            return EXIT_CANNOT_RUN;
        }
    };
    if let Some(dir) = plan.report.clone() {
        return super::bench_run::report(&plan, &cuda, &dir);
    }
    if let Some(devices) = &plan.devices {
        return super::bench_run::devices(&plan, devices);
    }
    if let Some(threads) = &plan.threads {
        return super::bench_run::threads(&plan, &cuda, threads);
    }
    single(&plan, &cuda)
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
        println!(
            "{:<10} {:<4} {:>9} {:>11} {:>14}{virt}",
            "resource", "wl", "ops", "ns/op", "held/live"
        );
    }
    let mut failed = false;
    let mut out = Vec::new();
    for r in resources {
        for w in wl {
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
                    print_result(&res, backend, &device, virtual_ns, json);
                    out.push(res);
                }
                Err(e) => {
                    failed = true;
                    eprintln!("emm bench: {r} on {}: {e}", w.name);
                }
            }
        }
    }
    Ok((out, failed))
}

fn single(plan: &Plan, cuda: &Option<Arc<dyn Driver>>) -> i32 {
    match single_results(
        &plan.backend,
        &plan.resources,
        &plan.workloads,
        plan.passes,
        cuda,
        plan.json,
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
