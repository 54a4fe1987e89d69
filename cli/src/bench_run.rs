//! `emm bench` from its command line: one thread ([`bench`](super::bench)), or the modes
//! beyond one thread: `--threads`, `--devices` and `--report`.

use std::path::Path;
use std::sync::Arc;

use emm_core::Driver;

use super::args::BenchArgs;
use super::bench::{device_name, make_driver, parse, single, single_results, Plan};
use super::bench_measure::{self as measure};
use super::bench_peers::parse_peers;
use super::bench_report::Collected;
use super::bench_threads::{self as threads_mode, ThreadsPlan};
use super::progress::Bar;
use super::{EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};

/// Resources the many-threads runs use unless `--resource` names others.
/// (`async` is left out: a million `cuMemAllocAsync` per thread and round take minutes on a
/// GPU; name it with `--resource` to include it.)
const THREADS_RESOURCES: [&str; 3] = ["pool", "sharded", "arena"];
/// Resources of the peer-registration runs unless `--resource` names others.
const DEVICES_RESOURCES: [&str; 4] = ["cuda", "pool", "async", "managed"];
/// Resources of the memory-against-time chart.
const TIMELINE_RESOURCES: [&str; 4] = ["pool", "pool-vmm", "sharded", "binning"];
/// Resources and counts of the holes chart.
const HOLES_RESOURCES: [&str; 4] = ["pool", "pool-vmm", "sharded", "arena"];
const HOLES: [usize; 6] = [1, 10, 100, 1_000, 10_000, 100_000];

/// Runs `emm bench`; `quiet` shows no progress and no notes.
pub fn run(a: BenchArgs, quiet: bool) -> i32 {
    let plan = parse(a, quiet);
    let cuda = match plan.backend.as_str() {
        "cuda" => match emm_cuda::CudaDriver::new() {
            Ok(d) => Some(Arc::new(d) as Arc<dyn Driver>),
            Err(e) => {
                eprintln!("emm bench: {e}");
                return EXIT_CANNOT_RUN;
            }
        },
        _ => None,
    };
    if let Some(dir) = plan.report.clone() {
        return report(&plan, &cuda, &dir);
    }
    if let Some(ids) = &plan.devices {
        return devices(&plan, ids);
    }
    if let Some(counts) = &plan.threads {
        return threads(&plan, &cuda, counts);
    }
    single(&plan, &cuda)
}

fn exit(failed: bool) -> i32 {
    if failed {
        EXIT_FAIL
    } else {
        EXIT_PASS
    }
}

/// The many-threads plan: `--resource`'s names when `named` and given, else
/// [`THREADS_RESOURCES`].
fn threads_plan(plan: &Plan, threads: &[usize], named: bool) -> ThreadsPlan {
    ThreadsPlan {
        resources: if named && plan.resources_given {
            plan.resources.clone()
        } else {
            THREADS_RESOURCES.iter().map(|s| s.to_string()).collect()
        },
        workloads: plan.workloads.clone(),
        threads: threads.to_vec(),
        shared: plan.shared.clone(),
        passes: plan.passes,
        round_ops: plan.round_ops,
        deadline: None,
    }
}

/// The report's many-threads plan: `--resource` names the report's one-thread resources, so
/// its threads run `--threads-resource`'s names when given, else [`THREADS_RESOURCES`].
fn report_threads_plan(plan: &Plan, threads: &[usize]) -> ThreadsPlan {
    let mut tp = threads_plan(plan, threads, false);
    if let Some(names) = &plan.threads_resources {
        tp.resources = names.clone();
    }
    tp
}

/// `emm bench --threads LIST`.
pub(crate) fn threads(plan: &Plan, cuda: &Option<Arc<dyn Driver>>, threads: &[usize]) -> i32 {
    if !plan.json {
        threads_mode::header();
    }
    let tp = threads_plan(plan, threads, true);
    let bar = Bar::new(tp.cells() as u64, "cells", plan.quiet);
    let each =
        |r: &emm_bench::threads::ThreadsResult| threads_mode::print(r, &plan.backend, plan.json);
    match threads_mode::run(&tp, &|| make_driver(cuda), &bar, each) {
        Ok(run) => exit(run.failed),
        Err(e) => {
            eprintln!("emm bench: {e}");
            EXIT_CANNOT_RUN
        }
    }
}

fn devices_resources(plan: &Plan) -> Vec<String> {
    if plan.resources_given {
        plan.resources.clone()
    } else {
        DEVICES_RESOURCES.iter().map(|s| s.to_string()).collect()
    }
}

/// The peer-registration cells of `devices`.
fn devices_cells(plan: &Plan, devices: &[u32]) -> usize {
    plan.workloads.len() * devices_resources(plan).len() * devices.len()
}

/// Runs the peer-registration cells, printing each; returns them and whether one failed.
fn devices_results(
    plan: &Plan,
    devices: &[u32],
    bar: &Bar,
) -> (Vec<(String, String, u32, f64)>, bool) {
    let mut out = Vec::new();
    let mut failed = false;
    for w in &plan.workloads {
        for r in devices_resources(plan) {
            for &d in devices {
                let cell = format!("{r} {} on {d} devices", w.name);
                bar.message(&cell);
                match measure::peered_ns_per_op(d, &r, w) {
                    Ok(ns) => bar.out(|| {
                        if plan.json {
                            println!(
                                "{}",
                                serde_json::json!({"kind": "devices", "resource": r,
                                    "workload": w.name, "devices": d, "virtual_ns_per_op": ns})
                            );
                        } else {
                            println!("{:<10} {:<4} {:>7} {:>16.0}", r, w.name, d, ns);
                        }
                        out.push((r.clone(), w.name.clone(), d, ns));
                    }),
                    Err(e) => {
                        failed = true;
                        bar.error(&format!(
                            "emm bench: {r} on {} with {d} devices: {e}",
                            w.name
                        ));
                    }
                }
                bar.step(cell);
            }
        }
    }
    (out, failed)
}

/// `emm bench --devices LIST` (always on the simulated GPU).
pub(crate) fn devices(plan: &Plan, devices: &[u32]) -> i32 {
    if !plan.json {
        println!(
            "{:<10} {:<4} {:>7} {:>16}",
            "resource", "wl", "devices", "virtual ns/op"
        );
    }
    let bar = Bar::new(devices_cells(plan, devices) as u64, "cells", plan.quiet);
    exit(devices_results(plan, devices, &bar).1)
}

/// `emm bench --report DIR`.
pub(crate) fn report(plan: &Plan, cuda: &Option<Arc<dyn Driver>>, dir: &Path) -> i32 {
    match collect(plan, cuda) {
        Ok((c, jsonl, failed)) => match c.write(dir, &jsonl) {
            Ok(files) => {
                eprintln!("emm bench: wrote {} in {}", files.join(", "), dir.display());
                exit(failed)
            }
            Err(e) => {
                eprintln!("emm bench: {e}");
                EXIT_CANNOT_RUN
            }
        },
        Err(e) => {
            eprintln!("emm bench: {e}");
            EXIT_CANNOT_RUN
        }
    }
}

fn collect(
    plan: &Plan,
    cuda: &Option<Arc<dyn Driver>>,
) -> Result<(Collected, String, bool), String> {
    let mut c = Collected::default();
    let mut jsonl = String::new();
    let mut line = |v: serde_json::Value| {
        jsonl.push_str(&v.to_string());
        jsonl.push('\n');
    };
    let started = std::time::Instant::now();
    let d = make_driver(cuda)?;
    c.device = format!("{} {}", plan.backend, device_name(&*d));
    let counts = plan.threads.clone().unwrap_or_else(|| vec![1, 2, 4, 8, 16]);
    let mut tp = report_threads_plan(plan, &counts);
    tp.deadline = plan.budget.map(|b| started + b);
    c.threads_plan = format!(
        "{} operations per thread in each timed round (--round-ops), {} timed rounds; {}.",
        plan.round_ops,
        plan.passes,
        match plan.budget {
            Some(b) => format!(
                "no cell starts once the report has run {} s (--budget)",
                b.as_secs()
            ),
            None => "no time budget (--budget 0)".to_string(),
        }
    );
    let w1 = emm_core::workloads::w1();
    let devices = plan.devices.clone().unwrap_or_else(|| vec![1, 2, 4, 8, 16]);
    let mut peers_plan = Plan {
        workloads: vec![w1.clone()],
        json: true,
        ..plan.clone()
    };
    peers_plan.resources_given = false;
    let cells = plan.resources.len() * plan.workloads.len()
        + tp.cells()
        + TIMELINE_RESOURCES.len()
        + HOLES_RESOURCES.len()
        + if cuda.is_none() {
            devices_cells(&peers_plan, &devices)
        } else {
            0
        };
    let bar = Bar::new(cells as u64, "cells", plan.quiet);
    let mut failed;
    bar.note("==> one thread");
    let (single, f) = single_results(
        &plan.backend,
        &plan.resources,
        &plan.workloads,
        plan.passes,
        cuda,
        false,
        &bar,
    )?;
    failed = f;
    for r in &single {
        let mut v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap_or_default();
        v["kind"] = "single".into();
        v["backend"] = plan.backend.clone().into();
        line(v);
    }
    c.single = single;
    bar.note("==> many threads");
    bar.out(threads_mode::header);
    let run = threads_mode::run(&tp, &|| make_driver(cuda), &bar, |r| {
        threads_mode::print(r, &plan.backend, false)
    })?;
    failed |= run.failed;
    let th = run.results;
    for cell in &run.skipped {
        line(serde_json::json!({"kind": "threads_skipped", "cell": cell}));
    }
    c.threads_skipped = run.skipped;
    for r in &th {
        let mut v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap_or_default();
        v["kind"] = "threads".into();
        line(v);
    }
    c.threads = th;
    bar.note("==> memory held against time (W1)");
    for r in TIMELINE_RESOURCES {
        bar.message(format!("timeline of {r}"));
        match measure::timeline(&make_driver(cuda)?, r, &w1, 100) {
            Ok(t) => {
                line(
                    serde_json::json!({"kind": "timeline", "resource": r, "workload": "W1",
                    "points": t.points}),
                );
                c.timelines.push(t);
            }
            Err(e) => {
                failed = true;
                bar.error(&format!("emm bench: timeline of {r}: {e}"));
            }
        }
        bar.step(format!("timeline of {r}"));
    }
    bar.note("==> cost against free holes");
    for r in HOLES_RESOURCES {
        bar.message(format!("holes of {r}"));
        match measure::holes(&make_driver(cuda)?, r, &HOLES, 50_000) {
            Ok(v) => {
                for (h, ns) in v {
                    bar.out(|| println!("{r:<10} holes={h:<7} {ns:>8.1} ns/op"));
                    line(
                        serde_json::json!({"kind": "holes", "resource": r, "holes": h,
                        "ns_per_op": ns}),
                    );
                    c.holes.push((r.to_string(), h, ns));
                }
            }
            Err(e) => {
                failed = true;
                bar.error(&format!("emm bench: holes of {r}: {e}"));
            }
        }
        bar.step(format!("holes of {r}"));
    }
    if cuda.is_none() {
        bar.note("==> peer registration on a simulated node (W1)");
        let (dv, f) = devices_results(&peers_plan, &devices, &bar);
        failed |= f;
        for (r, w, n, ns) in &dv {
            line(
                serde_json::json!({"kind": "devices", "resource": r, "workload": w,
                "devices": n, "virtual_ns_per_op": ns}),
            );
        }
        c.devices = dv;
    }
    bar.finish();
    for f in &plan.peers {
        let text =
            std::fs::read_to_string(f).map_err(|e| format!("--peers {}: {e}", f.display()))?;
        c.peers.extend(parse_peers(&text));
    }
    Ok((c, jsonl, failed))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{report_threads_plan, THREADS_RESOURCES};
    use crate::args::{Cli, Commands};
    use crate::bench::parse;

    fn plan(args: &str) -> super::Plan {
        let argv = ["emm", "bench"].into_iter().chain(args.split_whitespace());
        match Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(Commands::Bench(a)) => parse(a, true),
            other => panic!("{args}: {other:?}"),
        }
    }

    #[test]
    fn the_report_runs_smaller_rounds_within_a_budget_unless_told_otherwise() {
        let p = plan("--report out");
        assert_eq!(p.round_ops, crate::bench::REPORT_ROUND_OPS);
        assert_eq!(p.budget, Some(std::time::Duration::from_secs(240)));
        let p = plan("--report out --round-ops 1000000 --budget 0");
        assert_eq!((p.round_ops, p.budget), (1_000_000, None));
        let p = plan("--threads 1,2");
        assert_eq!(p.round_ops, crate::bench::THREADS_ROUND_OPS);
        // Past the deadline, no cell starts (and no driver is made): each is listed.
        let mut tp =
            report_threads_plan(&plan("--report out --workload W1 --streams own"), &[1, 16]);
        tp.deadline = Some(std::time::Instant::now());
        let bar = crate::progress::Bar::new(tp.cells() as u64, "cells", true);
        let run = crate::bench_threads::run(&tp, &|| Err("no driver".into()), &bar, |_| {})
            .expect("nothing runs");
        assert!(run.results.is_empty() && !run.failed);
        assert_eq!(run.skipped.len(), 6, "{:?}", run.skipped);
        assert_eq!(run.skipped[0], "pool W1 by 1 threads (own streams)");
    }

    #[test]
    fn the_reports_threads_run_threads_resource_else_the_default_three() {
        let p = plan("--report out --resource pool-vmm,binning --threads-resource sharded");
        assert_eq!(p.resources, ["pool-vmm", "binning"]);
        assert_eq!(report_threads_plan(&p, &[1, 16]).resources, ["sharded"]);
        let p = plan("--report out --resource pool-vmm");
        assert_eq!(
            report_threads_plan(&p, &[1]).resources,
            THREADS_RESOURCES.map(String::from)
        );
    }
}
