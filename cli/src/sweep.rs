//! `emm sweep`: the fault-injection sweep ([`emm_conformance::sweep`]) over the built-in managers and
//! the `.wasm` plugins named on the command line.

use emm_core::CudaCode;

use super::{Args, Command, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};
use emm_conformance::sweep::{subjects, sweep, SweepConfig, FAULT_KINDS};

/// `emm sweep`.
pub const COMMAND: Command = Command {
    name: "sweep",
    summary: "fail every driver call of every manager in turn (emm sweep target/wasm/*.wasm)",
    usage: "usage: emm sweep [plugin.wasm ...] [flags]

Runs W1-W3 (cut to --ops ops) and the suite's fixed op sequence against every built-in
manager and each .wasm plugin named, on the simulated GPU, failing the k-th driver call the
manager makes for every k and every failure kind. At every position: no panic, the error
reaches the caller naming the failure, allocations made before keep their contents, and after
teardown nothing is held. Prints positions x kinds swept and the time.

flags:
  --ops N            ops of each workload (default 200)
  --kinds LIST       comma-separated CUDA codes (default: all six: CUDA_ERROR_OUT_OF_MEMORY,
                     CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_LAUNCH_FAILED,
                     CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_UNKNOWN)
  --only LIST        comma-separated built-in managers (default: all of them)
  --stride N         sweep every N-th position only (default 1)
  --no-workloads     the suite's op sequence only
  --seed N           the simulator's seed (default 1)

exit status: 0 every position passes, 1 one fails, 2 a plugin cannot be loaded
",
    run,
};

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

fn run(mut a: Args) -> i32 {
    let parsed = (|| -> Result<SweepConfig, String> {
        let ops = a.number::<usize>("--ops")?.unwrap_or(200);
        let kinds = a.value("--kinds")?;
        let only = a.value("--only")?;
        let stride = a.number::<usize>("--stride")?.unwrap_or(1).max(1);
        let no_workloads = a.flag("--no-workloads");
        let seed = a.number::<u64>("--seed")?.unwrap_or(1);
        let mut plugins = Vec::new();
        while let Some(p) = a.positional() {
            plugins.push(p);
        }
        a.finish()?;
        let mut subjects = subjects(&plugins)?;
        if let Some(only) = only {
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
                return Err(format!(
                    "--only names no manager; give some of: {}",
                    builtins.join(", ")
                ));
            }
            if let Some(unknown) = keep.iter().find(|n| !builtins.contains(n)) {
                return Err(format!(
                    "--only {unknown:?} is not a built-in manager; give some of: {}",
                    builtins.join(", ")
                ));
            }
            subjects.retain(|s| keep.contains(&s.name.as_str()) || plugins.contains(&s.name));
        }
        let mut config = SweepConfig::new(subjects, ops);
        if no_workloads {
            config.scenarios.retain(|s| s.name() == "conformance");
        }
        config.kinds = match kinds {
            Some(k) => codes(&k)?,
            None => FAULT_KINDS.to_vec(),
        };
        config.stride = stride;
        config.seed = seed;
        Ok(config)
    })();
    let config = match parsed {
        Ok(c) => c,
        Err(e) => {
            eprintln!("emm sweep: {e}\n\n{}", COMMAND.usage);
            return EXIT_CANNOT_RUN;
        }
    };
    // Panics are caught and reported per position; their default message would only repeat it.
    if std::env::var_os("EMM_SHOW_PANICS").is_none() {
        std::panic::set_hook(Box::new(|_| {}));
    }
    let report = sweep(&config, |subject, scenario, swept| {
        eprintln!("emm sweep: {subject:<24} {scenario:<14} {swept:>6} faulted runs");
    });
    print!("{report}");
    if report.passed() {
        EXIT_PASS
    } else {
        EXIT_FAIL
    }
}
