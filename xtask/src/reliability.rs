//! `cargo xtask soak --minutes N` and `cargo xtask fuzz [--seconds N] [target...]`, and the
//! fuzz smoke `test` runs with `EMM_FUZZ_SMOKE=1` when cargo-fuzz and a nightly toolchain are installed;
//! `cargo xtask loom [--preemptions N] [--release]`, the model checks `test` also runs.

use std::ffi::OsString;
use std::process::{Command, Stdio};

use super::{cargo, run, wasm, Failure};

/// The cargo-fuzz targets of `fuzz/`, one libFuzzer binary each.
pub const FUZZ_TARGETS: [&str; 4] = [
    "replay_log",
    "sim_driver_ops",
    "plugin_module",
    "plugin_answers",
];

/// The C ABI's target, in its own fuzz directory (`fuzz/capi`, which needs `capi/`).
pub const CAPI_TARGET: &str = "capi_abi";

/// The targets that can run here: all of [`FUZZ_TARGETS`], and [`CAPI_TARGET`] when the
/// workspace has `capi/`.
fn runnable() -> Vec<&'static str> {
    let mut v = FUZZ_TARGETS.to_vec();
    if super::workspace_root()
        .join("capi")
        .join("Cargo.toml")
        .is_file()
    {
        v.push(CAPI_TARGET);
    }
    v
}

/// The example plugins, as `cargo xtask wasm` leaves them.
const WASM: [&str; 3] = [
    "target/wasm/first_fit.wasm",
    "target/wasm/buddy.wasm",
    "target/wasm/slab.wasm",
];

fn usage(reason: String) -> Failure {
    Failure {
        step: "arguments".to_owned(),
        reason,
    }
}

/// The value of `--name N` in `args`, if given, as a positive number.
fn number(args: &[OsString], name: &str) -> Result<Option<f64>, Failure> {
    let mut it = args.iter().map(|a| a.to_string_lossy());
    while let Some(a) = it.next() {
        if a == name {
            let v = it
                .next()
                .ok_or_else(|| usage(format!("{name} needs a value")))?;
            return match v.parse::<f64>() {
                Ok(n) if n.is_finite() && n > 0.0 => Ok(Some(n)),
                _ => Err(usage(format!("{name} {v}: give a positive number"))),
            };
        }
    }
    Ok(None)
}

/// `cargo xtask soak --minutes N`: builds the plugins and a release `emm`, then runs
/// `emm soak` for N minutes (default 30) against every built-in manager and example plugin.
pub fn soak(args: &[OsString]) -> Result<(), Failure> {
    let minutes = number(args, "--minutes")?.unwrap_or(30.0);
    wasm()?;
    let m = minutes.to_string();
    let mut cmd = cargo([
        "run",
        "--release",
        "-q",
        "-p",
        "emm-cli",
        "--bin",
        "emm",
        "--",
        "soak",
        "--minutes",
        &m,
    ]);
    cmd.args(WASM);
    run("soak", cmd)
}

/// Whether `cargo +nightly fuzz` runs here.
pub fn has_cargo_fuzz() -> bool {
    Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One libFuzzer run of `target` over its corpus, with `flags` for libFuzzer; new inputs go
/// to `scratch` when given (libFuzzer writes to the first corpus directory), else to the
/// committed corpus.
fn fuzz_run(target: &str, flags: &[String], scratch: Option<&std::path::Path>) -> Command {
    let mut cmd = Command::new("cargo");
    // Sanitizer flags change every crate's build: keep it apart from the stable build's
    // artifacts (cargo-fuzz's own default is fuzz/target).
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        cmd.env("CARGO_TARGET_DIR", std::path::Path::new(&dir).join("fuzz"));
    }
    let (dir, corpus) = if target == CAPI_TARGET {
        ("fuzz/capi", format!("fuzz/capi/corpus/{target}"))
    } else {
        ("fuzz", format!("fuzz/corpus/{target}"))
    };
    cmd.args(["+nightly", "fuzz", "run", "--fuzz-dir", dir, "-O", target]);
    if let Some(dir) = scratch {
        cmd.arg(dir);
    }
    cmd.args([corpus.as_str(), "--"]);
    cmd.args(flags);
    cmd
}

/// `cargo xtask fuzz [--seconds N] [target...]`: each target (default: all) for N seconds
/// (default 600), one at a time, growing its corpus in `fuzz/corpus/<target>`.
pub fn fuzz(args: &[OsString]) -> Result<(), Failure> {
    if !has_cargo_fuzz() {
        return Err(Failure {
            step: "fuzz".to_owned(),
            reason: "cargo-fuzz or the nightly toolchain is missing: `rustup toolchain install \
                     nightly` and `cargo install cargo-fuzz`"
                .to_owned(),
        });
    }
    let seconds = number(args, "--seconds")?.unwrap_or(600.0);
    let named: Vec<String> = {
        let mut v = Vec::new();
        let mut skip = false;
        for a in args.iter().map(|a| a.to_string_lossy().into_owned()) {
            if skip {
                skip = false;
            } else if a == "--seconds" {
                skip = true;
            } else {
                v.push(a);
            }
        }
        v
    };
    let all = runnable();
    for t in &named {
        if !all.contains(&t.as_str()) {
            return Err(usage(format!(
                "no fuzz target {t:?} here; the targets: {}",
                all.join(", ")
            )));
        }
    }
    let targets: Vec<&str> = if named.is_empty() {
        all
    } else {
        named.iter().map(String::as_str).collect()
    };
    let flags = vec![format!("-max_total_time={}", seconds.round())];
    for t in targets {
        run(&format!("fuzz {t}"), fuzz_run(t, &flags, None))?;
    }
    Ok(())
}

/// The smoke `test` runs with `EMM_FUZZ_SMOKE=1`: each target over its committed corpus plus
/// a few seconds of new inputs. Opt-in because its first build (every crate, wasmtime
/// included, again with sanitizers) takes many minutes on a clean clone; skipped with a note
/// otherwise, and without cargo-fuzz (CI has none).
pub fn fuzz_smoke() -> Result<(), Failure> {
    if std::env::var_os("EMM_FUZZ_SMOKE").is_none_or(|v| v != "1") {
        eprintln!(
            "==> fuzz smoke: skipped (set EMM_FUZZ_SMOKE=1 to run each fuzzer over its corpus \
             for a few seconds; `cargo xtask fuzz` runs them for real)"
        );
        return Ok(());
    }
    if !has_cargo_fuzz() {
        eprintln!(
            "==> fuzz smoke: skipped (no cargo-fuzz or nightly toolchain; `cargo install \
             cargo-fuzz` to run it)"
        );
        return Ok(());
    }
    let flags = vec!["-max_total_time=3".to_owned()];
    for t in runnable() {
        // New inputs of a smoke run are thrown away: the committed corpora stay as they are.
        let scratch = std::env::temp_dir().join(format!("emm-fuzz-smoke-{t}"));
        std::fs::create_dir_all(&scratch).map_err(|e| Failure {
            step: format!("fuzz smoke {t}"),
            reason: format!("cannot create {}: {e}", scratch.display()),
        })?;
        let r = run(
            &format!("fuzz smoke {t}"),
            fuzz_run(t, &flags, Some(&scratch)),
        );
        let _ = std::fs::remove_dir_all(&scratch);
        r?;
    }
    Ok(())
}

/// `cargo xtask loom [--preemptions N] [--release]`: the loom model checks of the sharded pool
/// and the arena (`core/tests/loom_sharded.rs`): emm-core built with `--cfg loom`, every
/// interleaving of the scenarios' threads up to N preemptions each (default: the test's own
/// bound, 5). `--cfg loom` changes every crate's build, so it builds in a target directory of
/// its own (`target/loom`, or `$CARGO_TARGET_DIR/loom`) and leaves the normal build's
/// artifacts alone. Unoptimized and without debug info by default: the quickest to build from
/// scratch (19–33 s here; 89 s in release) and fast enough to check (6–7 s); `--release` for
/// deep runs.
pub fn loom(args: &[OsString]) -> Result<(), Failure> {
    let preemptions = number(args, "--preemptions")?;
    let release = args.iter().any(|a| a == "--release");
    let mut skip = false;
    for a in args.iter().map(|a| a.to_string_lossy()) {
        match a.as_ref() {
            _ if skip => skip = false,
            "--preemptions" => skip = true,
            "--release" => {}
            other => return Err(usage(format!("`loom`: unknown argument {other:?}"))),
        }
    }
    let mut cmd = cargo(["test", "-p", "emm-core", "--test", "loom_sharded"]);
    if release {
        cmd.arg("--release");
    } else {
        cmd.env("CARGO_PROFILE_DEV_DEBUG", "0");
    }
    // Each scenario prints how many interleavings it explored.
    cmd.args(["--", "--nocapture"]);
    let dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || super::workspace_root().join("target"),
        std::path::PathBuf::from,
    );
    cmd.env("CARGO_TARGET_DIR", dir.join("loom"));
    let mut flags = std::env::var("RUSTFLAGS").unwrap_or_default();
    if !flags.is_empty() {
        flags.push(' ');
    }
    flags.push_str("--cfg loom");
    cmd.env("RUSTFLAGS", flags);
    if let Some(n) = preemptions {
        if n.fract() != 0.0 {
            return Err(usage(format!("--preemptions {n}: give a whole number")));
        }
        cmd.env("LOOM_MAX_PREEMPTIONS", format!("{n}"));
    }
    run("loom", cmd)
}
