//! `cargo xtask hardware [--bundle-only]`: builds a self-contained bundle for a GPU machine
//! (release `emm`, the hardware smoke tests, the wasm plugins, the peers' harness, a run
//! script and its report maker) into `target/hardware/`, and runs it when this machine has a
//! GPU. A GPU machine without a Rust toolchain runs `target/hardware/run.sh` itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{cargo, run, wasm, workspace_root, Failure};

/// The run script and the report maker, shipped in the bundle.
const RUN_SH: &str = include_str!("../hardware/run.sh");
const REPORT_PY: &str = include_str!("../hardware/report.py");
/// The peers driven by many threads: its build-and-run script and its source.
const THREADS_SH: &str = include_str!("../hardware/threads.sh");
const PEERS_THREADS_CU: &str = include_str!("../hardware/peers_threads.cu");

fn fail(reason: String) -> Failure {
    Failure {
        step: "hardware".to_owned(),
        reason,
    }
}

/// The test executable of `package`'s integration test `test`, built in release.
fn test_executable(package: &str, test: &str) -> Result<PathBuf, Failure> {
    let out = cargo([
        "test",
        "--release",
        "--no-run",
        "--message-format=json",
        "-p",
        package,
        "--test",
    ])
    .arg(test)
    .current_dir(workspace_root())
    .stderr(Stdio::inherit())
    .output()
    .map_err(|e| fail(format!("cargo test --no-run could not start: {e}")))?;
    if !out.status.success() {
        return Err(fail(format!("building the {package} test `{test}` failed")));
    }
    // Each line is a JSON message; the artifact of the test names its executable.
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| {
            l.contains("\"reason\":\"compiler-artifact\"")
                && l.contains(&format!("\"name\":\"{test}\""))
        })
        .find_map(|l| {
            let start = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            let end = l[start..].find('"')? + start;
            Some(PathBuf::from(&l[start..end]))
        })
        .ok_or_else(|| {
            fail(format!(
                "no executable found for the {package} test `{test}`"
            ))
        })
}

fn copy(from: &Path, to: &Path) -> Result<(), Failure> {
    std::fs::copy(from, to).map(|_| ()).map_err(|e| {
        fail(format!(
            "cannot copy {} to {}: {e}",
            from.display(),
            to.display()
        ))
    })
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(to)
        .map_err(|e| fail(format!("cannot create {}: {e}", to.display())))?;
    let entries = std::fs::read_dir(from)
        .map_err(|e| fail(format!("cannot read {}: {e}", from.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| fail(e.to_string()))?;
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &target)?;
        } else {
            copy(&path, &target)?;
        }
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text).map_err(|e| fail(format!("cannot write {}: {e}", path.display())))
}

/// Builds the bundle; returns its folder.
fn bundle() -> Result<PathBuf, Failure> {
    let root = workspace_root();
    wasm()?;
    run(
        "hardware: emm",
        cargo([
            "build",
            "--release",
            "-p",
            "emm-conformance",
            "--bin",
            "emm",
        ]),
    )?;
    eprintln!("==> hardware: smoke tests");
    let smoke = test_executable("emm-cuda", "hardware")?;
    let dir = root.join("target").join("hardware");
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["bin", "wasm"] {
        std::fs::create_dir_all(dir.join(sub))
            .map_err(|e| fail(format!("cannot create the bundle: {e}")))?;
    }
    copy(&root.join("target/release/emm"), &dir.join("bin/emm"))?;
    copy(&smoke, &dir.join("bin/emm-cuda-hardware"))?;
    copy_dir(&root.join("target/wasm"), &dir.join("wasm"))?;
    // The peers' harness sits beside the checkout (shared/peers); the bundle works without it.
    let peers = root.join("../shared/peers");
    if peers.is_dir() {
        copy_dir(&peers, &dir.join("peers"))?;
    } else {
        eprintln!(
            "==> hardware: {} not found; the bundle runs without the peers",
            peers.display()
        );
    }
    write(&dir.join("run.sh"), RUN_SH)?;
    write(&dir.join("report.py"), REPORT_PY)?;
    write(&dir.join("threads.sh"), THREADS_SH)?;
    write(&dir.join("peers_threads.cu"), PEERS_THREADS_CU)?;
    make_executable(&dir.join("run.sh"))?;
    eprintln!("==> hardware: bundle in {}", dir.display());
    Ok(dir)
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| fail(format!("cannot make {} executable: {e}", path.display())))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<(), Failure> {
    Ok(())
}

/// Whether this machine has an NVIDIA GPU the driver sees.
fn has_gpu() -> bool {
    Command::new("nvidia-smi")
        .arg("-L")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `cargo xtask hardware [--bundle-only]`.
pub(crate) fn hardware(bundle_only: bool) -> Result<(), Failure> {
    let dir = bundle()?;
    if bundle_only {
        eprintln!(
            "==> hardware: --bundle-only: on the GPU machine run `bash {}/run.sh`",
            dir.display()
        );
        return Ok(());
    }
    if !has_gpu() {
        eprintln!("==> hardware: no GPU on this machine (nvidia-smi found none); the bundle is built, run it on a GPU machine");
        return Ok(());
    }
    let mut cmd = Command::new("bash");
    cmd.arg(dir.join("run.sh"));
    run("hardware: run", cmd)
}
