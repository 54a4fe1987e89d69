//! The gate on the simulated GPU: a machine that presents itself as hardware (the stubbed
//! device check) takes the path a real GPU takes. Each test has its own verdict store in a
//! temporary folder and a small minimum depth (4x8), so nothing here runs the suite.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use common::plugin_path;
use emm_core::contract::{ManagerFactory, ManagerTarget, MemoryManager};
use emm_core::{DeviceId, Driver};
use emm_sandbox::abi::ABI_VERSION;
use emm_sandbox::gate::{
    utc_date, Admission, CheckVerdict, ContentHash, Depth, GateError, GateKey, GateMode,
    GatePolicy, Settings, Subject, VerdictRecord, VerdictStore, RECORD_FORMAT,
};
use emm_sandbox::{PluginFactory, PluginLimits, PluginModule, SandboxError};
use emm_sim::{SimConfig, SimDriver};

const MIN: Depth = Depth::new(4, 8);

/// An empty store of its own for test `name`, with a key of its own beside it.
fn store(name: &str) -> VerdictStore {
    let dir = std::env::temp_dir().join(format!("emm-gate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let key = dir.with_extension("key");
    let _ = std::fs::remove_file(&key);
    VerdictStore::new(dir).key_file(key)
}

/// The key of store `s` (made on first use).
fn key_of(s: &VerdictStore) -> GateKey {
    GateKey::load_or_create(&s.key_path().unwrap()).unwrap()
}

fn policy(store: &VerdictStore, mode: GateMode) -> GatePolicy {
    GatePolicy::new(store.clone()).min_depth(MIN).mode(mode)
}

/// A context of a fresh simulated GPU; `hardware`: it presents itself as a real GPU.
fn target(hardware: bool) -> ManagerTarget {
    let config = SimConfig::new(7)
        .memory_per_device(1 << 30)
        .present_as_hardware(hardware);
    let driver: Arc<dyn Driver> = Arc::new(SimDriver::new(config).expect("sim config"));
    ManagerTarget {
        context: driver.primary_context(DeviceId(0)).expect("context"),
        device: DeviceId(0),
        driver,
    }
}

fn load(path: &Path, policy: GatePolicy) -> PluginFactory {
    PluginFactory::from_file(path, PluginLimits::default(), Vec::new())
        .unwrap_or_else(|e| panic!("{e}"))
        .with_gate(policy)
}

/// The first-fit example, compiled once for all the tests here (a debug build of the
/// compiler takes about a second per module).
fn first_fit(policy: GatePolicy) -> PluginFactory {
    static MODULE: OnceLock<Arc<PluginModule>> = OnceLock::new();
    let m = MODULE.get_or_init(|| {
        let path = plugin_path("first_fit");
        let m = PluginModule::from_file(&path, PluginLimits::default(), Vec::new());
        Arc::new(m.unwrap_or_else(|e| panic!("{e}")))
    });
    PluginFactory::new(Arc::clone(m)).with_gate(policy)
}

/// A record of the plugin hashing to `hash`, checked with no config and the default limits
/// (the store authenticates it when it saves it).
fn record(hash: ContentHash, depth: Depth, passed: bool) -> VerdictRecord {
    VerdictRecord {
        format: RECORD_FORMAT,
        subject: Subject::wasm(hash),
        settings: Some(Settings::of(b"", &PluginLimits::default())),
        plugin: "first_fit.wasm".into(),
        abi_version: ABI_VERSION,
        suite: "emm-conformance test".into(),
        backend: "sim".into(),
        depth,
        seed: 9,
        date: utc_date(SystemTime::now()),
        passed,
        error: None,
        checks: vec![CheckVerdict {
            name: "no_overlap".into(),
            passed,
            skipped: false,
            failure: (!passed).then(|| "two live allocations overlap".into()),
        }],
        mac: String::new(),
    }
}

fn hash_of(path: &Path) -> ContentHash {
    ContentHash::of(&std::fs::read(path).expect("read plugin"))
}

/// The gate's refusal when making a manager on hardware.
fn refusal(factory: &PluginFactory) -> GateError {
    match factory.create_plugin_manager(&target(true)) {
        Err(SandboxError::Refused(e)) => *e,
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("the gate let the plugin through"),
    }
}

/// Allocates once through a manager of `factory` on `target`.
fn allocates(factory: &PluginFactory, target: &ManagerTarget) {
    let m = factory
        .create_plugin_manager(target)
        .unwrap_or_else(|e| panic!("{e}"));
    m.initialize().unwrap_or_else(|e| panic!("{e}"));
    let p = m.memalloc(4096).unwrap_or_else(|e| panic!("{e}"));
    drop(p);
}

#[test]
fn the_simulator_never_needs_a_verdict() {
    let s = store("sim");
    let f = first_fit(policy(&s, GateMode::Enforce));
    allocates(&f, &target(false));
    assert!(!s.dir().exists(), "the gate was asked on the simulator");
}

#[test]
fn a_plugin_with_a_passing_verdict_loads_on_hardware_and_the_hash_is_taken_once() {
    let s = store("pass");
    let path = plugin_path("first_fit");
    let f = first_fit(policy(&s, GateMode::Enforce));
    // The module's hash is the file's: computed from the bytes it was compiled from.
    assert_eq!(f.module().content_hash(), Some(hash_of(&path)));
    let saved = s
        .save(&record(hash_of(&path), Depth::new(4, 8), true))
        .unwrap();
    allocates(&f, &target(true));
    assert_eq!(
        f.admit_hardware(),
        Ok(Admission::Verified {
            record: saved,
            depth: MIN
        })
    );
    // The trait path (EMM_MEMORY_MANAGER, the C ABI) is the same gate.
    assert!(ManagerFactory::create(&f, &target(true)).is_ok());
}

#[test]
fn an_unchecked_plugin_is_refused_with_the_command_to_run() {
    let s = store("unchecked");
    let path = plugin_path("first_fit");
    let f = load(&path, policy(&s, GateMode::Enforce));
    let e = refusal(&f);
    assert!(matches!(e, GateError::Unchecked { .. }), "{e:?}");
    let msg = e.to_string();
    let command = format!(
        "emm check {} --verdicts {} --cases 4 --ops 8",
        path.display(),
        s.dir().display()
    );
    assert!(msg.contains(&command), "{msg}");
    assert!(msg.contains(&hash_of(&path).to_hex()), "{msg}");
    // Through the trait, the refusal is an EmmError with the same message.
    let e = ManagerFactory::create(&f, &target(true))
        .err()
        .expect("refused");
    assert!(e.to_string().contains(&command), "{e}");
}

#[test]
fn a_shallow_verdict_is_not_enough() {
    let s = store("shallow");
    let path = plugin_path("first_fit");
    s.save(&record(hash_of(&path), Depth::new(2, 8), true))
        .unwrap();
    s.save(&record(hash_of(&path), Depth::new(64, 4), true))
        .unwrap();
    let e = refusal(&first_fit(policy(&s, GateMode::Enforce)));
    match &e {
        GateError::TooShallow { best, min, .. } => {
            assert_eq!((*best, *min), (Depth::new(64, 4), MIN));
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("only to depth 64x4"), "{e}");
}

#[test]
fn a_failed_plugin_is_refused_even_by_the_quiet_override() {
    let s = store("failed");
    let path = plugin_path("first_fit");
    // A failing run refuses the plugin even beside a passing one: a counterexample exists.
    s.save(&record(hash_of(&path), Depth::new(8, 8), true))
        .unwrap();
    let mut failing = record(hash_of(&path), MIN, false);
    failing.seed = 31;
    let at = s.save(&failing).unwrap();
    for mode in [GateMode::Enforce, GateMode::Warn] {
        let e = refusal(&first_fit(policy(&s, mode)));
        match &e {
            GateError::Failed { failed, record, .. } => {
                assert_eq!(
                    (failed.as_str(), record),
                    ("failed checks: no_overlap; seed 31", &at)
                );
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        let msg = e.to_string();
        assert!(msg.contains("FAILED the EMM contract"), "{msg}");
        assert!(msg.contains("failed checks: no_overlap"), "{msg}");
        assert!(msg.contains("EMM_GATE=warn does not change that"), "{msg}");
    }
    // The loud override loads it, and says that it is known to be wrong.
    let f = first_fit(policy(&s, GateMode::AllowFailed));
    allocates(&f, &target(true));
    let w = f.admit_hardware().unwrap();
    let w = w.warning().expect("a warning");
    assert!(w.starts_with("EMM_GATE=allow-failed"), "{w}");
    assert!(
        w.contains("KNOWN to break it") && w.contains("no_overlap"),
        "{w}"
    );
}

#[test]
fn a_plugin_changed_by_one_byte_needs_a_new_verdict() {
    let s = store("changed");
    let original = plugin_path("first_fit");
    s.save(&record(hash_of(&original), MIN, true)).unwrap();
    // The last byte of the file is data (the data section ends the module): flipping it
    // keeps the module valid.
    let mut bytes = std::fs::read(&original).unwrap();
    if let Some(b) = bytes.last_mut() {
        *b ^= 1;
    }
    let changed: PathBuf = s.dir().with_extension("first_fit.wasm");
    std::fs::write(&changed, &bytes).unwrap();
    let f = load(&changed, policy(&s, GateMode::Enforce));
    assert_ne!(f.module().content_hash(), Some(hash_of(&original)));
    let e = refusal(&f);
    assert!(matches!(e, GateError::Unchecked { .. }), "{e:?}");
    assert!(e.to_string().contains("changed by even one byte"), "{e}");
    // The original still loads.
    allocates(&first_fit(policy(&s, GateMode::Enforce)), &target(true));
    let _ = std::fs::remove_file(changed);
}

/// Rewrites the record at `path` with `edit` applied to its JSON text.
fn edit(path: &Path, edit: impl Fn(String) -> String) {
    let text = std::fs::read_to_string(path).unwrap();
    let edited = edit(text.clone());
    assert_ne!(edited, text, "the edit changed nothing");
    std::fs::write(path, edited).unwrap();
}

#[test]
fn a_record_edited_by_hand_is_refused() {
    let s = store("tampered");
    let path = plugin_path("first_fit");
    let hash = hash_of(&path);
    // The verdict edited: a failing record turned into a passing one.
    let at = s.save(&record(hash, MIN, false)).unwrap();
    edit(&at, |t| {
        t.replacen("\"passed\": false", "\"passed\": true", 2)
    });
    let e = refusal(&first_fit(policy(&s, GateMode::Enforce)));
    match &e {
        GateError::Tampered { record, reason, .. } => {
            assert_eq!(record, &at);
            assert!(reason.contains("does not authenticate"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string()
            .contains("Delete the record and run `emm check"),
        "{e}"
    );
    // The quiet override does not load it either: the edit may hide a failure.
    let e = refusal(&first_fit(policy(&s, GateMode::Warn)));
    assert!(matches!(e, GateError::Tampered { .. }), "{e:?}");
    std::fs::remove_file(&at).unwrap();

    // The hash edited: another plugin's passing record, moved to this plugin's folder.
    let other = record(ContentHash::of(b"another plugin"), MIN, true).sealed(&key_of(&s));
    let moved = s.path_of(&record(hash, MIN, true));
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::write(
        &moved,
        other.to_json().replace(&other_hex(&other), &hash.to_hex()),
    )
    .unwrap();
    let e = refusal(&first_fit(policy(&s, GateMode::Enforce)));
    assert!(matches!(e, GateError::Tampered { .. }), "{e:?}");
    // Moved without the edit, it is another plugin's record.
    std::fs::write(&moved, other.to_json()).unwrap();
    let e = refusal(&first_fit(policy(&s, GateMode::Enforce)));
    match e {
        GateError::Tampered { reason, .. } => {
            assert!(reason.contains("kept in the folder"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // The depth edited, and a record that is not JSON.
    let shallow = record(hash, Depth::new(1, 1), true).sealed(&key_of(&s));
    std::fs::write(&moved, shallow.to_json()).unwrap();
    edit(&moved, |t| t.replacen("\"cases\": 1", "\"cases\": 4096", 1));
    assert!(matches!(
        refusal(&first_fit(policy(&s, GateMode::Enforce))),
        GateError::Tampered { .. }
    ));
    std::fs::write(&moved, "{ not json").unwrap();
    assert!(matches!(
        refusal(&first_fit(policy(&s, GateMode::Enforce))),
        GateError::Tampered { .. }
    ));
}

fn other_hex(r: &VerdictRecord) -> String {
    match &r.subject {
        Subject::Wasm { sha256 } => sha256.clone(),
        Subject::Builtin { .. } => unreachable!("a wasm record"),
    }
}

#[test]
fn the_quiet_override_loads_an_unchecked_plugin_and_names_the_risk() {
    let s = store("warn");
    let f = first_fit(policy(&s, GateMode::Warn));
    allocates(&f, &target(true));
    let a = f.admit_hardware().unwrap();
    let w = a.warning().expect("a warning");
    assert!(
        w.starts_with("EMM_GATE=warn: plugin first_fit runs on a real GPU"),
        "{w}"
    );
    assert!(
        w.contains("has no verdict") && w.contains("corrupt the data"),
        "{w}"
    );
}

// ---- The gate's holes: one test each ----

/// Checking again at the same depth and seed (or following the replay line after a failure
/// that did not come back) must not erase the counterexample: a failing record is never
/// replaced, and the gate keeps refusing.
#[test]
fn a_failing_record_is_never_replaced_by_a_later_pass() {
    let s = store("kept");
    let path = plugin_path("first_fit");
    let failing = s.save(&record(hash_of(&path), MIN, false)).unwrap();
    let before = std::fs::read(&failing).unwrap();
    let passing = s.save(&record(hash_of(&path), MIN, true)).unwrap();
    assert_ne!(passing, failing, "the pass went beside the failure");
    assert_eq!(
        std::fs::read(&failing).unwrap(),
        before,
        "the failure is intact"
    );
    let e = refusal(&first_fit(policy(&s, GateMode::Enforce)));
    assert!(matches!(e, GateError::Failed { .. }), "{e:?}");
    // A passing record is replaced by a later run of the same depth and seed.
    let s = store("replaced");
    let first = s.save(&record(hash_of(&path), MIN, true)).unwrap();
    assert_eq!(s.save(&record(hash_of(&path), MIN, true)).unwrap(), first);
}

/// A verdict covers the bytes with the config and limits they were checked with.
#[test]
fn a_verdict_covers_the_config_and_the_limits_it_was_checked_with() {
    let s = store("settings");
    let path = plugin_path("first_fit");
    s.save(&record(hash_of(&path), MIN, true)).unwrap();
    let other_config =
        PluginFactory::from_file(&path, PluginLimits::default(), b"chunk_bytes=4096".to_vec())
            .unwrap()
            .with_gate(policy(&s, GateMode::Enforce));
    let e = refusal(&other_config);
    assert!(matches!(e, GateError::OtherSettings { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("EMM_PLUGIN_CONFIG=chunk_bytes=4096 emm check"),
        "{msg}"
    );
    let other_limits =
        PluginFactory::from_file(&path, PluginLimits::default().max_chunks(7), Vec::new())
            .unwrap()
            .with_gate(policy(&s, GateMode::Enforce));
    assert!(matches!(
        refusal(&other_limits),
        GateError::OtherSettings { .. }
    ));
    // Its own settings are admitted.
    allocates(&first_fit(policy(&s, GateMode::Enforce)), &target(true));
}

/// A failing record of the bytes refuses them whatever config it was checked with.
#[test]
fn a_failing_record_of_another_config_still_refuses() {
    let s = store("failed-config");
    let path = plugin_path("first_fit");
    s.save(&record(hash_of(&path), MIN, true)).unwrap();
    let mut failing = record(hash_of(&path), MIN, false);
    failing.settings = Some(Settings::of(b"chunk_bytes=1", &PluginLimits::default()));
    failing.seed = 2;
    s.save(&failing).unwrap();
    let e = refusal(&first_fit(policy(&s, GateMode::Enforce)));
    assert!(matches!(e, GateError::Failed { .. }), "{e:?}");
}

/// A record written by hand — even with the fields right and a MAC under some key — is
/// refused unless this user's key made it; without a key nothing is trusted.
#[test]
fn a_record_written_without_the_key_is_refused() {
    let s = store("forged");
    let path = plugin_path("first_fit");
    let _ = key_of(&s);
    let forged = record(hash_of(&path), MIN, true).sealed(&GateKey::from_bytes([7; 32]));
    let at = s.path_of(&forged);
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::fs::write(&at, forged.to_json()).unwrap();
    let e = refusal(&first_fit(policy(&s, GateMode::Enforce)));
    match &e {
        GateError::Tampered { reason, .. } => {
            assert!(reason.contains("does not authenticate"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // With no key file at all, no record is trusted.
    std::fs::remove_file(s.key_path().unwrap()).unwrap();
    let e = refusal(&first_fit(policy(&s, GateMode::Enforce)));
    match &e {
        GateError::Tampered { reason, .. } => assert!(reason.contains("no gate key"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

/// A store its group or others may write is refused, for reading and for writing.
#[cfg(unix)]
#[test]
fn a_store_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let s = store("open");
    let path = plugin_path("first_fit");
    s.save(&record(hash_of(&path), MIN, true)).unwrap();
    std::fs::set_permissions(s.dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = refusal(&first_fit(policy(&s, GateMode::Enforce)));
    assert!(matches!(e, GateError::Store { .. }), "{e:?}");
    assert!(e.to_string().contains("chmod go-w"), "{e}");
    let e = s.save(&record(hash_of(&path), MIN, true)).unwrap_err();
    assert!(e.to_string().contains("mode 0777"), "{e}");
    // The record's own folder too.
    std::fs::set_permissions(s.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let folder = s.dir().join(hash_of(&path).to_hex());
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o775)).unwrap();
    assert!(matches!(
        refusal(&first_fit(policy(&s, GateMode::Enforce))),
        GateError::Store { .. }
    ));
}

/// A link planted where the store writes never redirects the write.
#[cfg(unix)]
#[test]
fn saving_never_writes_through_a_planted_link() {
    let s = store("links");
    let path = plugin_path("first_fit");
    let r = record(hash_of(&path), MIN, true);
    let at = s.path_of(&r);
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    let victim = s.dir().with_extension("victim");
    std::fs::write(&victim, "precious").unwrap();
    // Where emm used to write its temporary file, and the record's own name.
    let tmp = at.with_extension(format!("json.tmp{}", std::process::id()));
    std::os::unix::fs::symlink(&victim, &tmp).unwrap();
    let saved = s.save(&r).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    std::fs::remove_file(&saved).unwrap();
    std::os::unix::fs::symlink(&victim, &at).unwrap();
    let saved = s.save(&r).unwrap();
    assert_ne!(
        saved, at,
        "the link is left alone, the record goes beside it"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let _ = std::fs::remove_file(&victim);
}

/// A record that is a FIFO is refused without blocking, one that is a link to `/dev/zero`
/// without reading it, and one longer than the cap without reading it all.
#[cfg(unix)]
#[test]
fn a_record_that_is_a_fifo_a_device_or_huge_is_refused_without_reading_it() {
    let s = store("special");
    let path = plugin_path("first_fit");
    let saved = s.save(&record(hash_of(&path), MIN, true)).unwrap();
    let folder = saved.parent().unwrap().to_path_buf();
    let fifo = folder.join("fifo.json");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    std::os::unix::fs::symlink("/dev/zero", folder.join("zero.json")).unwrap();
    std::fs::write(folder.join("huge.json"), vec![b' '; 2 << 20]).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let s2 = s.clone();
    let hash = hash_of(&path);
    std::thread::spawn(move || {
        let _ = tx.send(s2.records(&Subject::wasm(hash)));
    });
    let records = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("reading the store blocked")
        .unwrap();
    let reason = |name: &str| {
        records
            .iter()
            .find(|r| r.path.ends_with(name))
            .and_then(|r| r.record.clone().err())
            .unwrap_or_else(|| panic!("{name} was trusted: {records:?}"))
    };
    assert!(
        reason("fifo.json").contains("FIFO"),
        "{}",
        reason("fifo.json")
    );
    assert!(
        reason("zero.json").contains("cannot be read"),
        "{}",
        reason("zero.json")
    );
    assert!(
        reason("huge.json").contains("at least"),
        "{}",
        reason("huge.json")
    );
}

/// A run of no case proves nothing: its record never admits, whatever minimum is asked.
#[test]
fn a_run_of_no_cases_never_admits() {
    let s = store("empty");
    let path = plugin_path("first_fit");
    s.save(&record(hash_of(&path), Depth::new(0, 64), true))
        .unwrap();
    let p = GatePolicy::new(s.clone()).min_depth(Depth::new(0, 0));
    let e = refusal(&first_fit(p));
    assert!(matches!(e, GateError::Unchecked { .. }), "{e:?}");
    assert!(Depth::parse("0x0").is_err());
}
