//! The verdict store under pressure: two `emm check` runs saving verdicts for the same plugin
//! at once lose and corrupt nothing (and a failing record is never replaced), a gate key owned
//! by another user is refused, and a record of an older format is refused with what to do.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::SystemTime;

use emm_sandbox::abi::ABI_VERSION;
use emm_sandbox::gate::{
    utc_date, CheckVerdict, ContentHash, Depth, GateError, GateKey, Settings, Subject,
    VerdictRecord, VerdictStore, RECORD_FORMAT,
};
use emm_sandbox::PluginLimits;

/// An empty store of its own for test `name`, with a key of its own beside it.
fn store(name: &str) -> VerdictStore {
    let dir = std::env::temp_dir().join(format!("emm-gate-safety-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let key = dir.with_extension("key");
    let _ = std::fs::remove_file(&key);
    VerdictStore::new(dir).key_file(key)
}

fn hash() -> ContentHash {
    ContentHash::of(b"the bytes of a plugin")
}

/// A record of the plugin, run with `seed` (records of one depth and seed share a file name).
fn record(seed: u64, passed: bool) -> VerdictRecord {
    VerdictRecord {
        format: RECORD_FORMAT,
        subject: Subject::wasm(hash()),
        settings: Some(Settings::of(b"", &PluginLimits::default())),
        plugin: "plugin.wasm".into(),
        abi_version: ABI_VERSION,
        suite: "emm-conformance test".into(),
        backend: "sim".into(),
        depth: Depth::new(4, 8),
        seed,
        date: utc_date(SystemTime::now()),
        passed,
        error: None,
        checks: vec![CheckVerdict {
            name: "memalloc_never_overlaps".into(),
            passed,
            skipped: false,
            failure: (!passed).then(|| "two live allocations overlap".into()),
        }],
        mac: String::new(),
    }
}

#[test]
fn concurrent_saves_of_the_same_plugin_lose_and_corrupt_nothing() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 20;
    let s = store("race");
    // Make the key first: two runs creating it at once is `GateKey::load_or_create`'s case.
    GateKey::load_or_create(&s.key_path().unwrap()).unwrap();
    let start = Arc::new(Barrier::new(THREADS));
    let saved: Vec<Vec<(PathBuf, bool)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (s, start) = (s.clone(), Arc::clone(&start));
                scope.spawn(move || {
                    start.wait();
                    (0..ROUNDS)
                        .map(|round| {
                            // Every run records the same seed; one thread's runs fail.
                            let passed = t != 3 || round % 2 == 1;
                            let at = s
                                .save(&record(1, passed))
                                .unwrap_or_else(|e| panic!("thread {t} round {round}: {e}"));
                            (at, passed)
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let records = s.records(&Subject::wasm(hash())).unwrap();
    for r in &records {
        let ok = r.record.as_ref();
        assert!(ok.is_ok(), "{}: {:?}", r.path.display(), r.record);
    }
    let failing: Vec<_> = records
        .iter()
        .filter(|r| r.record.as_ref().is_ok_and(|v| !v.passed))
        .collect();
    assert!(!failing.is_empty(), "the failing verdicts were lost");
    // Every path a failing save returned still holds a failing record.
    for (path, passed) in saved.iter().flatten() {
        if !passed {
            let r = records.iter().find(|r| &r.path == path);
            let r = r.unwrap_or_else(|| panic!("{} is gone", path.display()));
            assert!(
                r.record.as_ref().is_ok_and(|v| !v.passed),
                "the failure at {} was replaced",
                path.display()
            );
        }
    }
    let folder = records[0].path.parent().unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[cfg(unix)]
#[test]
fn a_key_file_owned_by_another_user_is_refused() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let s = store("owner");
    let path = s.key_path().unwrap();
    GateKey::load_or_create(&path).unwrap();
    // Group-readable: refused with the mode.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = GateKey::load(&path).unwrap_err().to_string();
    assert!(e.contains("mode 0640") && e.contains("chmod 600"), "{e}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(GateKey::load(&path).unwrap().is_some());
    // Owned by someone else: only a superuser can give a file away, so only one tests it.
    let me = std::fs::metadata("/proc/self").unwrap().uid();
    if me != 0 {
        eprintln!("not run as root: the key cannot be given to another user here");
        return;
    }
    let other = 4242;
    std::os::unix::fs::chown(&path, Some(other), None).unwrap();
    let e = GateKey::load(&path).unwrap_err();
    assert!(matches!(e, GateError::Store { .. }), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("belongs to user 4242") && e.contains("delete it"),
        "{e}"
    );
}

#[test]
fn a_record_of_an_older_format_says_to_check_again() {
    let s = store("old");
    let at = s.save(&record(5, true)).unwrap();
    // What an older emm wrote: format 1, without this format's fields.
    std::fs::write(
        &at,
        "{\"format\": 1, \"plugin\": \"plugin.wasm\", \"passed\": true}\n",
    )
    .unwrap();
    let records = s.records(&Subject::wasm(hash())).unwrap();
    let e = records[0].record.as_ref().unwrap_err();
    assert!(
        e.contains("format 1") && e.contains("older emm") && e.contains("re-run `emm check"),
        "{e}"
    );
}
