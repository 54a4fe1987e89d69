//! `emm check <plugin>`: runs the suite against a plugin, or replays one regression file.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use emm_core::contract::ManagerFactory;
use emm_core::mr::{CudaResource, DeviceMemoryResource};
use emm_sandbox::gate::{GatePolicy, Settings, Subject, VerdictStore};
use emm_sandbox::{load_plugin, PluginFactory, PluginLimits, PluginResource, SandboxError};
use emm_sim::{SimConfig, SimDriver};
use serde_json::json;

use super::progress::{on_stderr, use_color};
use super::{
    backend, resolve_plugin, Args, Command, BACKENDS, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS,
};
use emm_conformance::config::{seed_from, Config, ProgressFn, DEFAULT_REGRESSIONS, SEED_VAR};
use emm_conformance::replay::{load, replay};
use emm_conformance::verdict::record_of;

/// `emm check`.
pub const COMMAND: Command = Command {
    name: "check",
    summary: "check a plugin against the EMM contract (emm check default)",
    usage: "usage: emm check <plugin> [flags]

<plugin> is a built-in manager (`emm list` shows them) or the path of a .wasm plugin.

flags:
  --backend NAME       where to run: sim (the default) or cuda (the GPU of this machine)
  --seed N             the run's seed (default: $EMM_SEED, else the constant 20261127)
  --cases N            random cases after the fixed scenarios (default 256, 1 to 1000000)
  --ops N              most operations in a case (default 64, 1 to 10000)
  --threads N          cases run at once (default: every core)
  --regressions DIR    where failures are written (default .emm/regressions)
  --no-regressions     write no regression files
  --verdicts DIR       the verdict store: a .wasm plugin's run on sim records its verdict
                       there, and it runs on cuda only with a passing one (default:
                       $EMM_VERDICT_DIR, else ~/.local/share/emm/verdicts); a built-in
                       manager's run is recorded only when DIR is given
  --no-verdict         record no verdict
  --replay FILE        run the case of a regression file again and give its verdict
  --json               print the report as JSON (for CI)
  --no-color           no colours

A .wasm plugin runs on a real GPU only after it has passed on the simulated one, with the
same config (EMM_PLUGIN_CONFIG) and limits, at the depth EMM_GATE_MIN_DEPTH asks (default
256x64, the default depth here), and while no record of its bytes failed; EMM_GATE=warn
lets an unchecked plugin through with a warning (never one that failed). Records are
authenticated with a per-user key ($EMM_GATE_KEY, else ~/.config/emm/gate.key, made on
first use); emm never removes or replaces a failing record.

exit status: 0 all checks pass, 1 a check fails, 2 the plugin cannot be loaded or run
",
    run,
};

fn run(args: Args) -> i32 {
    match parse(args) {
        Ok(Mode::Check(plugin, config, out)) => check(&plugin, config, &out),
        Ok(Mode::Replay(plugin, backend_name, file, verdicts, json)) => {
            replay_file(&plugin, backend_name, &file, verdicts, json)
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
    Check(String, Config, Output),
    Replay(String, Option<String>, PathBuf, Option<PathBuf>, bool),
}

/// What a check prints and where its verdict goes.
struct Output {
    /// The backend to open once the plugin is admitted.
    backend: String,
    json: bool,
    no_color: bool,
    /// The `--verdicts` folder, if given.
    verdicts: Option<PathBuf>,
    /// `--no-verdict`.
    no_verdict: bool,
}

fn parse(mut a: Args) -> Result<Mode, Refusal> {
    let json = a.flag("--json");
    let no_color = a.flag("--no-color");
    let backend_name = a.value("--backend")?;
    let seed = a.number::<u64>("--seed")?;
    let cases = bounded(a.value("--cases")?, "--cases", MAX_CASES)?;
    let ops = bounded(a.value("--ops")?, "--ops", MAX_OPS)?;
    let threads = a.number::<usize>("--threads")?;
    let dir = a.value("--regressions")?;
    let no_dir = a.flag("--no-regressions");
    let file = a.value("--replay")?;
    let verdicts = a.value("--verdicts")?.map(PathBuf::from);
    let no_verdict = a.flag("--no-verdict");
    let plugin = a
        .positional()
        .ok_or("name the plugin to check, e.g. `emm check default`")?;
    a.finish()?;
    if let Some(f) = file {
        let file = PathBuf::from(f);
        return Ok(Mode::Replay(plugin, backend_name, file, verdicts, json));
    }
    let seed = match seed {
        Some(s) => s,
        None => seed_from(std::env::var(SEED_VAR).ok().as_deref())?,
    };
    // The backend is opened after the plugin is loaded and, for hardware, admitted by the
    // gate: an unchecked plugin hears what to run even where no GPU is.
    let backend_name = backend_name.unwrap_or_else(|| "sim".to_string());
    if !BACKENDS.contains(&backend_name.as_str()) {
        return Err(Refusal::CannotRun(format!(
            "no backend {backend_name:?}; this build has: {}",
            BACKENDS.join(", ")
        )));
    }
    let mut config = Config::new(seed);
    config.cases = cases.unwrap_or(config.cases);
    config.max_ops = ops.unwrap_or(config.max_ops);
    if let Some(t) = threads {
        config = config.threads(t);
    }
    if backend_name == "cuda" {
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
    let out = Output {
        backend: backend_name,
        json,
        no_color,
        verdicts,
        no_verdict,
    };
    Ok(Mode::Check(plugin, config, out))
}

/// The most random cases `--cases` takes: a million cases run for minutes even against the
/// fastest manager, and the count fits a verdict's depth.
pub const MAX_CASES: usize = 1_000_000;
/// The most operations `--ops` takes: a case is a vector of this many operations, made and
/// shrunk on every thread at once.
pub const MAX_OPS: usize = 10_000;

/// The value of `flag`, a whole number from 1 to `max`.
fn bounded(value: Option<String>, flag: &str, max: usize) -> Result<Option<usize>, String> {
    let Some(v) = value else {
        return Ok(None);
    };
    match v.trim().parse::<u64>() {
        Ok(n) if n >= 1 && n <= max as u64 => Ok(Some(n as usize)),
        _ => Err(format!("{flag} {v:?}: give a whole number from 1 to {max}")),
    }
}

/// Plugins' panics are caught and reported as failures; their default message would only
/// garble the progress bar. `EMM_SHOW_PANICS=1` shows them.
fn quiet_panics() {
    if std::env::var_os("EMM_SHOW_PANICS").is_none() {
        std::panic::set_hook(Box::new(|_| {}));
    }
}

/// A plugin loaded for a check: the factory, the sandbox's factory when it is a `.wasm`
/// plugin (the gate's), and what its verdict is about.
struct Loaded {
    factory: Arc<dyn ManagerFactory>,
    wasm: Option<PluginFactory>,
    subject: Option<Subject>,
    /// A `.wasm` plugin's config and limits, which its verdict covers with its bytes.
    settings: Option<Settings>,
}

/// Loads `plugin`: a `.wasm` path through the sandbox's one way in (hashed once, gated by
/// `policy`), anything else from the registry.
fn load_for_check(plugin: &str, policy: &GatePolicy) -> Result<Loaded, String> {
    if plugin.trim().ends_with(".wasm") {
        let f = load_plugin(Path::new(plugin.trim()), PluginLimits::default())
            .map_err(|e| e.to_string())?
            .with_gate(policy.clone());
        let subject = f.module().content_hash().map(Subject::wasm);
        let settings = Some(f.module().settings());
        return Ok(Loaded {
            factory: Arc::new(emm_conformance::sandboxed::Sandboxed(f.clone())),
            wasm: Some(f),
            subject,
            settings,
        });
    }
    let factory = resolve_plugin(plugin)?;
    let subject = Some(Subject::builtin(factory.name(), env!("CARGO_PKG_VERSION")));
    Ok(Loaded {
        factory,
        wasm: None,
        subject,
        settings: None,
    })
}

/// Starts the plugin once on a fresh simulated GPU: a plugin that cannot start (another ABI
/// version, `emm_init` refusing its config, a trap in its start function, a bad
/// `emm_buffer`) cannot be checked at all, which is not the same as failing a check.
fn starts(f: &PluginFactory) -> Result<(), SandboxError> {
    let driver = SimDriver::new(SimConfig::new(0)).map_err(|e| SandboxError::Instantiate {
        plugin: f.module().name().to_string(),
        reason: format!("no simulated GPU to start it on: {e}"),
    })?;
    let upstream: Arc<dyn DeviceMemoryResource> =
        Arc::new(CudaResource::<SimDriver>::new(Arc::new(driver)));
    PluginResource::new(Arc::clone(f.module()), upstream).start()
}

/// Wraps `config`'s progress callback so that it also counts the cases that finished.
fn count_cases(config: &mut Config) -> Arc<AtomicUsize> {
    let done = Arc::new(AtomicUsize::new(0));
    let inner = config.progress.take();
    let counter = Arc::clone(&done);
    let wrapped: ProgressFn = Arc::new(move |p| {
        counter.fetch_max(p.done, Ordering::Relaxed);
        if let Some(f) = &inner {
            f(p);
        }
    });
    config.progress = Some(wrapped);
    done
}

fn check(plugin: &str, mut config: Config, out: &Output) -> i32 {
    let json = out.json;
    let policy = match GatePolicy::from_env_with(out.verdicts.clone().map(VerdictStore::new)) {
        Ok(p) => p,
        Err(e) => return cannot_run(plugin, &e.to_string(), json),
    };
    let loaded = match load_for_check(plugin, &policy) {
        Ok(l) => l,
        Err(e) => return cannot_run(plugin, &e, json),
    };
    let on_sim = out.backend == "sim";
    if let (false, Some(f)) = (on_sim, &loaded.wasm) {
        // Refuse before the first case, with the gate's message, rather than in every case.
        if let Err(e) = f.admit_hardware() {
            return cannot_run(plugin, &e.to_string(), json);
        }
    }
    if let Some(f) = &loaded.wasm {
        if let Err(e) = starts(f) {
            return cannot_run(plugin, &format!("it cannot start: {e}"), json);
        }
    }
    match backend(&out.backend) {
        Ok(b) => config = config.backend(b),
        Err(e) => {
            eprintln!("emm check: {e}");
            return EXIT_CANNOT_RUN;
        }
    }
    quiet_panics();
    let done = count_cases(&mut config);
    let report = emm_conformance::runner::check(&*loaded.factory, &config);
    // The random cases that actually ran: the depth a verdict records.
    let fixed = emm_conformance::strategy::scenarios().len();
    let ran = done.load(Ordering::Relaxed).saturating_sub(fixed);
    if json {
        println!("{}", report.to_json());
    } else {
        let color = use_color(std::io::stdout().is_terminal(), out.no_color);
        print!("{}", report.to_table(color));
    }
    // Only the simulator's verdicts open the gate; hardware runs are not recorded, nor a run
    // that could not judge the plugin (it could not be run: a bad config, say). A built-in
    // manager needs no verdict to run, so its run is recorded only into a store named with
    // --verdicts.
    let record = on_sim && !out.no_verdict && (loaded.wasm.is_some() || out.verdicts.is_some());
    if report.error.is_some() && record {
        eprintln!("emm check: no verdict recorded: the plugin could not be run");
    } else if let (true, Some(subject)) = (record, loaded.subject) {
        let record = record_of(&report, subject, loaded.settings, &config, ran);
        match policy.get_store().save(&record) {
            Ok(path) => eprintln!("emm check: verdict recorded in {}", path.display()),
            Err(e) => eprintln!("emm check: warning: the verdict was not recorded: {e}"),
        }
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
    verdicts: Option<PathBuf>,
    json: bool,
) -> i32 {
    let r = match load(file) {
        Ok(r) => r,
        Err(e) => return cannot_run(plugin, &e, json),
    };
    // A replay on hardware goes through the gate like a check (the store of --verdicts).
    let policy = match GatePolicy::from_env_with(verdicts.map(VerdictStore::new)) {
        Ok(p) => p,
        Err(e) => return cannot_run(plugin, &e.to_string(), json),
    };
    let factory = match load_for_check(plugin, &policy) {
        Ok(l) => l.factory,
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
