//! `emm check <plugin>`: runs the suite against a plugin, or replays one regression file.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use emm_core::contract::ManagerFactory;
use emm_core::mr::{CudaResource, DeviceMemoryResource};
use emm_sandbox::gate::{GatePolicy, Settings, Subject, VerdictStore};
use emm_sandbox::{load_plugin, PluginFactory, PluginLimits, PluginResource, SandboxError};
use emm_sim::{SimConfig, SimDriver};
use serde_json::json;

use super::args::{Backend, CheckArgs};
pub use super::args::{MAX_CASES, MAX_OPS};
use super::progress::{on_stderr, use_color};
use super::{backend, resolve_plugin, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};
use emm_conformance::config::{seed_from, Config, ProgressFn, DEFAULT_REGRESSIONS, SEED_VAR};
use emm_conformance::replay::load;
use emm_conformance::runner::replay;
use emm_conformance::verdict::record_of;
use emm_conformance::Report;

/// Runs `emm check`; `quiet` draws no progress bar.
pub fn run(args: CheckArgs, quiet: bool) -> i32 {
    let plugin = Plugin::new(&args.plugin);
    if let Some(file) = &args.replay {
        let backend_name = args.backend.map(|b| b.name().to_string());
        return replay_file(
            &plugin,
            backend_name,
            file,
            args.verdicts.clone(),
            args.json,
        );
    }
    match parse(&args, &plugin, quiet) {
        Ok((config, out)) => check(&plugin, config, &out),
        Err(e) => {
            eprintln!("emm check: {e}");
            EXIT_CANNOT_RUN
        }
    }
}

/// The plugin named on the command line: its name for messages and the registry, and the
/// path of a `.wasm` plugin as given (any bytes).
struct Plugin {
    name: String,
    wasm: Option<PathBuf>,
}

impl Plugin {
    fn new(arg: &std::ffi::OsStr) -> Self {
        let name = arg.to_string_lossy().into_owned();
        let wasm = name.trim().ends_with(".wasm").then(|| match arg.to_str() {
            Some(s) => PathBuf::from(s.trim()),
            None => PathBuf::from(arg),
        });
        Plugin { name, wasm }
    }
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

/// The run's config and output. The backend is opened after the plugin is loaded and, for
/// hardware, admitted by the gate: an unchecked plugin hears what to run even where no GPU is.
fn parse(a: &CheckArgs, plugin: &Plugin, quiet: bool) -> Result<(Config, Output), String> {
    let seed = match a.seed {
        Some(s) => s,
        None => seed_from(std::env::var(SEED_VAR).ok().as_deref())?,
    };
    let backend_name = a.backend.unwrap_or(Backend::Sim).name().to_string();
    let mut config = Config::new(seed);
    // Bounded by clap to MAX_CASES and MAX_OPS, which fit a usize.
    config.cases = a.cases.map_or(config.cases, |n| n as usize);
    config.max_ops = a.ops.map_or(config.max_ops, |n| n as usize);
    if let Some(t) = a.threads {
        config = config.threads(t);
    }
    if backend_name == "cuda" {
        // One GPU: cases one at a time, so memory-info checks see only their own plugin.
        config = config.threads(1);
    }
    if !a.no_regressions {
        config = config.regressions(
            a.regressions
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_REGRESSIONS)),
        );
    }
    config.plugin = Some(plugin.name.clone());
    if !a.json && !quiet {
        config.progress = on_stderr();
    }
    let out = Output {
        backend: backend_name,
        json: a.json,
        no_color: a.no_color,
        verdicts: a.verdicts.clone(),
        no_verdict: a.no_verdict,
    };
    Ok((config, out))
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
fn load_for_check(plugin: &Plugin, policy: &GatePolicy) -> Result<Loaded, String> {
    if let Some(path) = &plugin.wasm {
        let f = load_plugin(path, PluginLimits::default())
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
    let factory = resolve_plugin(&plugin.name)?;
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

fn check(loading: &Plugin, mut config: Config, out: &Output) -> i32 {
    let plugin = loading.name.as_str();
    let json = out.json;
    let policy = match GatePolicy::from_env_with(out.verdicts.clone().map(VerdictStore::new)) {
        Ok(p) => p,
        Err(e) => return cannot_run(plugin, &e.to_string(), json),
    };
    let loaded = match load_for_check(loading, &policy) {
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
    exit_status(&report)
}

/// 1 when a check failed, even if the run then stopped (a device fault ends a GPU run while
/// the failure it found is shortened); else 2 when the run stopped; else 0 or 1.
fn exit_status(report: &Report) -> i32 {
    if report.checks.iter().any(|c| c.failure.is_some()) {
        EXIT_FAIL
    } else if report.error.is_some() {
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
    loading: &Plugin,
    backend_name: Option<String>,
    file: &std::path::Path,
    verdicts: Option<PathBuf>,
    json: bool,
) -> i32 {
    let plugin = loading.name.as_str();
    let r = match load(file) {
        Ok(r) => r,
        Err(e) => return cannot_run(plugin, &e, json),
    };
    // A replay on hardware goes through the gate like a check (the store of --verdicts).
    let policy = match GatePolicy::from_env_with(verdicts.map(VerdictStore::new)) {
        Ok(p) => p,
        Err(e) => return cannot_run(plugin, &e.to_string(), json),
    };
    let factory = match load_for_check(loading, &policy) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use emm_conformance::report::Failure;

    #[test]
    fn a_failure_found_before_the_run_stopped_exits_as_a_failure() {
        let factory = resolve_plugin("pool").unwrap();
        let passing = emm_conformance::check(&*factory, &Config::new(1).depth(1, 4));
        assert_eq!(exit_status(&passing), EXIT_PASS);
        let mut stopped = passing.clone();
        stopped.passed = false;
        stopped.error = Some("cannot create a stream: CUDA_ERROR_ILLEGAL_ADDRESS".into());
        assert_eq!(exit_status(&stopped), EXIT_CANNOT_RUN);
        let mut failed = stopped.clone();
        failed.checks[0].failure = Some(Failure {
            message: "reading back allocation #3 failed".into(),
            seed: 1,
            case: 5,
            step: 51,
            ops: vec!["memalloc(1 B)".into()],
            regression: None,
            replay: String::new(),
            rerun: String::new(),
        });
        assert_eq!(exit_status(&failed), EXIT_FAIL);
        failed.error = None;
        assert_eq!(exit_status(&failed), EXIT_FAIL);
    }
}
