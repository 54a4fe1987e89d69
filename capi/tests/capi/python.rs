//! Runs the Python package's tests (`capi/python/tests`, stand-ins for numba-cuda, CuPy and
//! PyTorch) over the cdylib on the simulated GPU. Skips, saying so, when `python3` is absent.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The cdylib cargo built beside this test (`target/<profile>/libemm.so`).
fn cdylib() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [deps.join("libemm.so"), deps.parent()?.join("libemm.so")]
        .into_iter()
        .find(|p| p.is_file())
}

#[test]
fn the_python_package_works_over_the_simulated_gpu() {
    let has_python = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_python {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let Some(lib) = cdylib() else {
        panic!("libemm.so was not built beside the test executable");
    };
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/tests");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s"])
        .arg(&tests)
        .env("EMM_LIBRARY", &lib)
        .env("EMM_BACKEND", "sim")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("EMM_MEMORY_MANAGER")
        // The C ABI's tests in this process set the simulator's shape for their own runtime;
        // the Python tests start from the simulator's defaults.
        .env_remove("EMM_SIM_DEVICES")
        .env_remove("EMM_SIM_MEMORY")
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "the Python tests failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Python package states the crate's version (`emm.__version__`, and through it the
/// wheel's, which pyproject.toml reads from the same file).
#[test]
fn the_python_package_has_the_crate_version() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/emm/_version.py");
    let text = std::fs::read_to_string(&file).expect("python/emm/_version.py is readable");
    let expected = format!("__version__ = \"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(
        text.lines().any(|l| l.trim() == expected),
        "{} should hold the line `{expected}`",
        file.display()
    );
}
