//! The gate end to end on the simulated GPU: `emm check` records verdicts in a store of its
//! own per test, and the suite then runs the plugin on simulated machines that present
//! themselves as hardware (the stubbed device check), which go through the gate as a real
//! GPU does. Small depths (4x8) and a matching minimum keep it to seconds.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};

use emm_cli::{self as cli, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};
use emm_conformance::{check, Config, SimBackend};
use emm_sandbox::gate::{
    ContentHash, Depth, GateMode, GatePolicy, Subject, VerdictRecord, VerdictStore,
};
use emm_sandbox::{load_plugin, PluginLimits};

const MIN: Depth = Depth::new(4, 8);

fn emm(args: &str) -> i32 {
    key_of_this_process();
    cli::main(args.split_whitespace().map(String::from).collect())
}

/// The gate's key for this test process, in a temporary folder rather than the user's
/// (`EMM_GATE_KEY`; every test sets the same value, once, before anything reads it).
fn key_of_this_process() {
    static KEY: Once = Once::new();
    KEY.call_once(|| {
        let key =
            std::env::temp_dir().join(format!("emm-conformance-gate-{}.key", std::process::id()));
        let _ = std::fs::remove_file(&key);
        std::env::set_var(emm_sandbox::gate::KEY_VAR, key);
    });
}

/// A fresh folder for test `name`, writable by its owner only.
fn folder(name: &str) -> PathBuf {
    key_of_this_process();
    let dir = std::env::temp_dir().join(format!(
        "emm-conformance-gate-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn example(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: build the example plugins with `cargo xtask wasm`",
        path.display()
    );
    path
}

/// A known-bad plugin: the sandbox's hostile fixture as a plain bump allocator, which never
/// frees, so `reset` frees nothing and freed memory is never served again.
fn bump_allocator(dir: &Path) -> PathBuf {
    let wat = include_str!("../../../sandbox/tests/fixtures/hostile.wat")
        .replace("HOSTILE", "(nop)")
        .replace("NTH", "0")
        .replace("VERSION", "1")
        .replace("INIT_STATUS", "0")
        .replace("FREE_STATUS", "0");
    wasm_file(dir, "bump", &wat)
}

/// The WAT text `wat` compiled into `dir/name.wasm`.
fn wasm_file(dir: &Path, name: &str, wat: &str) -> PathBuf {
    let path = dir.join(format!("{name}.wasm"));
    std::fs::write(&path, emm_sandbox::module::wat_to_wasm(wat).unwrap()).unwrap();
    path
}

/// `emm check path` at the test depth, recording into `store`.
fn emm_check(path: &Path, store: &Path) -> i32 {
    emm(&format!(
        "check {} --cases 4 --ops 8 --seed 3 --no-regressions --json --verdicts {}",
        path.display(),
        store.display()
    ))
}

/// The one record of the plugin at `path` in `store`, verified.
fn only_record(store: &Path, path: &Path) -> VerdictRecord {
    let hash = ContentHash::of(&std::fs::read(path).unwrap());
    let mut records = VerdictStore::new(store)
        .records(&Subject::wasm(hash))
        .unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    records.remove(0).record.unwrap()
}

/// The suite on simulated machines that present themselves as hardware, with the plugin at
/// `path` loaded through the sandbox's one way in and gated by `store` in `mode`.
fn on_hardware(path: &Path, store: &Path, mode: GateMode) -> emm_conformance::Report {
    let gate = GatePolicy::new(VerdictStore::new(store))
        .min_depth(MIN)
        .mode(mode);
    let factory = load_plugin(path, PluginLimits::default())
        .unwrap()
        .with_gate(gate);
    let hardware = Arc::new(SimBackend::new().configure(|c| c.present_as_hardware(true)));
    check(&factory, &Config::new(5).depth(4, 8).backend(hardware))
}

#[test]
fn a_checked_plugin_records_its_verdict_and_runs_on_hardware() {
    let dir = folder("pass");
    let path = example("first_fit");
    assert_eq!(emm_check(&path, &dir), EXIT_PASS);
    let r = only_record(&dir, &path);
    assert!(r.passed && r.error.is_none(), "{r:?}");
    assert_eq!((r.depth, r.seed, r.backend.as_str()), (MIN, 3, "sim"));
    assert_eq!(r.abi_version, emm_sandbox::abi::ABI_VERSION);
    assert_eq!(r.suite, emm_conformance::verdict::SUITE);
    assert_eq!(r.checks.len(), emm_conformance::CHECKS.len());
    // Stream order cannot be exercised through the sandbox (no stream-ordered allocation):
    // it is recorded as not passed, and nothing failed.
    assert!(r
        .checks
        .iter()
        .all(|c| c.failure.is_none() && (c.passed || c.name == "stream_ordered_reuse")));
    let report = on_hardware(&path, &dir, GateMode::Enforce);
    assert!(
        report.error.is_none() && report.passed,
        "{}",
        report.to_table(false)
    );
}

#[test]
fn a_failing_plugin_records_its_failure_and_never_runs_on_hardware() {
    let dir = folder("fail");
    let path = bump_allocator(&dir);
    let store = dir.join("verdicts");
    assert_eq!(emm_check(&path, &store), EXIT_FAIL);
    let r = only_record(&store, &path);
    assert!(!r.passed);
    assert!(
        r.failed_checks().contains(&"reset_frees_everything"),
        "{r:?}"
    );
    for mode in [GateMode::Enforce, GateMode::Warn] {
        let report = on_hardware(&path, &store, mode);
        let e = report.error.clone().unwrap_or_default();
        assert!(
            e.contains("FAILED the EMM contract"),
            "{mode:?}: {}",
            report.to_table(false)
        );
        assert!(
            e.contains("reset_frees_everything") && e.contains("seed 3"),
            "{e}"
        );
    }
}

#[test]
fn an_unchecked_plugin_is_refused_on_hardware_with_the_command_to_run() {
    let dir = folder("unchecked");
    let path = example("buddy");
    let report = on_hardware(&path, &dir, GateMode::Enforce);
    let e = report.error.clone().unwrap_or_default();
    let command = format!(
        "run `emm check {} --verdicts {} --cases 4 --ops 8` first",
        path.display(),
        dir.display()
    );
    assert!(e.contains("has no verdict") && e.contains(&command), "{e}");
    assert!(!report.passed);
}

#[test]
fn a_plugin_changed_by_one_byte_is_checked_again_under_its_new_hash() {
    let dir = folder("changed");
    let original = example("slab");
    let mut bytes = std::fs::read(&original).unwrap();
    // The module ends with its data section: the last byte is data, the module stays valid.
    if let Some(b) = bytes.last_mut() {
        *b ^= 0x20;
    }
    let changed = dir.join("slab-changed.wasm");
    std::fs::write(&changed, &bytes).unwrap();
    let store = dir.join("verdicts");
    assert_eq!(emm_check(&original, &store), EXIT_PASS);
    let e = on_hardware(&changed, &store, GateMode::Enforce).error;
    assert!(e.is_some_and(|e| e.contains("has no verdict")));
    // Checked again, it has a verdict of its own beside the original's.
    assert_eq!(emm_check(&changed, &store), EXIT_PASS);
    assert!(only_record(&store, &changed).passed);
    let folders = std::fs::read_dir(&store).unwrap().count();
    assert_eq!(folders, 2, "one folder per hash");
}

#[test]
fn built_in_managers_are_recorded_by_name_and_version_and_no_verdict_records_nothing() {
    let dir = folder("builtin");
    let args = format!(
        "check default --cases 2 --ops 4 --seed 1 --no-regressions --json --verdicts {}",
        dir.display()
    );
    assert_eq!(emm(&args), EXIT_PASS);
    let subject = Subject::builtin("default", env!("CARGO_PKG_VERSION"));
    let records = VerdictStore::new(&dir).records(&subject).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].path,
        dir.join(subject.key()).join("2x4-seed1.json")
    );
    assert!(records[0].record.as_ref().is_ok_and(|r| r.passed));
    let quiet = folder("no-verdict");
    let args = format!(
        "check default --cases 2 --ops 4 --no-regressions --json --no-verdict --verdicts {}",
        quiet.display()
    );
    assert_eq!(emm(&args), EXIT_PASS);
    assert_eq!(std::fs::read_dir(&quiet).unwrap().count(), 0);
    // Not asked for (no --verdicts): a built-in manager's check writes no verdict file, not
    // even into the store the environment names.
    let unasked = folder("unasked");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_emm"))
        .args([
            "check",
            "default",
            "--cases",
            "2",
            "--ops",
            "4",
            "--no-regressions",
            "--json",
        ])
        .env("EMM_VERDICT_DIR", &unasked)
        .output()
        .expect("run the emm binary");
    assert!(out.status.success(), "{out:?}");
    let files = std::fs::read_dir(&unasked).map_or(0, |d| d.count());
    assert_eq!(files, 0, "{}", String::from_utf8_lossy(&out.stderr));
}

// ---- The gate's holes ----

/// `--cases` and `--ops` are bounded (a usage error, exit 2, past the bound; no overflow, no
/// run of nothing recorded as a pass); the recorded depth is the number of cases that ran.
#[test]
fn cases_and_ops_are_bounded_and_the_recorded_depth_is_what_ran() {
    let dir = folder("bounds");
    let path = example("first_fit");
    for flags in [
        "--cases 18446744073709551608",
        "--cases 0",
        "--cases 1000001",
        "--cases -1",
        "--ops 4294967295",
        "--ops 0",
        "--ops 10001",
    ] {
        let args = format!(
            "check {} {flags} --seed 3 --no-regressions --json --verdicts {}",
            path.display(),
            dir.display()
        );
        assert_eq!(emm(&args), EXIT_CANNOT_RUN, "{flags}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing recorded"
    );
    let args = format!(
        "check {} --cases 3 --ops 4 --seed 3 --no-regressions --json --verdicts {}",
        path.display(),
        dir.display()
    );
    assert_eq!(emm(&args), EXIT_PASS);
    let r = only_record(&dir, &path);
    assert_eq!((r.depth, r.passed), (Depth::new(3, 4), true));
}

/// A rerun at the same depth and seed that passes (as a nondeterministic failure's rerun
/// may) keeps the failing record: the counterexample is not erased, and the gate refuses.
#[test]
fn a_rerun_that_passes_keeps_the_failing_record() {
    let dir = folder("rerun");
    let path = example("first_fit");
    let hash = ContentHash::of(&std::fs::read(&path).unwrap());
    let module = load_plugin(&path, PluginLimits::default()).unwrap();
    let failing = VerdictRecord {
        format: emm_sandbox::gate::RECORD_FORMAT,
        subject: Subject::wasm(hash),
        settings: Some(module.module().settings()),
        plugin: path.display().to_string(),
        abi_version: emm_sandbox::abi::ABI_VERSION,
        suite: emm_conformance::verdict::SUITE.to_string(),
        backend: "sim".into(),
        depth: MIN,
        seed: 3,
        date: emm_sandbox::gate::utc_date(std::time::SystemTime::now()),
        passed: false,
        error: None,
        checks: vec![emm_sandbox::gate::CheckVerdict {
            name: "memalloc_never_overlaps".into(),
            passed: false,
            skipped: false,
            failure: Some("two live allocations overlap (once in a while)".into()),
        }],
        mac: String::new(),
    };
    let at = VerdictStore::new(&dir).save(&failing).unwrap();
    let before = std::fs::read(&at).unwrap();
    assert_eq!(emm_check(&path, &dir), EXIT_PASS, "the rerun passes");
    assert_eq!(
        std::fs::read(&at).unwrap(),
        before,
        "the failing record is intact"
    );
    let e = on_hardware(&path, &dir, GateMode::Enforce).error;
    assert!(
        e.as_deref()
            .is_some_and(|e| e.contains("FAILED the EMM contract")),
        "{e:?}"
    );
}

/// A text file named `.wasm` cannot be loaded: exit 2, and nothing is recorded.
#[test]
fn a_text_file_named_wasm_cannot_be_loaded() {
    let dir = folder("text");
    let path = dir.join("text.wasm");
    std::fs::write(&path, "(module)").unwrap();
    let store = dir.join("verdicts");
    assert_eq!(emm_check(&path, &store), EXIT_CANNOT_RUN);
    assert!(!store.exists());
}
