//! `emm replay <log.csv>`: replays an RMM-format allocation log (`LoggingAdaptor` writes one)
//! against a named resource on the simulated GPU or the real one.

use std::sync::Arc;

use emm_bench::replay::{replay, EventLog, HeldProbe, ReplayOptions, Threading};
use emm_core::mr::named::{self, NAMED_RESOURCES};
use emm_core::Driver;
use emm_sim::{SimConfig, SimDriver, GIB};

use super::{Args, Command, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};

/// `emm replay`.
pub const COMMAND: Command = Command {
    name: "replay",
    summary: "replay an RMM-format allocation log against a resource (emm replay log.csv)",
    usage: "usage: emm replay <log.csv> [flags]

Replays every event of an RMM-format log (header Thread,Time,Action,Pointer,Size,Stream) —
every stream, every thread's order kept — and reports time, peak memory held, fragmentation
and leaks. A corrupt or truncated log is refused with the line number.

flags:
  --resource NAME    pool (the default), arena, binning, async, managed or cuda
  --backend NAME     sim (the default: 80 GiB, contents and race tracking off) or cuda
                     (this GPU)
  --threads MODE     single (the default: one thread in log order) or per-log-thread
  --json             the report as one JSON object
",
    run,
};

fn run(mut a: Args) -> i32 {
    let parsed = (|| -> Result<_, String> {
        let resource = a.value("--resource")?.unwrap_or_else(|| "pool".into());
        let backend = a.value("--backend")?.unwrap_or_else(|| "sim".into());
        let threading = match a.value("--threads")?.as_deref() {
            None | Some("single") => Threading::Single,
            Some("per-log-thread") => Threading::PerLogThread,
            Some(o) => {
                return Err(format!(
                    "--threads takes single or per-log-thread, not {o:?}"
                ))
            }
        };
        let json = a.flag("--json");
        let file = a
            .positional()
            .ok_or("name the log to replay, e.g. `emm replay rmm_log.csv`")?;
        a.finish()?;
        if !NAMED_RESOURCES.iter().any(|(n, _)| *n == resource) {
            return Err(format!(
                "no resource {resource:?}; known: {}",
                NAMED_RESOURCES
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok((resource, backend, threading, json, file))
    })();
    let (resource, backend, threading, json, file) = match parsed {
        Ok(p) => p,
        Err(e) => {
            eprintln!("emm replay: {e}\n\n{}", COMMAND.usage);
            return EXIT_CANNOT_RUN;
        }
    };
    let log = match EventLog::from_file(std::path::Path::new(&file)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("emm replay: {e}");
            return EXIT_CANNOT_RUN;
        }
    };
    let driver: Arc<dyn Driver> = match backend.as_str() {
        "sim" => match SimDriver::new(
            SimConfig::new(1)
                .memory_per_device(80 * GIB)
                .track_contents(false)
                .track_races(false)
                .record_trace(false),
        ) {
            Ok(d) => Arc::new(d),
            Err(e) => {
                eprintln!("emm replay: {e}");
                return EXIT_CANNOT_RUN;
            }
        },
        "cuda" => match emm_cuda::CudaDriver::new() {
            Ok(d) => Arc::new(d),
            Err(e) => {
                eprintln!("emm replay: {e}");
                return EXIT_CANNOT_RUN;
            }
        },
        other => {
            eprintln!("emm replay: no backend {other:?}; use sim or cuda");
            return EXIT_CANNOT_RUN;
        }
    };
    let mr = match named::build(&resource, Arc::clone(&driver)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("emm replay: {e}");
            return EXIT_CANNOT_RUN;
        }
    };
    let options = ReplayOptions {
        threading,
        held: HeldProbe::DriverMemInfo,
        ..ReplayOptions::default()
    };
    match replay(&log, &*mr, &options) {
        Ok(report) => {
            if json {
                println!("{}", report_json(&report, &resource, &backend, &file));
            } else {
                println!("emm replay {file} against {resource} on {backend}\n{report}");
            }
            EXIT_PASS
        }
        Err(e) => {
            eprintln!("emm replay: {e}");
            EXIT_FAIL
        }
    }
}

fn report_json(
    r: &emm_bench::replay::ReplayReport,
    resource: &str,
    backend: &str,
    file: &str,
) -> serde_json::Value {
    serde_json::json!({
        "log": file,
        "resource": resource,
        "backend": backend,
        "ops": r.ops(),
        "wall_ns": r.wall_time.as_nanos() as u64,
        "resource_ns": r.resource_time.as_nanos() as u64,
        "ns_per_op": r.ns_per_op(),
        "peak_live_bytes": r.peak_live_bytes,
        "peak_held_bytes": r.peak_held_bytes,
        "fragmentation": r.fragmentation(),
        "leaks": r.leaks.len(),
        "unknown_frees": r.unknown_frees.len(),
        "failures": r.failures.len(),
    })
}
