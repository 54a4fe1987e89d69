//! `emm soak`: the soak ([`emm_conformance::soak`]) for a set number of minutes.

use std::io::Write as _;
use std::time::Duration;

use super::{Args, Command, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};
use emm_conformance::soak::{soak, SoakConfig};
use emm_conformance::sweep::subjects;

/// `emm soak`.
pub const COMMAND: Command = Command {
    name: "soak",
    summary: "random workloads for N minutes with faults and quarantines (emm soak --minutes 30)",
    usage: "usage: emm soak [plugin.wasm ...] [flags]

Runs random workloads (W1-W3 prefixes, 8-thread stress runs) against every built-in manager
and each .wasm plugin named, each on a long-lived simulated GPU, with random driver failures
every few rounds and a hostile plugin quarantined every few rounds. Fails when memory held
after a reset grows, an allocation loses its contents, anything leaks, or resident memory
creeps. Prints a summary.

flags:
  --minutes N            how long (default 1; fractions allowed)
  --seed N               seed of the round choices (default 1)
  --fault-every N        every N-th round runs with driver faults (default 5)
  --quarantine-every N   every N-th round quarantines a hostile plugin (default 7)
  --max-ops N            the longest workload round (default 5000)

exit status: 0 nothing crept, 1 something did, 2 a plugin cannot be loaded
",
    run,
};

fn run(mut a: Args) -> i32 {
    let parsed = (|| -> Result<SoakConfig, String> {
        let minutes = a.number::<f64>("--minutes")?.unwrap_or(1.0);
        let seed = a.number::<u64>("--seed")?.unwrap_or(1);
        let fault_every = a.number::<u64>("--fault-every")?.unwrap_or(5);
        let quarantine_every = a.number::<u64>("--quarantine-every")?.unwrap_or(7);
        let max_ops = a.number::<u64>("--max-ops")?.unwrap_or(5000).max(1);
        let mut plugins = Vec::new();
        while let Some(p) = a.positional() {
            plugins.push(p);
        }
        a.finish()?;
        if !(minutes.is_finite() && minutes > 0.0) {
            return Err(format!("--minutes {minutes}: give a positive number"));
        }
        Ok(SoakConfig {
            subjects: subjects(&plugins)?,
            duration: Duration::from_secs_f64(minutes * 60.0),
            seed,
            fault_every,
            quarantine_every,
            max_ops,
        })
    })();
    let config = match parsed {
        Ok(c) => c,
        Err(e) => {
            eprintln!("emm soak: {e}\n\n{}", COMMAND.usage);
            return EXIT_CANNOT_RUN;
        }
    };
    let mut shown = 0;
    let summary = soak(&config, |s| {
        // Each failure once, as it happens (the summary lists only the first twenty).
        // Progress must not end a long soak when stderr cannot be written (a full disk).
        let mut err = std::io::stderr().lock();
        for f in s.failures.iter().skip(shown).take(3) {
            let _ = writeln!(err, "emm soak: FAIL {f}");
        }
        shown = s.failures.len();
        let _ = writeln!(
            err,
            "emm soak: {:>6} rounds {:>10} ops {:>6.1} min, {} failures",
            s.rounds,
            s.ops,
            s.elapsed.as_secs_f64() / 60.0,
            s.failures.len()
        );
    });
    match summary {
        Ok(s) => {
            print!("{s}");
            if s.passed() {
                EXIT_PASS
            } else {
                EXIT_FAIL
            }
        }
        Err(e) => {
            eprintln!("emm soak: {e}");
            EXIT_CANNOT_RUN
        }
    }
}
