//! The checks that emm installs the way its users install things, run by `cargo xtask test`
//! (and alone by `cargo xtask install-checks`): the Python package installs into a fresh
//! virtual environment and passes its tests there, every library crate packages for crates.io,
//! and a downstream crate picks cudarc's CUDA version and linking mode through emm-cuda.

use std::path::Path;
use std::time::Instant;

use crate::lints::Lints;
use crate::{cargo, run, workspace_root, Failure};

/// Every check here, in order: the Python package, the crates, the downstream cudarc build.
/// `lints`: the environment the workspace was built with, so the wheel's build of `emm-capi`
/// reuses its crates.
pub(crate) fn install_checks(lints: Option<&Lints>) -> Result<(), Failure> {
    python_wheel(lints)?;
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
/// linking mode. The workspace's own build covers the defaults (CUDA 13.0, dynamic loading).
const DOWNSTREAM_FEATURES: [&str; 3] = [
    "emm-cuda/cuda-12040,emm-cuda/dynamic-linking",
    "emm-cuda/cuda-12040,emm-cuda/dynamic-loading",
    "emm-cuda/cuda-12040,emm-cuda/static-linking",
];

/// `cargo check` of `xtask/downstream` with each of [`DOWNSTREAM_FEATURES`], in its own target
/// directory (`target/downstream`), with the workspace's lock file so it resolves to the same
/// versions; then [`forwarded_features`].
///
/// `static-linking` makes rustc bundle `libstdc++.a` and the toolkit's `libcudart_static.a`
/// into cudarc's rlib even to check it. Without a CUDA toolkit, the check points cudarc at a
/// stand-in toolkit (`target/downstream/cuda`): the compiler's own `libstdc++.a` and an empty
/// `libcudart_static.a`. That proves emm-cuda compiles in that mode; linking a binary still
/// needs the real toolkit. With `CUDA_HOME` or `CUDA_PATH` set, the real one is used.
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
        let step = format!("downstream cudarc ({features})");
        let mut cmd = cargo(["check", "--quiet", "--features", features]);
        cmd.arg("--manifest-path")
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target_dir);
        if features.ends_with("static-linking")
            && std::env::var_os("CUDA_HOME").is_none()
            && std::env::var_os("CUDA_PATH").is_none()
        {
            let toolkit =
                stand_in_toolkit(&root.join(&target_dir).join("cuda")).map_err(|reason| {
                    Failure {
                        step: step.clone(),
                        reason,
                    }
                })?;
            cmd.env("CUDA_HOME", toolkit);
        }
        run(&step, cmd)?;
    }
    forwarded_features()?;
    eprintln!(
        "==> downstream cudarc: {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Makes `dir/lib64` hold what cudarc's `static-linking` bundles when checked: the C++
/// compiler's `libstdc++.a` (asked of `c++ -print-file-name`) and an empty `libcudart_static.a`.
fn stand_in_toolkit(dir: &Path) -> Result<std::path::PathBuf, String> {
    let lib = dir.join("lib64");
    std::fs::create_dir_all(&lib).map_err(|e| format!("cannot create {}: {e}", lib.display()))?;
    let out = std::process::Command::new("c++")
        .arg("-print-file-name=libstdc++.a")
        .output()
        .map_err(|e| format!("cannot run `c++` to find libstdc++.a: {e}; install g++"))?;
    let stdcpp = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !stdcpp.is_absolute() || !stdcpp.is_file() {
        return Err(format!(
            "`c++ -print-file-name=libstdc++.a` found no static libstdc++ ({}); install libstdc++-dev",
            stdcpp.display()
        ));
    }
    let copy = lib.join("libstdc++.a");
    std::fs::copy(&stdcpp, &copy).map_err(|e| {
        format!(
            "cannot copy {} to {}: {e}",
            stdcpp.display(),
            copy.display()
        )
    })?;
    // An ar archive with no members: its 8-byte signature.
    let cudart = lib.join("libcudart_static.a");
    std::fs::write(&cudart, b"!<arch>\n")
        .map_err(|e| format!("cannot write {}: {e}", cudart.display()))?;
    Ok(dir.to_path_buf())
}

/// The CUDA version and linking mode a build of emm's artifacts (`emm-cli`, `emm-capi`) is
/// asked for are exactly what reaches cudarc: nothing in between turns emm-cuda's defaults
/// back on (cudarc refuses two versions or two linking modes). Read from `cargo tree`, which
/// resolves features without building.
fn forwarded_features() -> Result<(), Failure> {
    for package in ["emm-cli", "emm-capi"] {
        for (asked, unwanted) in [
            (
                ["cuda-12040", "dynamic-linking"],
                ["cuda-13000", "dynamic-loading"],
            ),
            (
                ["cuda-12040", "static-linking"],
                ["cuda-13000", "dynamic-loading"],
            ),
            (
                ["cuda-13000", "dynamic-loading"],
                ["cuda-12040", "dynamic-linking"],
            ),
        ] {
            let step = format!("forwarded features ({package}: {})", asked.join(", "));
            let mut cmd = cargo(["tree", "--quiet", "-p", package, "--no-default-features"]);
            let mut features = asked.join(",");
            if package == "emm-capi" {
                features.push_str(",wasm");
            }
            cmd.args(["--features", &features])
                .args(["-e", "features", "-i", "cudarc", "--prefix", "none"])
                .current_dir(workspace_root());
            let out = cmd.output().map_err(|e| Failure {
                step: step.clone(),
                reason: format!("cannot run cargo tree: {e}"),
            })?;
            let text = String::from_utf8_lossy(&out.stdout);
            let has = |f: &str| text.contains(&format!("cudarc feature \"{f}\""));
            if !out.status.success() || !asked.iter().all(|f| has(f)) {
                return Err(Failure {
                    step,
                    reason: format!(
                        "cudarc did not get {asked:?}: {}{}",
                        text.trim(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                });
            }
            if let Some(f) = unwanted.iter().find(|f| has(f)) {
                return Err(Failure {
                    step,
                    reason: format!(
                        "cudarc also got `{f}`: a dependency of {package} turns emm-cuda's defaults on"
                    ),
                });
            }
        }
    }
    eprintln!("==> forwarded features: emm-cli and emm-capi pass cudarc's choices through");
    Ok(())
}

/// The fresh virtual environment [`python_wheel`] installs the package into.
const WHEEL_VENV: &str = "target/wheel-venv";

/// Builds the Python package (`pip install ./capi`: setuptools-rust, libemm.so inside) into a
/// fresh virtual environment and runs `capi/python/tests` against the installed package on the
/// simulated GPU. The library builds in the dev profile, over what the workspace tests built
/// (a user's `pip install` builds release). Skipped, saying so, without `python3`.
pub(crate) fn python_wheel(lints: Option<&Lints>) -> Result<(), Failure> {
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
    let install = Lints::on(lints, install);
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
