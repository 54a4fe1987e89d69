//! Failures persist as regression files, and a replay reproduces the same verdict.

use crate::zoo;

use std::path::PathBuf;

use emm_conformance::replay::load;
use emm_conformance::runner::replay;
use emm_conformance::{check, CheckId, Config, SimBackend};
use emm_core::managers::DefaultManager;
use zoo::{Bug, ZooFactory};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("emm-conformance-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_regression_file_replays_to_the_same_verdict_and_passes_once_fixed() {
    let dir = scratch("replay");
    let config = Config::new(99).depth(16, 24).regressions(&dir);
    let report = check(&ZooFactory(Bug::WrongIpcOffset), &config);
    let failed = report
        .result(CheckId::IpcHandleAddressesSameBytes)
        .and_then(|c| c.failure.clone())
        .expect("the wrong offset is caught");
    let file = PathBuf::from(failed.regression.as_deref().expect("written to a file"));
    assert!(file.starts_with(&dir), "{file:?}");
    assert!(
        failed
            .replay
            .starts_with("emm check zoo --backend sim --replay "),
        "{}",
        failed.replay
    );

    let r = load(&file).unwrap();
    assert_eq!(r.check, "ipc_handle_addresses_same_bytes");
    assert_eq!(r.seed, 99);
    assert_eq!(r.ops.len(), failed.ops.len());
    let backend = SimBackend::new();
    for _ in 0..3 {
        let v = replay(&ZooFactory(Bug::WrongIpcOffset), &backend, &r).unwrap();
        assert!(v.reproduced(), "{v:?}");
        let f = v.finding.unwrap();
        assert_eq!((f.step, f.message.as_str()), (r.step, r.message.as_str()));
    }
    // The same case against a correct manager: the verdict is a pass.
    let v = replay(&ZooFactory(Bug::None), &backend, &r).unwrap();
    assert!(!v.reproduced() && v.finding.is_none(), "{v:?}");
    let v = replay(&*DefaultManager::factory(), &backend, &r).unwrap();
    assert!(v.finding.is_none(), "{v:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_regression_file_is_a_clear_error() {
    let dir = scratch("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.json");
    std::fs::write(&file, "{\"plugin\": 3}").unwrap();
    let e = load(&file).unwrap_err();
    assert!(e.contains("is not a regression file of emm check"), "{e}");
    let e = load(&dir.join("missing.json")).unwrap_err();
    assert!(e.starts_with("cannot read the regression file"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let config = Config::new(5).depth(24, 24);
    let a = check(&ZooFactory(Bug::OverlappingAllocations), &config);
    let b = check(
        &ZooFactory(Bug::OverlappingAllocations),
        &config.clone().threads(1),
    );
    let strip = |mut r: emm_conformance::Report| {
        r.elapsed_ms = 0;
        r.checks
            .retain(|c| c.name != "concurrent_use_never_overlaps");
        r
    };
    assert_eq!(strip(a), strip(b));
}
