//! The checks that emm installs the way its users install things, run by `cargo xtask test`
//! (and alone by `cargo xtask install-checks`): the Python package installs into a fresh
//! virtual environment and passes its tests there, every library crate packages for crates.io,
//! and a downstream crate picks cudarc's CUDA version and linking mode through emm-cuda.

use std::path::Path;
use std::time::Instant;

use crate::{cargo, run, workspace_root, Failure};

/// Every check here, in order: the Python package, the crates, the downstream cudarc build.
pub(crate) fn install_checks() -> Result<(), Failure> {
    python_wheel()?;
    package_crates()?;
    downstream_cudarc()
}

/// `cargo package` of every published crate, without building them (`--no-verify`: the tests
/// already built them). The crates are packaged together, so those not yet on crates.io
/// resolve to each other; emm-plugin-sdk lives in the plugins' workspace.
pub(crate) fn package_crates() -> Result<(), Failure> {
    let start = Instant::now();
    run(
        "package",
        cargo([
            "package",
            "--workspace",
            "--exclude",
            "xtask",
            "--no-verify",
            "--quiet",
            "--allow-dirty",
        ]),
    )?;
    run(
        "package plugin sdk",
        cargo([
            "package",
            "--manifest-path",
            "plugins/Cargo.toml",
            "-p",
            "emm-plugin-sdk",
            "--no-verify",
            "--quiet",
            "--allow-dirty",
        ]),
    )?;
    eprintln!("==> package: {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}

/// The emm-cuda feature sets `xtask/downstream` is checked with: a CUDA 12 version with each
/// linking mode that checks without a CUDA toolkit (`static-linking` wants the toolkit's
/// static libraries even to check). The workspace's own build covers the defaults (CUDA 13.0,
/// dynamic loading).
const DOWNSTREAM_FEATURES: [&str; 2] = [
    "emm-cuda/cuda-12040,emm-cuda/dynamic-linking",
    "emm-cuda/cuda-12040,emm-cuda/dynamic-loading",
];

/// `cargo check` of `xtask/downstream` with each of [`DOWNSTREAM_FEATURES`], in its own target
/// directory (`target/downstream`), with the workspace's lock file so it resolves to the same
/// versions.
pub(crate) fn downstream_cudarc() -> Result<(), Failure> {
    let start = Instant::now();
    let root = workspace_root();
    let crate_dir = Path::new("xtask").join("downstream");
    let lock = root.join(&crate_dir).join("Cargo.lock");
    std::fs::copy(root.join("Cargo.lock"), &lock).map_err(|e| Failure {
        step: "downstream cudarc".to_owned(),
        reason: format!("cannot copy the lock file to {}: {e}", lock.display()),
    })?;
    let manifest = crate_dir.join("Cargo.toml");
    let target_dir = Path::new("target").join("downstream");
    for features in DOWNSTREAM_FEATURES {
        let mut cmd = cargo(["check", "--quiet", "--features", features]);
        cmd.arg("--manifest-path")
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target_dir);
        run(&format!("downstream cudarc ({features})"), cmd)?;
    }
    eprintln!(
        "==> downstream cudarc: {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The fresh virtual environment [`python_wheel`] installs the package into.
const WHEEL_VENV: &str = "target/wheel-venv";

/// Builds the Python package (`pip install ./capi`: setuptools-rust, libemm.so inside) into a
/// fresh virtual environment and runs `capi/python/tests` against the installed package on the
/// simulated GPU. The library builds in the dev profile, over what the workspace tests built
/// (a user's `pip install` builds release). Skipped, saying so, without `python3`.
pub(crate) fn python_wheel() -> Result<(), Failure> {
    let start = Instant::now();
    let root = workspace_root();
    let has_python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_python {
        eprintln!("==> python wheel: skipped, python3 is not installed");
        return Ok(());
    }
    // A fresh venv, and no setuptools build folder left from an earlier build: its files
    // would go into the wheel beside the new ones.
    let venv = root.join(WHEEL_VENV);
    for dir in [venv.clone(), root.join("capi").join("build")] {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| Failure {
                step: "python wheel".to_owned(),
                reason: format!("cannot remove the old {}: {e}", dir.display()),
            })?;
        }
    }
    let mut make_venv = std::process::Command::new("python3");
    make_venv.args(["-m", "venv"]).arg(&venv);
    run("python wheel: venv", make_venv)?;
    let python = venv.join("bin").join("python");
    let mut install = std::process::Command::new(&python);
    install
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "./capi",
        ])
        .env("SETUPTOOLS_RUST_CARGO_PROFILE", "dev");
    run("python wheel: pip install ./capi", install)?;
    let mut tests = std::process::Command::new(&python);
    tests
        .args(["-m", "unittest", "discover", "-s", "capi/python/tests"])
        .env("EMM_TEST_INSTALLED", "1")
        .env("EMM_BACKEND", "sim")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("EMM_LIBRARY")
        .env_remove("EMM_MEMORY_MANAGER");
    run("python wheel: tests on the installed package", tests)?;
    eprintln!("==> python wheel: {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}
