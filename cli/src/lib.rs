//! emm-cli: the `emm` command-line tool over the conformance suite (emm-conformance) and the
//! benchmarks (emm-bench): one file per subcommand, listed in [`COMMANDS`].
//!
//! A new subcommand is a new file with a `pub const COMMAND: Command` and one line in
//! [`COMMANDS`]. Exit status: [`EXIT_PASS`] when all checks pass, [`EXIT_FAIL`] when one
//! fails, [`EXIT_CANNOT_RUN`] when the plugin cannot be loaded or run, or the command line is
//! wrong (the reason goes to stderr).
//!
//! - [`args`]: a small parser of flags and values.
//! - [`progress`]: the progress bar and colours, on stderr, by hand.
//! - [`check`]: `emm check <plugin>`.
//! - [`list`]: `emm list`.
//! - [`replay`]: `emm replay <log.csv>`.
//! - [`bench`](mod@bench): `emm bench`; [`bench_threads`] its many-threads mode, [`bench_report`] its
//!   `--report` folder (extra measurements in [`bench_measure`], the peers' figures in
//!   [`bench_peers`], JSON, markdown and SVG charts).
//! - [`sweep`]: `emm sweep`.
//! - [`soak`]: `emm soak`.

pub mod args;
pub mod bench;
pub mod bench_measure;
pub mod bench_peers;
pub mod bench_report;
mod bench_run;
pub mod bench_threads;
pub mod check;
pub mod list;
pub mod progress;
pub mod replay;
pub mod soak;
pub mod sweep;

use std::sync::Arc;

pub use args::Args;
use emm_conformance::backend::Backend;
use emm_conformance::cuda_backend::CudaBackend;
/// The factory of a plugin name or `.wasm` path; the suite library resolves it.
pub use emm_conformance::resolve_plugin;
use emm_conformance::sim_backend::SimBackend;

/// All checks passed.
pub const EXIT_PASS: i32 = 0;
/// A check failed.
pub const EXIT_FAIL: i32 = 1;
/// The plugin could not be loaded or run, or the command line is wrong.
pub const EXIT_CANNOT_RUN: i32 = 2;

/// One subcommand of `emm`.
#[derive(Debug, Clone, Copy)]
pub struct Command {
    /// What follows `emm`, e.g. `check`.
    pub name: &'static str,
    /// One line for `emm help`.
    pub summary: &'static str,
    /// Its usage text (flags and what they do).
    pub usage: &'static str,
    /// Runs it on the arguments after its name; returns the exit status.
    pub run: fn(Args) -> i32,
}

/// Every subcommand, in the order `emm help` lists them.
pub const COMMANDS: &[Command] = &[
    check::COMMAND,
    list::COMMAND,
    replay::COMMAND,
    bench::COMMAND,
    sweep::COMMAND,
    soak::COMMAND,
];

/// Runs `emm` with the process's arguments `argv` (without the program name), as the binary
/// does; returns the exit status.
///
/// A closed stdout (`emm bench | head -1`) ends the process as it ends any Unix filter:
/// quietly, by `SIGPIPE`, where Rust's runtime would otherwise turn the failed write into a
/// panic. An argument that is not UTF-8 is refused with exit status [`EXIT_CANNOT_RUN`].
pub fn main_os(argv: impl IntoIterator<Item = std::ffi::OsString>) -> i32 {
    die_on_closed_pipe();
    let mut args = Vec::new();
    for (k, a) in argv.into_iter().enumerate() {
        match a.into_string() {
            Ok(a) => args.push(a),
            Err(a) => {
                eprintln!(
                    "emm: argument {} ({}) is not UTF-8; emm takes names, paths and numbers \
                     in UTF-8",
                    k + 1,
                    a.to_string_lossy()
                );
                return EXIT_CANNOT_RUN;
            }
        }
    }
    main(args)
}

/// Restores the default action of `SIGPIPE` (end the process), which Rust's runtime ignores.
fn die_on_closed_pipe() {
    #[allow(unsafe_code, reason = "signal has no std wrapper")]
    // SAFETY: setting a signal's disposition to its default touches no Rust state.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Runs `emm` with `argv` (without the program name); returns the exit status.
pub fn main(argv: Vec<String>) -> i32 {
    // `.wasm` paths (on the command line or in EMM_MEMORY_MANAGER) load through the sandbox.
    emm_sandbox::install_loader();
    let mut argv = argv.into_iter();
    let Some(name) = argv.next() else {
        eprint!("{}", help());
        return EXIT_CANNOT_RUN;
    };
    if matches!(name.as_str(), "help" | "--help" | "-h") {
        print!("{}", help());
        return EXIT_PASS;
    }
    if matches!(name.as_str(), "--version" | "-V") {
        println!("emm {}", env!("CARGO_PKG_VERSION"));
        return EXIT_PASS;
    }
    match COMMANDS.iter().find(|c| c.name == name) {
        Some(c) => {
            let args = Args::new(argv.collect());
            if args.has_help() {
                print!("{}", c.usage);
                return EXIT_PASS;
            }
            (c.run)(args)
        }
        None => {
            eprintln!("emm: no command {name:?}; run `emm help` for the commands");
            EXIT_CANNOT_RUN
        }
    }
}

/// The text of `emm help`.
pub fn help() -> String {
    let mut out = String::from(
        "emm: GPU memory management by the EMM contract\n\nusage: emm <command> [args]\n\ncommands:\n",
    );
    for c in COMMANDS {
        out.push_str(&format!("  {:<8} {}\n", c.name, c.summary));
    }
    out.push_str(
        "\n`emm <command> --help` shows a command's flags; `emm --version` the version.\n",
    );
    out
}

/// The backends `--backend` takes.
pub const BACKENDS: &[&str] = &["sim", "cuda"];

/// The backend named `name`.
///
/// # Errors
///
/// An unknown name, with the known ones.
pub fn backend(name: &str) -> Result<Arc<dyn Backend>, String> {
    match name {
        "sim" => Ok(Arc::new(SimBackend::new())),
        "cuda" => CudaBackend::open().map(|b| Arc::new(b) as Arc<dyn Backend>),
        other => Err(format!(
            "no backend {other:?}; this build has: {}",
            BACKENDS.join(", ")
        )),
    }
}
