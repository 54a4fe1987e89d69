//! `emm replay <log.csv>`: replays an RMM-format allocation log (`LoggingAdaptor` writes one)
//! against a named resource on the simulated GPU or the real one.

use std::sync::Arc;

use emm_bench::replay::{replay, EventLog, HeldProbe, Pace, ReplayOptions, Threading};
use emm_core::mr::named;
use emm_core::Driver;
use emm_sim::{SimConfig, SimDriver, GIB};

use super::args::{Backend, ReplayArgs, ReplayPace, ReplayThreads};
use super::{EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};

/// Runs `emm replay`.
pub fn run(a: ReplayArgs) -> i32 {
    let resource = a.resource;
    let backend = a.backend.name();
    let threading = match a.threads {
        ReplayThreads::Single => Threading::Single,
        ReplayThreads::PerLogThread => Threading::PerLogThread,
    };
    let json = a.json;
    let file = a.log.display().to_string();
    let log = match EventLog::from_file(&a.log) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("emm replay: {e}");
            return EXIT_CANNOT_RUN;
        }
    };
    let driver: Arc<dyn Driver> = match a.backend {
        Backend::Sim => match SimDriver::new(
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
        Backend::Cuda => match emm_cuda::CudaDriver::new() {
            Ok(d) => Arc::new(d),
            Err(e) => {
                eprintln!("emm replay: {e}");
                return EXIT_CANNOT_RUN;
            }
        },
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
        pace: match a.pace {
            ReplayPace::Recorded => Pace::Recorded,
            ReplayPace::Flat => Pace::Flat,
        },
        held: HeldProbe::DriverMemInfo,
        ..ReplayOptions::default()
    };
    match replay(&log, &*mr, &options) {
        Ok(report) => {
            if json {
                println!("{}", report_json(&report, &resource, backend, &file));
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
