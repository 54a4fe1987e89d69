//! `cargo xtask hardware [--bundle-only] [--plugin PATH]... [--peers DIR] [--python-env DIR]`:
//! builds a self-contained bundle for a GPU machine (release `emm`, the hardware smoke tests,
//! the wasm plugins and those given, a known-bad plugin for the gate's checks, the C ABI's
//! library with the Python package and its acceptance scripts, a run script and its report
//! maker, and the two optional inputs below) into `target/hardware/`, and runs it when this
//! machine has a GPU. A GPU machine without a Rust toolchain runs `target/hardware/run.sh`
//! itself; it checks every plugin on the simulator first and runs on the GPU only those that
//! pass.
//!
//! Optional inputs, each a folder given by flag or environment variable:
//! - `--peers DIR` / `EMM_PEERS_DIR`: the peers' harness (RMM, PyTorch, CuPy and CUDA
//!   allocators on the same workloads; its `run_all.sh` is what `run.sh` calls). Without it
//!   the bundle runs without the peers.
//! - `--python-env DIR` / `EMM_PYTHON_ENV_DIR`: the Python acceptance's environment:
//!   `sitecustomize.py`, `wheels/`, and numba-cuda's baseline logs
//!   (`numba-cuda-suite-default.log`, `numba-cuda-memory-modules-default.log`). Without it the
//!   Python part has no environment fixes and no baselines.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{cargo, run, wasm, workspace_root, Failure};

/// The run script and the report maker, shipped in the bundle.
const RUN_SH: &str = include_str!("../hardware/run.sh");
const REPORT_PY: &str = include_str!("../hardware/report.py");
/// The sandbox's hostile fixture, made a plain bump allocator below: it never frees, so it
/// fails the contract on the simulator, and the gate must keep it off the GPU.
/// The known-bad plugin: the sandbox's hostile fixture as a bump allocator that never frees,
/// compiled to a wasm binary (a plugin file must be one; the sandbox's `hostile` test checks
/// the binary is the fixture compiled).
const KNOWN_BAD_WASM: &[u8] = include_bytes!("../../sandbox/tests/fixtures/known_bad.wasm");

/// What `cargo xtask hardware` was asked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct HardwareArgs {
    /// Build the bundle only, even on a GPU machine.
    bundle_only: bool,
    /// Further `.wasm` plugins to check (simulator first, then the GPU).
    plugins: Vec<PathBuf>,
    /// The peers' harness folder, if given.
    peers: Option<PathBuf>,
    /// The Python acceptance's environment folder, if given.
    python_env: Option<PathBuf>,
}

/// The files a Python environment folder must hold.
const PYTHON_ENV_FILES: [&str; 4] = [
    "sitecustomize.py",
    "wheels",
    "numba-cuda-suite-default.log",
    "numba-cuda-memory-modules-default.log",
];

/// Reads `[--bundle-only] [--plugin PATH]... [--peers DIR] [--python-env DIR]`, with
/// `EMM_PEERS_DIR` and `EMM_PYTHON_ENV_DIR` standing in for the last two.
pub(crate) fn parse(rest: &[OsString]) -> Result<HardwareArgs, String> {
    parse_with(rest, |key| std::env::var_os(key).filter(|v| !v.is_empty()))
}

/// [`parse`], with `env` for the environment.
fn parse_with(
    rest: &[OsString],
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<HardwareArgs, String> {
    let mut args = HardwareArgs::default();
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        match a.to_string_lossy().as_ref() {
            "--bundle-only" => args.bundle_only = true,
            "--plugin" => {
                let path = it
                    .next()
                    .ok_or("--plugin needs the path of a .wasm plugin after it")?;
                args.plugins.push(PathBuf::from(path));
            }
            flag @ ("--peers" | "--python-env") => {
                let dir = it
                    .next()
                    .ok_or_else(|| format!("{flag} needs a folder after it"))?;
                let slot = if flag == "--peers" {
                    &mut args.peers
                } else {
                    &mut args.python_env
                };
                *slot = Some(PathBuf::from(dir));
            }
            other => {
                return Err(format!(
                    "`hardware` takes --bundle-only, --plugin PATH.wasm, --peers DIR and \
                     --python-env DIR, not `{other}`"
                ))
            }
        }
    }
    args.peers = args
        .peers
        .or_else(|| env("EMM_PEERS_DIR").map(PathBuf::from));
    args.python_env = args
        .python_env
        .or_else(|| env("EMM_PYTHON_ENV_DIR").map(PathBuf::from));
    if let Some(dir) = &args.peers {
        if !dir.join("run_all.sh").is_file() {
            return Err(format!(
                "--peers (or EMM_PEERS_DIR) {}: give the peers' harness folder, the one holding run_all.sh",
                dir.display()
            ));
        }
    }
    if let Some(dir) = &args.python_env {
        let missing: Vec<&str> = PYTHON_ENV_FILES
            .into_iter()
            .filter(|f| !dir.join(f).exists())
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "--python-env (or EMM_PYTHON_ENV_DIR) {}: the folder lacks {}",
                dir.display(),
                missing.join(", ")
            ));
        }
    }
    for p in &args.plugins {
        if p.extension().is_none_or(|x| x != "wasm") || !p.is_file() {
            return Err(format!(
                "--plugin {}: give an existing .wasm file",
                p.display()
            ));
        }
    }
    Ok(args)
}

/// The Python acceptance's scripts (`xtask/hardware/python/`), shipped in `python/`.
const PYTHON_SCRIPTS: &[(&str, &str)] = &[
    (
        "run_python.sh",
        include_str!("../hardware/python/run_python.sh"),
    ),
    (
        "numba_summary.py",
        include_str!("../hardware/python/numba_summary.py"),
    ),
    (
        "report_python.py",
        include_str!("../hardware/python/report_python.py"),
    ),
    ("common.py", include_str!("../hardware/python/common.py")),
    (
        "cupy_workload.py",
        include_str!("../hardware/python/cupy_workload.py"),
    ),
    (
        "cupy_alloc.py",
        include_str!("../hardware/python/cupy_alloc.py"),
    ),
    (
        "torch_workload.py",
        include_str!("../hardware/python/torch_workload.py"),
    ),
    (
        "shared_pool.py",
        include_str!("../hardware/python/shared_pool.py"),
    ),
];

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
    copy_dir_except(from, to, &[])
}

/// Copies `from` into `to`, leaving out entries named in `skip`.
fn copy_dir_except(from: &Path, to: &Path, skip: &[&str]) -> Result<(), Failure> {
    std::fs::create_dir_all(to)
        .map_err(|e| fail(format!("cannot create {}: {e}", to.display())))?;
    let entries = std::fs::read_dir(from)
        .map_err(|e| fail(format!("cannot read {}: {e}", from.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| fail(e.to_string()))?;
        if skip.iter().any(|s| entry.file_name() == *s) {
            continue;
        }
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir_except(&path, &target, skip)?;
        } else {
            copy(&path, &target)?;
        }
    }
    Ok(())
}

/// Where cargo builds: `CARGO_TARGET_DIR` (relative to the workspace, as cargo runs there),
/// else the workspace's `target/`.
fn cargo_target_dir() -> PathBuf {
    let root = workspace_root();
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| root.join("target"), |d| root.join(d))
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text).map_err(|e| fail(format!("cannot write {}: {e}", path.display())))
}

/// Builds the bundle with the extra plugins and inputs of `args`; returns its folder.
fn bundle(args: &HardwareArgs) -> Result<PathBuf, Failure> {
    let plugins = &args.plugins;
    let root = workspace_root();
    wasm()?;
    run(
        "hardware: emm",
        cargo(["build", "--release", "-p", "emm-cli", "--bin", "emm"]),
    )?;
    run(
        "hardware: host_floor (what the host's CPU charges the fast path)",
        cargo([
            "build",
            "--release",
            "-p",
            "emm-bench",
            "--example",
            "host_floor",
        ]),
    )?;
    run(
        "hardware: emm-capi (libemm.so)",
        cargo(["build", "--release", "-p", "emm-capi"]),
    )?;
    eprintln!("==> hardware: smoke tests");
    let smoke = test_executable("emm-cuda", "hardware")?;
    let dir = root.join("target").join("hardware");
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["bin", "wasm", "gate"] {
        std::fs::create_dir_all(dir.join(sub))
            .map_err(|e| fail(format!("cannot create the bundle: {e}")))?;
    }
    let release = cargo_target_dir().join("release");
    copy(&release.join("emm"), &dir.join("bin/emm"))?;
    copy(
        &release.join("examples/host_floor"),
        &dir.join("bin/host_floor"),
    )?;
    python_bundle(
        &root,
        &release,
        &dir.join("python"),
        args.python_env.as_deref(),
    )?;
    copy(&smoke, &dir.join("bin/emm-cuda-hardware"))?;
    copy_dir(&root.join("target/wasm"), &dir.join("wasm"))?;
    for p in plugins {
        let name = p.file_name().map(PathBuf::from).unwrap_or_default();
        if dir.join("wasm").join(&name).exists() {
            return Err(fail(format!(
                "--plugin {}: the bundle already has a plugin named {}; rename the file",
                p.display(),
                name.display()
            )));
        }
        copy(p, &dir.join("wasm").join(name))?;
    }
    let known_bad = dir.join("gate/known_bad.wasm");
    std::fs::write(&known_bad, KNOWN_BAD_WASM)
        .map_err(|e| fail(format!("cannot write {}: {e}", known_bad.display())))?;
    // The peers' harness is an input (`--peers`); the bundle works without it.
    match &args.peers {
        Some(peers) => copy_dir(peers, &dir.join("peers"))?,
        None => eprintln!(
            "==> hardware: no --peers DIR (or EMM_PEERS_DIR); the bundle runs without the peers"
        ),
    }
    write(&dir.join("run.sh"), RUN_SH)?;
    write(&dir.join("report.py"), REPORT_PY)?;
    write(&dir.join("threads.sh"), THREADS_SH)?;
    write(&dir.join("peers_threads.cu"), PEERS_THREADS_CU)?;
    make_executable(&dir.join("run.sh"))?;
    eprintln!("==> hardware: bundle in {}", dir.display());
    Ok(dir)
}

/// `python/`: the emm package with `libemm.so`, the acceptance scripts, and from `env` (the
/// `--python-env` folder, if given) the environment fixes and the numba-cuda baselines.
fn python_bundle(
    root: &Path,
    release: &Path,
    dir: &Path,
    env: Option<&Path>,
) -> Result<(), Failure> {
    copy_dir_except(
        &root.join("capi/python/emm"),
        &dir.join("emm"),
        &["__pycache__", "libemm.so"],
    )?;
    copy(&release.join("libemm.so"), &dir.join("emm/libemm.so"))?;
    for (name, text) in PYTHON_SCRIPTS {
        write(&dir.join(name), text)?;
    }
    make_executable(&dir.join("run_python.sh"))?;
    let Some(input) = env else {
        eprintln!(
            "==> hardware: no --python-env DIR (or EMM_PYTHON_ENV_DIR); the python part will lack the environment fixes and baselines"
        );
        return Ok(());
    };
    for sub in ["env", "baselines"] {
        std::fs::create_dir_all(dir.join(sub))
            .map_err(|e| fail(format!("cannot create the bundle: {e}")))?;
    }
    copy(
        &input.join("sitecustomize.py"),
        &dir.join("env/sitecustomize.py"),
    )?;
    copy_dir(&input.join("wheels"), &dir.join("env"))?;
    for log in [
        "numba-cuda-suite-default.log",
        "numba-cuda-memory-modules-default.log",
    ] {
        copy(&input.join(log), &dir.join("baselines").join(log))?;
    }
    Ok(())
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

/// `cargo xtask hardware [--bundle-only] [--plugin PATH]...`.
pub(crate) fn hardware(args: &HardwareArgs) -> Result<(), Failure> {
    let dir = bundle(args)?;
    if args.bundle_only {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_read_and_bad_ones_refused() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(parse(&[]), Ok(HardwareArgs::default()));
        assert!(parse(&os(&["--bundle-only"])).is_ok_and(|a| a.bundle_only));
        assert!(parse(&os(&["--plugin"])).is_err());
        let e = parse(&os(&["--plugin", "/nonexistent/x.wasm"])).unwrap_err();
        assert!(e.contains("give an existing .wasm file"), "{e}");
        assert!(parse(&os(&["--frob"])).is_err());
        // The peers and the Python environment: by flag or variable, checked either way.
        let none = |_: &str| None;
        assert!(parse_with(&[], none).is_ok_and(|a| a.peers.is_none() && a.python_env.is_none()));
        assert!(parse_with(&os(&["--peers"]), none).is_err());
        let e = parse_with(&os(&["--peers", "/nonexistent"]), none).unwrap_err();
        assert!(e.contains("the one holding run_all.sh"), "{e}");
        let from_env =
            |k: &str| (k == "EMM_PYTHON_ENV_DIR").then(|| OsString::from("/nonexistent"));
        let e = parse_with(&[], from_env).unwrap_err();
        assert!(
            e.contains("EMM_PYTHON_ENV_DIR") && e.contains("sitecustomize.py"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("emm-xtask-peers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("run_all.sh"), "").unwrap();
        let a = parse_with(&os(&["--peers", dir.to_str().unwrap()]), none).unwrap();
        assert_eq!(a.peers.as_deref(), Some(dir.as_path()));
        std::fs::remove_dir_all(&dir).unwrap();
        // The known-bad plugin is a wasm binary, not text.
        assert!(KNOWN_BAD_WASM.starts_with(b"\0asm"));
    }
}
