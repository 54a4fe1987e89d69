//! `emm soak`: the soak ([`emm_conformance::soak`]) for a set number of minutes.

use std::time::Duration;

use super::args::SoakArgs;
use super::progress::Bar;
use super::{usage_error, utf8_plugins, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};
use emm_conformance::soak::{soak, SoakConfig};
use emm_conformance::sweep::subjects;

/// Runs `emm soak`; `quiet` prints no progress, only failures and the summary.
pub fn run(a: SoakArgs, quiet: bool) -> i32 {
    let plugins = match utf8_plugins(a.plugins) {
        Ok(p) => p,
        Err(e) => return usage_error("soak", e),
    };
    let subjects = match subjects(&plugins) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("emm soak: {e}");
            return EXIT_CANNOT_RUN;
        }
    };
    let config = SoakConfig {
        subjects,
        duration: Duration::from_secs_f64(a.minutes * 60.0),
        seed: a.seed,
        fault_every: a.fault_every,
        quarantine_every: a.quarantine_every,
        max_ops: a.max_ops.max(1),
    };
    // The bar counts seconds of the soak's duration.
    let seconds = config.duration.as_secs().max(1);
    let bar = Bar::new(seconds, "s", quiet);
    let mut shown = 0;
    let summary = soak(&config, |s| {
        // Each failure once, as it happens (the summary lists only the first twenty).
        // Progress must not end a long soak when stderr cannot be written (a full disk):
        // the bar's lines are written without a panic.
        for f in s.failures.iter().skip(shown).take(3) {
            bar.error(&format!("emm soak: FAIL {f}"));
        }
        shown = s.failures.len();
        let status = format!(
            "{} rounds {} ops, {} failures",
            s.rounds,
            s.ops,
            s.failures.len()
        );
        bar.log(&format!(
            "emm soak: {:>6} rounds {:>10} ops {:>6.1} min, {} failures",
            s.rounds,
            s.ops,
            s.elapsed.as_secs_f64() / 60.0,
            s.failures.len()
        ));
        bar.set(s.elapsed.as_secs().min(seconds), seconds);
        bar.message(status);
    });
    bar.finish();
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
