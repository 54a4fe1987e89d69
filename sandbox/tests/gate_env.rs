//! The gate as `EMM_MEMORY_MANAGER` and the C ABI meet it: the registry's loader, with the
//! policy taken from the environment (`EMM_VERDICT_DIR`, `EMM_GATE_MIN_DEPTH`, `EMM_GATE`).
//! One test in its own binary, because it sets process-wide variables.

#[path = "sandbox/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::SystemTime;

use common::plugin_path;
use emm_core::contract::selection::{create_manager, current_factory_with_env};
use emm_core::contract::ManagerTarget;
use emm_core::{DeviceId, Driver};
use emm_sandbox::abi::ABI_VERSION;
use emm_sandbox::gate::{
    utc_date, ContentHash, Depth, Settings, Subject, VerdictRecord, VerdictStore, GATE_VAR,
    KEY_VAR, MIN_DEPTH_VAR, RECORD_FORMAT, VERDICT_DIR_VAR,
};
use emm_sandbox::PluginLimits;
use emm_sim::{SimConfig, SimDriver};

fn target(hardware: bool) -> ManagerTarget {
    let config = SimConfig::new(3).present_as_hardware(hardware);
    let driver: Arc<dyn Driver> = Arc::new(SimDriver::new(config).expect("sim config"));
    ManagerTarget {
        context: driver.primary_context(DeviceId(0)).expect("context"),
        device: DeviceId(0),
        driver,
    }
}

#[test]
fn the_registry_loader_is_gated_by_the_environment() {
    let dir = std::env::temp_dir().join(format!("emm-gate-env-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var(VERDICT_DIR_VAR, &dir);
    let key = dir.with_extension("key");
    let _ = std::fs::remove_file(&key);
    std::env::set_var(KEY_VAR, &key);
    std::env::set_var(MIN_DEPTH_VAR, "4x8");
    std::env::remove_var(GATE_VAR);
    emm_sandbox::install_loader();

    let path = plugin_path("first_fit");
    let factory = current_factory_with_env(Some(&path.to_string_lossy())).expect("loads");
    // The simulator needs no verdict.
    assert!(create_manager(&*factory, &target(false)).is_ok());
    // Hardware does, and the refusal says what to run.
    let e = create_manager(&*factory, &target(true))
        .err()
        .expect("refused");
    let command = format!(
        "emm check {} --verdicts {} --cases 4 --ops 8",
        path.display(),
        dir.display()
    );
    assert!(e.to_string().contains(&command), "{e}");

    // Once the check is recorded, the same factory loads it (a refusal is not kept).
    let hash = ContentHash::of(&std::fs::read(&path).expect("read"));
    let record = VerdictRecord {
        format: RECORD_FORMAT,
        subject: Subject::wasm(hash),
        settings: Some(Settings::of(b"", &PluginLimits::default())),
        plugin: path.display().to_string(),
        abi_version: ABI_VERSION,
        suite: "emm-conformance test".into(),
        backend: "sim".into(),
        depth: Depth::new(4, 8),
        seed: 1,
        date: utc_date(SystemTime::now()),
        passed: true,
        error: None,
        checks: Vec::new(),
        mac: String::new(),
    };
    VerdictStore::new(&dir).save(&record).expect("saved");
    assert!(create_manager(&*factory, &target(true)).is_ok());

    // A bad setting refuses, naming the variable.
    std::env::set_var(GATE_VAR, "off");
    let buddy = plugin_path("buddy");
    let factory = current_factory_with_env(Some(&buddy.to_string_lossy())).expect("loads");
    let e = create_manager(&*factory, &target(true))
        .err()
        .expect("refused");
    assert!(
        e.to_string().contains(r#"EMM_GATE = "off": give enforce"#),
        "{e}"
    );
    // The quiet override loads an unchecked plugin (with a warning on stderr).
    std::env::set_var(GATE_VAR, "warn");
    assert!(create_manager(&*factory, &target(true)).is_ok());
    std::env::remove_var(GATE_VAR);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&key);
}
