//! `emm sweep`: the fault-injection sweep ([`emm_conformance::sweep`]) over the built-in managers and
//! the `.wasm` plugins named on the command line.

use emm_core::CudaCode;

use super::args::SweepArgs;
use super::progress::Bar;
use super::{usage_error, utf8_plugins, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};
use emm_conformance::sweep::{subjects, sweep, SweepConfig, FAULT_KINDS};

fn codes(list: &str) -> Result<Vec<CudaCode>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            CudaCode::ALL
                .iter()
                .copied()
                .find(|c| c.name() == s || c.name().trim_start_matches("CUDA_ERROR_") == s)
                .ok_or_else(|| format!("no CUDA code {s:?}"))
        })
        .collect()
}

/// Runs `emm sweep`; `quiet` prints no progress.
pub fn run(a: SweepArgs, quiet: bool) -> i32 {
    let plugins = match utf8_plugins(a.plugins) {
        Ok(p) => p,
        Err(e) => return usage_error("sweep", e),
    };
    // Names clap cannot judge alone: CUDA codes, and the managers of this build's registry.
    let kinds = match a.kinds.as_deref().map(codes).transpose() {
        Ok(k) => k.unwrap_or_else(|| FAULT_KINDS.to_vec()),
        Err(e) => return usage_error("sweep", format!("--kinds: {e}")),
    };
    let mut subjects = match subjects(&plugins) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("emm sweep: {e}");
            return EXIT_CANNOT_RUN;
        }
    };
    if let Some(only) = a.only {
        let keep: Vec<&str> = only
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        let builtins: Vec<&str> = subjects
            .iter()
            .filter(|s| !plugins.contains(&s.name))
            .map(|s| s.name.as_str())
            .collect();
        if keep.is_empty() {
            return usage_error(
                "sweep",
                format!(
                    "--only names no manager; give some of: {}",
                    builtins.join(", ")
                ),
            );
        }
        if let Some(unknown) = keep.iter().find(|n| !builtins.contains(n)) {
            return usage_error(
                "sweep",
                format!(
                    "--only {unknown:?} is not a built-in manager; give some of: {}",
                    builtins.join(", ")
                ),
            );
        }
        let keep: Vec<String> = keep.into_iter().map(String::from).collect();
        subjects.retain(|s| keep.contains(&s.name) || plugins.contains(&s.name));
    }
    let mut config = SweepConfig::new(subjects, a.ops);
    if a.no_workloads {
        config.scenarios.retain(|s| s.name() == "conformance");
    }
    config.kinds = kinds;
    config.stride = a.stride.max(1);
    config.seed = a.seed;
    // Panics are caught and reported per position; their default message would only repeat it.
    if std::env::var_os("EMM_SHOW_PANICS").is_none() {
        std::panic::set_hook(Box::new(|_| {}));
    }
    // The bar names the (manager, scenario) under way: the sweep reports each as it ends.
    let mut next = config
        .subjects
        .iter()
        .flat_map(|s| {
            config
                .scenarios
                .iter()
                .map(|c| format!("{} {}", s.name, c.name()))
        })
        .collect::<Vec<_>>()
        .into_iter();
    let total = config.subjects.len() * config.scenarios.len();
    let bar = Bar::new(total as u64, "runs", quiet);
    bar.message(next.next().unwrap_or_default());
    let report = sweep(&config, |subject, scenario, swept| {
        bar.note(&format!(
            "emm sweep: {subject:<24} {scenario:<14} {swept:>6} faulted runs"
        ));
        bar.step(next.next().unwrap_or_default());
    });
    bar.finish();
    print!("{report}");
    if report.passed() {
        EXIT_PASS
    } else {
        EXIT_FAIL
    }
}
