//! `emm check <plugin>`: runs the suite against a plugin, or replays one regression file.

use std::io::IsTerminal;
use std::path::PathBuf;

use serde_json::json;

use super::progress::{on_stderr, use_color};
use super::{backend, resolve_plugin, Args, Command, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};
use crate::config::{seed_from, Config, DEFAULT_REGRESSIONS, SEED_VAR};
use crate::replay::{load, replay};

/// `emm check`.
pub const COMMAND: Command = Command {
    name: "check",
    summary: "check a plugin against the EMM contract (emm check default)",
    usage: "usage: emm check <plugin> [flags]

<plugin> is a built-in manager (`emm list` shows them) or the path of a .wasm plugin.

flags:
  --backend NAME       where to run: sim (the default) or cuda (the GPU of this machine)
  --seed N             the run's seed (default: $EMM_SEED, else from the clock)
  --cases N            random cases after the fixed scenarios (default 256)
  --ops N              most operations in a case (default 64)
  --threads N          cases run at once (default: every core)
  --regressions DIR    where failures are written (default .emm/regressions)
  --no-regressions     write no regression files
  --replay FILE        run the case of a regression file again and give its verdict
  --json               print the report as JSON (for CI)
  --no-color           no colours

exit status: 0 all checks pass, 1 a check fails, 2 the plugin cannot be loaded or run
",
    run,
};

fn run(args: Args) -> i32 {
    match parse(args) {
        Ok(Mode::Check(plugin, config, json, no_color)) => check(&plugin, config, json, no_color),
        Ok(Mode::Replay(plugin, backend_name, file, json)) => {
            replay_file(&plugin, backend_name, &file, json)
        }
        Err(Refusal::Usage(e)) => {
            eprintln!("emm check: {e}\n\n{}", COMMAND.usage);
            EXIT_CANNOT_RUN
        }
        Err(Refusal::CannotRun(e)) => {
            eprintln!("emm check: {e}");
            EXIT_CANNOT_RUN
        }
    }
}

/// Why a check does not start: a wrong command line (the usage follows), or a backend that
/// cannot run here (one line).
enum Refusal {
    Usage(String),
    CannotRun(String),
}

impl From<String> for Refusal {
    fn from(e: String) -> Self {
        Refusal::Usage(e)
    }
}

impl From<&str> for Refusal {
    fn from(e: &str) -> Self {
        Refusal::Usage(e.to_string())
    }
}

enum Mode {
    Check(String, Config, bool, bool),
    Replay(String, Option<String>, PathBuf, bool),
}

fn parse(mut a: Args) -> Result<Mode, Refusal> {
    let json = a.flag("--json");
    let no_color = a.flag("--no-color");
    let backend_name = a.value("--backend")?;
    let seed = a.number::<u64>("--seed")?;
    let cases = a.number::<usize>("--cases")?;
    let ops = a.number::<usize>("--ops")?;
    let threads = a.number::<usize>("--threads")?;
    let dir = a.value("--regressions")?;
    let no_dir = a.flag("--no-regressions");
    let file = a.value("--replay")?;
    let plugin = a
        .positional()
        .ok_or("name the plugin to check, e.g. `emm check default`")?;
    a.finish()?;
    if let Some(f) = file {
        return Ok(Mode::Replay(plugin, backend_name, PathBuf::from(f), json));
    }
    let seed = match seed {
        Some(s) => s,
        None => seed_from(std::env::var(SEED_VAR).ok().as_deref())?,
    };
    let backend = backend(backend_name.as_deref().unwrap_or("sim")).map_err(Refusal::CannotRun)?;
    let mut config = Config::new(seed).backend(backend);
    config.cases = cases.unwrap_or(config.cases);
    config.max_ops = ops.unwrap_or(config.max_ops).max(1);
    if let Some(t) = threads {
        config = config.threads(t);
    }
    if config.backend.name() == "cuda" {
        // One GPU: cases one at a time, so memory-info checks see only their own plugin.
        config = config.threads(1);
    }
    if !no_dir {
        config = config.regressions(dir.unwrap_or_else(|| DEFAULT_REGRESSIONS.to_string()));
    }
    config.plugin = Some(plugin.clone());
    if !json {
        config.progress = on_stderr();
    }
    Ok(Mode::Check(plugin, config, json, no_color))
}

/// Plugins' panics are caught and reported as failures; their default message would only
/// garble the progress bar. `EMM_SHOW_PANICS=1` shows them.
fn quiet_panics() {
    if std::env::var_os("EMM_SHOW_PANICS").is_none() {
        std::panic::set_hook(Box::new(|_| {}));
    }
}

fn check(plugin: &str, config: Config, json: bool, no_color: bool) -> i32 {
    let factory = match resolve_plugin(plugin) {
        Ok(f) => f,
        Err(e) => return cannot_run(plugin, &e, json),
    };
    quiet_panics();
    let report = crate::runner::check(&*factory, &config);
    if json {
        println!("{}", report.to_json());
    } else {
        let color = use_color(std::io::stdout().is_terminal(), no_color);
        print!("{}", report.to_table(color));
    }
    if report.error.is_some() {
        EXIT_CANNOT_RUN
    } else if report.passed {
        EXIT_PASS
    } else {
        EXIT_FAIL
    }
}

fn cannot_run(plugin: &str, reason: &str, json: bool) -> i32 {
    if json {
        let v = json!({ "plugin": plugin, "passed": false, "error": reason });
        println!("{v:#}");
    } else {
        eprintln!("emm check: cannot load {plugin:?}: {reason}");
    }
    EXIT_CANNOT_RUN
}

fn replay_file(
    plugin: &str,
    backend_name: Option<String>,
    file: &std::path::Path,
    json: bool,
) -> i32 {
    let r = match load(file) {
        Ok(r) => r,
        Err(e) => return cannot_run(plugin, &e, json),
    };
    let factory = match resolve_plugin(plugin) {
        Ok(f) => f,
        Err(e) => return cannot_run(plugin, &e, json),
    };
    let b = match backend(backend_name.as_deref().unwrap_or(&r.backend)) {
        Ok(b) => b,
        Err(e) => return cannot_run(plugin, &e, json),
    };
    quiet_panics();
    let verdict = match replay(&*factory, &*b, &r) {
        Ok(v) => v,
        Err(e) => return cannot_run(plugin, &e, json),
    };
    let reproduced = verdict.reproduced();
    if json {
        let failure = verdict
            .finding
            .as_ref()
            .map(|f| json!({ "check": f.check.name(), "step": f.step, "message": f.message }));
        let v = json!({
            "plugin": plugin, "backend": b.name(), "file": file.display().to_string(),
            "recorded_check": r.check, "reproduced": reproduced,
            "passed": verdict.finding.is_none(), "failure": failure,
        });
        println!("{v:#}");
    } else {
        println!(
            "replaying {} ({} operations) on {plugin}, {}:",
            file.display(),
            r.ops.len(),
            b.name()
        );
        for (i, op) in r.ops.iter().enumerate() {
            println!("  {i:>3}. {op}");
        }
        match &verdict.finding {
            Some(f) if reproduced => println!(
                "reproduced: {} fails at step {}: {}",
                f.check, f.step, f.message
            ),
            Some(f) => println!(
                "fails another check than recorded ({}): {} at step {}: {}",
                r.check, f.check, f.step, f.message
            ),
            None => println!(
                "does not reproduce: the case passes now (recorded: {}: {})",
                r.check, r.message
            ),
        }
    }
    if verdict.finding.is_some() {
        EXIT_FAIL
    } else {
        EXIT_PASS
    }
}
