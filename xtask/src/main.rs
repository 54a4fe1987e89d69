//! `cargo xtask`: emm's developer commands, written with std only (and clap for `emm`'s
//! completions and man pages, cbindgen for the C header).
//!
//! - `test`: install what the build needs, build the wasm plugins, then fmt check, the layers
//!   and header checks, the docs check, clippy (inside the build: see [`lints`]), the workspace tests, the installed Python
//!   package's tests, `cargo package`, a downstream cudarc user's build (see [`packaging`]),
//!   the demo from the tests' build and the loom model checks (CI runs this through
//!   `.ci/run`).
//! - `install-checks`: the [`packaging`] steps of `test` alone.
//! - `wasm`: build the guest plugins of `plugins/` for wasm32-unknown-unknown in release and copy
//!   the `.wasm` files to `target/wasm/`, where the sandbox's tests and benchmarks find them.
//! - `demo [args...]`: the simulated GPU's scripted demo (`emm-sim`'s `demo` example), then
//!   `emm check` of every built-in manager and example plugin, from release builds.
//! - `bench`: the benchmarks.
//! - `header [--write]`: the C header generated from emm-capi (see [`header`]).
//! - `docs [--write]`: the book's generated tables, its links and the README's, and the book's
//!   build (see [`docs`]).
//! - `hardware [--bundle-only] [--plugin PATH]... [--peers DIR] [--python-env DIR]`: the GPU
//!   bundle (see [`hardware`]), run here if there is a GPU.
//! - `soak --minutes N`, `fuzz [--seconds N] [target...]`, `loom [--preemptions N] [--release]`:
//!   see [`reliability`].
//! - `completions <SHELL> [DIR]`, `man [DIR]`: the `emm` tool's shell completions and man pages
//!   (see [`assets`]).
//! - `help`: the usage text.
//!
//! Progress lines (`==> step`) and errors go to stderr, so a command's own output on stdout stays
//! clean.

use std::env;
use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

mod assets;
mod docs;
mod hardware;
mod header;
mod layers;
mod lints;
mod packaging;
mod reliability;
mod tables;

/// The usage text for `help`, no arguments, or a bad command line.
const USAGE: &str = "\
usage: cargo xtask <command> [args...]

commands:
  test             install the targets and components the build needs, build the wasm
                   plugins, then cargo fmt --check, the layers and header checks, cargo
                   clippy -D warnings, the workspace tests, the Python package installed
                   from ./capi into a fresh venv and its tests, cargo package of every
                   crate, a downstream cudarc crate's check, the demo (from the dev
                   build), and the loom model checks (cargo xtask loom)
                   (the same command CI runs via .ci/run)
  install-checks   the part of `test` that checks emm installs as its users install it: the
                   Python package from ./capi in a fresh venv and its tests, cargo package
                   of every crate, a downstream cudarc crate's check
  wasm             build the wasm plugins (plugins/, release, wasm32-unknown-unknown) into
                   target/wasm/ (the build itself goes to target/wasm-build/)
  demo [args...]   run the simulated GPU through a scripted workload (emm-sim's demo example;
                   args are passed to it), then the conformance suite against every built-in
                   manager and the example wasm plugins
  bench            run the benchmarks (emm-sim)
  layers           check that no two modules of a crate import each other, directly or
                   through others (crate:: and super:: paths; a child may use its parent)
  header [--write] check that capi/include/emm.h is what cbindgen generates from emm-capi
                   (--write: regenerate it)
  docs [--write]   check that the book's tables match benchmarks/data/ (--write: rewrite
                   them), that every link of README.md and docs/book/ resolves, and build
                   the book with mdBook into target/book/ (installing mdBook into
                   target/tools/ when no mdbook of the pinned version is on PATH)
  hardware [--bundle-only] [--plugin PATH.wasm]... [--peers DIR] [--python-env DIR]
                   build target/hardware/ (release emm, smoke tests, wasm plugins and those
                   given with --plugin, run.sh) and, on a GPU machine, run it:
                   every plugin on the simulator first, then on the GPU only if it passed
                   there (through the gate), the gate's own checks, the workloads beside
                   the peers, report.md. --peers (or EMM_PEERS_DIR): the peers' harness
                   folder; --python-env (or EMM_PYTHON_ENV_DIR): the Python acceptance's
                   wheels, sitecustomize.py and numba-cuda baseline logs
  soak [--minutes N]
                   build a release emm and the plugins, then `emm soak` for N minutes
                   (default 30): random workloads, driver faults, plugin quarantines
  fuzz [--seconds N] [target...]
                   run the cargo-fuzz targets of fuzz/ (default: all, 600 s each, one at
                   a time; needs nightly and cargo-fuzz)
  loom [--preemptions N] [--release]
                   model-check the sharded pool and the arena with loom (emm-core's
                   tests/loom_sharded.rs built with --cfg loom, in target/loom): every
                   interleaving of their threads up to N preemptions (default 5)
  completions <SHELL> [DIR]
                   the emm tool's completion script for SHELL (bash, elvish, fish,
                   powershell, zsh) into DIR, or to stdout
  man [DIR]        the emm tool's man pages (emm.1, emm-check.1, ...) into DIR, or emm.1
                   to stdout
  help             print this text";

/// The rustup targets `test` installs: the sandbox's plugin ABI and WASI builds.
const TARGETS: [&str; 2] = ["wasm32-unknown-unknown", "wasm32-wasip2"];

/// The rustup components `test` installs.
const COMPONENTS: [&str; 2] = ["rustfmt", "clippy"];

/// Why a command did not succeed: the step it belonged to and what went wrong.
#[derive(Debug)]
struct Failure {
    /// The step's name, as printed after `==>`.
    step: String,
    /// The command line and its exit status, or why it could not start.
    reason: String,
}

/// What `main` was asked to do, or why the command line is wrong.
enum Outcome {
    /// Every step succeeded.
    Done,
    /// A step failed; exit 1.
    Failed(Failure),
    /// The command line was wrong; exit 2 after printing this reason and the usage.
    Usage(String),
}

fn main() -> ExitCode {
    let mut args = env::args_os().skip(1);
    let command = args.next();
    let rest: Vec<OsString> = args.collect();
    let outcome = match command.as_ref().map(|c| c.to_string_lossy()) {
        None => {
            println!("{USAGE}");
            Outcome::Done
        }
        Some(c) => match c.as_ref() {
            "help" | "-h" | "--help" => {
                println!("{USAGE}");
                Outcome::Done
            }
            "test" => no_args("test", &rest).unwrap_or_else(|| result(test())),
            "wasm" => {
                no_args("wasm", &rest).unwrap_or_else(|| result(setup().and_then(|()| wasm())))
            }
            "install-checks" => no_args("install-checks", &rest)
                .unwrap_or_else(|| result(packaging::install_checks(None))),
            "demo" => result(demo(&rest)),
            "bench" => no_args("bench", &rest).unwrap_or_else(|| result(bench())),
            "layers" => no_args("layers", &rest).unwrap_or_else(|| result(layers::check())),
            "header" => {
                write_flag("header", &rest).map_or_else(|u| u, |w| result(header::check(w)))
            }
            "docs" => write_flag("docs", &rest).map_or_else(|u| u, |w| result(docs::docs(w))),
            "soak" => result(reliability::soak(&rest)),
            "fuzz" => result(reliability::fuzz(&rest)),
            "loom" => result(reliability::loom(&rest)),
            "completions" => assets::completions(&rest),
            "man" => assets::man(&rest),
            "hardware" => match hardware::parse(&rest) {
                Ok(args) => result(hardware::hardware(&args)),
                Err(e) => Outcome::Usage(e),
            },
            other => Outcome::Usage(format!("unknown command `{other}`")),
        },
    };
    match outcome {
        Outcome::Done => ExitCode::SUCCESS,
        Outcome::Failed(f) => {
            eprintln!("xtask: step `{}` failed: {}", f.step, f.reason);
            ExitCode::FAILURE
        }
        Outcome::Usage(reason) => {
            eprintln!("xtask: {reason}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// `None` when a command that takes no arguments got none, else the usage error.
fn no_args(command: &str, rest: &[OsString]) -> Option<Outcome> {
    (!rest.is_empty()).then(|| Outcome::Usage(format!("`{command}` takes no arguments")))
}

/// Whether a command that takes only `--write` got it, else the usage error.
fn write_flag(command: &str, rest: &[OsString]) -> Result<bool, Outcome> {
    match rest {
        [] => Ok(false),
        [w] if w == "--write" => Ok(true),
        _ => Err(Outcome::Usage(format!("`{command}` takes only --write"))),
    }
}

/// Turns a command's result into an [`Outcome`].
fn result(r: Result<(), Failure>) -> Outcome {
    r.map_or_else(Outcome::Failed, |()| Outcome::Done)
}

/// `cargo xtask test`: setup, fmt check, clippy with the build, then the tests; stops at the
/// first failure.
fn test() -> Result<(), Failure> {
    setup()?;
    // The sandbox's tests load these; they fail (not skip) without them.
    wasm()?;
    run("fmt", cargo(["fmt", "--all", "--check"]))?;
    layers::check()?;
    header::check(false)?;
    // The book (and the mdBook it may first compile, ~40 s) beside the workspace's build: on
    // two cores the build leaves one idle for much of its time.
    let book = std::thread::spawn(|| docs::docs(false));
    run(
        "fmt plugins",
        cargo([
            "fmt",
            "--all",
            "--check",
            "--manifest-path",
            "plugins/Cargo.toml",
        ]),
    )?;
    // Clippy runs inside the one build of the workspace (see `lints`) when the toolchain's
    // clippy-driver can, else as its own step.
    let lints = lints::Lints::in_build();
    match &lints {
        Some(l) => {
            for mut build in split(["build", "--all-targets", "--profile", "test"]) {
                l.apply(&mut build);
                run("clippy and build", build)?;
            }
        }
        None => {
            for mut clippy in split(["clippy", "--all-targets"]) {
                clippy.args(["--", "-D", "warnings"]);
                run("clippy", clippy)?;
            }
        }
    }
    book.join().map_err(|_| Failure {
        step: "docs".to_owned(),
        reason: "the book's thread panicked".to_owned(),
    })??;
    let lints = lints.as_ref();
    let nextest = has_nextest();
    let tests = if nextest {
        split(["nextest", "run"])
    } else {
        split(["test"])
    };
    for cmd in tests {
        run("test", lints::Lints::on(lints, cmd))?;
    }
    if nextest {
        // nextest does not run doctests.
        run(
            "doctest",
            lints::Lints::on(
                lints,
                cargo(["test", "--workspace", "--exclude", "xtask", "--doc"]),
            ),
        )?;
    }
    packaging::install_checks(lints)?;
    demo_from_tests(lints)?;
    // At most 3 preemptions (both races loom found showed at 2): 20 s of model checking
    // against 5 minutes at 4, whose two largest scenarios explore 63 000 and 148 000
    // interleavings; `cargo xtask loom` goes deeper.
    reliability::loom(&["--preemptions".into(), "3".into()])?;
    reliability::fuzz_smoke()
}

/// `cargo <args>` over the workspace without xtask, then over xtask alone: built together,
/// xtask's cbindgen would turn on features in crates wasmtime shares, and emm-capi built alone
/// (the Python wheel) could not reuse the workspace's wasmtime.
fn split<const N: usize>(args: [&str; N]) -> [Command; 2] {
    let mut workspace = cargo(args);
    workspace.args(["--workspace", "--exclude", "xtask"]);
    let mut xtask = cargo(args);
    xtask.args(["--package", "xtask"]);
    [workspace, xtask]
}

/// The plugin crates `wasm` builds: (package, the `.wasm` file it makes).
const PLUGINS: [(&str, &str); 3] = [
    ("emm-plugin-first-fit", "first_fit.wasm"),
    ("emm-plugin-buddy", "buddy.wasm"),
    ("emm-plugin-slab", "slab.wasm"),
];

/// `cargo xtask wasm`: builds the guest plugins in release for wasm32-unknown-unknown, in their
/// own target directory (`target/wasm-build`, or `$EMM_WASM_BUILD_DIR`), and copies the
/// `.wasm` files to `target/wasm/`.
fn wasm() -> Result<(), Failure> {
    let root = workspace_root();
    let build_dir = env::var_os("EMM_WASM_BUILD_DIR")
        .map_or_else(|| root.join("target").join("wasm-build"), PathBuf::from);
    let mut cmd = cargo([
        "build",
        "--release",
        "--target",
        "wasm32-unknown-unknown",
        "--manifest-path",
        "plugins/Cargo.toml",
        "--workspace",
        // 128-bit SIMD (part of wasm 2.0; wasmtime enables it) in every function, so the
        // first-fit plugin's fixed-width scans inline into their callers.
        "--config",
        "target.wasm32-unknown-unknown.rustflags=['-C', 'target-feature=+simd128']",
    ]);
    // --target-dir rather than CARGO_TARGET_DIR, which a developer may have set for the host.
    cmd.arg("--target-dir").arg(&build_dir);
    run("wasm", cmd)?;
    let out = root.join("target").join("wasm");
    let fail = |reason: String| Failure {
        step: "wasm".to_owned(),
        reason,
    };
    std::fs::create_dir_all(&out)
        .map_err(|e| fail(format!("cannot create {}: {e}", out.display())))?;
    let built = build_dir.join("wasm32-unknown-unknown").join("release");
    for (package, file) in PLUGINS {
        let from = built.join(file);
        std::fs::copy(&from, out.join(file)).map_err(|e| {
            fail(format!(
                "{package} built, but {} cannot be copied: {e}",
                from.display()
            ))
        })?;
    }
    eprintln!("==> wasm: {} plugins in {}", PLUGINS.len(), out.display());
    Ok(())
}

/// Installs [`TARGETS`] and [`COMPONENTS`] with rustup (a no-op when they are already there).
/// Without rustup the step is skipped with a note: the toolchain then has to provide them.
fn setup() -> Result<(), Failure> {
    let probe = Command::new("rustup")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if probe.is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
        eprintln!(
            "==> setup: rustup not found, skipped (the toolchain must provide {} and {})",
            TARGETS.join(", "),
            COMPONENTS.join(", ")
        );
        return Ok(());
    }
    let mut targets = Command::new("rustup");
    targets.args(["target", "add"]).args(TARGETS);
    run("setup", targets)?;
    let mut components = Command::new("rustup");
    components.args(["component", "add"]).args(COMPONENTS);
    run("setup", components)
}

/// Whether `cargo nextest` is installed.
fn has_nextest() -> bool {
    cargo(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `cargo xtask demo [args...]`: emm's main job on a machine with no GPU: the simulated GPU's
/// scripted demo, then the conformance suite against every built-in manager and the example
/// wasm plugins, from release builds.
fn demo(args: &[OsString]) -> Result<(), Failure> {
    // A fresh machine has no wasm32 targets yet: the example plugins need them.
    setup()?;
    wasm()?;
    run(
        "demo: build",
        cargo([
            "build",
            "--release",
            "--quiet",
            "-p",
            "emm-sim",
            "--example",
            "demo",
            "-p",
            "emm-cli",
            "--bin",
            "emm",
        ]),
    )?;
    show_demo("release", args)
}

/// The demo as `cargo xtask test` runs it: from the dev build the tests made (the workspace's
/// examples and binaries, so nothing builds again), the same steps as [`demo`].
fn demo_from_tests(lints: Option<&lints::Lints>) -> Result<(), Failure> {
    run(
        "demo: build",
        lints::Lints::on(
            lints,
            // Without xtask, as the tests' build (see `split`), so nothing builds again.
            cargo([
                "build",
                "--workspace",
                "--exclude",
                "xtask",
                "--examples",
                "--bins",
                "--quiet",
            ]),
        ),
    )?;
    show_demo("debug", &[])
}

/// Runs `target/<profile>/examples/demo` with `args`, then `emm check` of every built-in
/// manager and example plugin (all at once: they are independent processes), printing each
/// verdict line; fails naming every plugin whose check failed.
fn show_demo(profile: &str, args: &[OsString]) -> Result<(), Failure> {
    let root = workspace_root();
    let dir = root.join("target").join(profile);
    let mut sim = Command::new(dir.join("examples").join("demo"));
    sim.args(args);
    run("demo", sim)?;
    let emm = dir.join("emm");
    println!("\n5. The conformance suite (emm check) on the simulated GPU, seed 1:");
    let builtins = [
        "default",
        "pool",
        "pool-vmm",
        "pool-vmm-tight",
        "arena",
        "binning",
        "async",
        "managed",
    ];
    let wasm_plugins = PLUGINS.iter().map(|(_, f)| format!("target/wasm/{f}"));
    let plugins: Vec<String> = builtins
        .iter()
        .map(|s| s.to_string())
        .chain(wasm_plugins)
        .collect();
    let start = |plugin: &String| {
        Command::new(&emm)
            .args([
                "check",
                plugin,
                "--seed",
                "1",
                "--no-regressions",
                "--no-color",
            ])
            .current_dir(&root)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Failure {
                step: "demo: emm check".to_owned(),
                reason: format!("{} could not start: {e}", emm.display()),
            })
    };
    let children = plugins.iter().map(start).collect::<Result<Vec<_>, _>>()?;
    let mut failed = Vec::new();
    for (plugin, child) in plugins.iter().zip(children) {
        let out = child.wait_with_output().map_err(|e| Failure {
            step: "demo: emm check".to_owned(),
            reason: format!("`emm check {plugin}` could not be waited for: {e}"),
        })?;
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output");
        println!("   {plugin:<28} {last}");
        if !out.status.success() {
            failed.push(plugin.as_str());
        }
    }
    println!(
        "\n   `target/{profile}/emm check <plugin>` shows every check with the rule it enforces."
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure {
            step: "demo: emm check".to_owned(),
            reason: format!("failed: {}", failed.join(", ")),
        })
    }
}

/// `cargo xtask bench`: every crate's benchmarks (for now `emm-sim`).
fn bench() -> Result<(), Failure> {
    run("bench", cargo(["bench", "-p", "emm-sim"]))
}

/// A `cargo` command with these arguments, run from the workspace root. It uses the cargo that
/// runs xtask (`$CARGO`), so the toolchain stays the same.
fn cargo<const N: usize>(args: [&str; N]) -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(args);
    cmd
}

/// The workspace root: the parent of xtask's own manifest directory.
fn workspace_root() -> PathBuf {
    let manifest = env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from);
    manifest
        .parent()
        .map_or_else(|| manifest.clone(), PathBuf::from)
}

/// Runs `cmd` from the workspace root as step `step`, printing `==> step` first and its wall
/// time when it succeeds (so a CI log shows where the time goes); a failure
/// names the command line and its exit status.
fn run(step: &str, mut cmd: Command) -> Result<(), Failure> {
    eprintln!("==> {step}");
    let line = command_line(&cmd);
    let fail = |reason: String| Failure {
        step: step.to_owned(),
        reason,
    };
    let start = std::time::Instant::now();
    match cmd.current_dir(workspace_root()).status() {
        Ok(status) if status.success() => {
            eprintln!("<== {step}: {:.1} s", start.elapsed().as_secs_f64());
            Ok(())
        }
        Ok(status) => Err(fail(format!("`{line}` failed ({status})"))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(fail(format!("`{line}`: program not found")))
        }
        Err(e) => Err(fail(format!("`{line}` could not start: {e}"))),
    }
}

/// The command as one would type it (program name without its directory).
fn command_line(cmd: &Command) -> String {
    let program = PathBuf::from(cmd.get_program());
    let name = program
        .file_name()
        .unwrap_or(cmd.get_program())
        .to_string_lossy()
        .into_owned();
    let args = cmd.get_args().map(|a| a.to_string_lossy().into_owned());
    std::iter::once(name)
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}
