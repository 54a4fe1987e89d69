//! emm-cli: the `emm` command-line tool over the conformance suite (emm-conformance) and the
//! benchmarks (emm-bench): one file per subcommand, declared with clap in [`args`].
//!
//! A new subcommand is a new file with a `run` function, a variant of [`args::Commands`] with
//! its `*Args` struct, and one arm in [`main`]. Exit status: [`EXIT_PASS`] when all checks
//! pass, [`EXIT_FAIL`] when one fails, [`EXIT_CANNOT_RUN`] when the plugin cannot be loaded or
//! run, or the command line is wrong (clap's usage errors exit with 2 too, before any output).
//!
//! - [`args`]: the command line (clap derive): [`command`] builds it.
//! - [`progress`]: the progress bars (indicatif) and colours, on stderr.
//! - [`check`]: `emm check <plugin>`.
//! - [`list`]: `emm list`.
//! - [`replay`]: `emm replay <log.csv>`.
//! - [`bench`](mod@bench): `emm bench`'s plan and one-thread runs; `bench_run` chooses the mode;
//!   [`bench_threads`] the many-threads mode, [`bench_report`] the `--report` folder (extra measurements in [`bench_measure`], the peers' figures in
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

use std::ffi::OsString;
use std::sync::Arc;

use clap::error::ErrorKind;
use clap::Parser;
use emm_conformance::backend::Backend;
use emm_conformance::cuda_backend::CudaBackend;
/// The factory of a plugin name or `.wasm` path; the suite library resolves it.
pub use emm_conformance::resolve_plugin;
use emm_conformance::sim_backend::SimBackend;

pub use args::command;
use args::{Cli, Commands};

/// All checks passed.
pub const EXIT_PASS: i32 = 0;
/// A check failed.
pub const EXIT_FAIL: i32 = 1;
/// The plugin could not be loaded or run, or the command line is wrong.
pub const EXIT_CANNOT_RUN: i32 = 2;

/// Runs `emm` with the process's arguments `argv` (without the program name), as the binary
/// does; returns the exit status.
///
/// A closed stdout (`emm bench | head -1`) ends the process as it ends any Unix filter:
/// quietly, by `SIGPIPE`, where Rust's runtime would otherwise turn the failed write into a
/// panic. Paths may be any bytes; another value that is not UTF-8 is a usage error.
pub fn main_os(argv: impl IntoIterator<Item = OsString>) -> i32 {
    die_on_closed_pipe();
    run(argv)
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
    run(argv.into_iter().map(OsString::from))
}

/// Parses `argv` (a usage error, `--help` and `--version` end here, before any other output)
/// and runs the subcommand.
fn run(argv: impl IntoIterator<Item = OsString>) -> i32 {
    let name = OsString::from("emm");
    let cli = match Cli::try_parse_from(std::iter::once(name).chain(argv)) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and the version go to stdout with 0; usage errors to stderr with 2.
            let _ = e.print();
            return e.exit_code();
        }
    };
    // `.wasm` paths (on the command line or in EMM_MEMORY_MANAGER) load through the sandbox.
    emm_sandbox::install_loader();
    let quiet = cli.quiet;
    match cli.command {
        Commands::Check(a) => check::run(a, quiet),
        Commands::List(a) => list::run(a),
        Commands::Replay(a) => replay::run(a),
        Commands::Bench(a) => bench_run::run(a, quiet),
        Commands::Sweep(a) => sweep::run(a, quiet),
        Commands::Soak(a) => soak::run(a, quiet),
    }
}

/// The text of `emm help`.
pub fn help() -> String {
    command().render_help().to_string()
}

/// Prints a usage error of subcommand `sub` found after parsing (a value clap cannot judge
/// alone, such as a manager's name), as clap prints its own; returns [`EXIT_CANNOT_RUN`].
pub(crate) fn usage_error(sub: &str, message: impl std::fmt::Display) -> i32 {
    let mut cmd = command();
    cmd.build();
    let e = match cmd.find_subcommand_mut(sub) {
        Some(c) => c.error(ErrorKind::InvalidValue, message),
        None => cmd.error(ErrorKind::InvalidValue, message),
    };
    let _ = e.print();
    EXIT_CANNOT_RUN
}

/// A plugin path as a string, for the registry and the reports.
///
/// # Errors
///
/// A path that is not UTF-8, which the registry cannot name.
pub(crate) fn utf8_plugins(plugins: Vec<OsString>) -> Result<Vec<String>, String> {
    plugins
        .into_iter()
        .map(|p| {
            p.into_string().map_err(|p| {
                format!(
                    "the plugin path {} is not UTF-8; name it by a UTF-8 path (a link)",
                    p.to_string_lossy()
                )
            })
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use clap::ValueEnum;
    use emm_core::mr::named::NAMED_RESOURCES;

    use super::args::{Backend, RESOURCES, WORKLOADS};

    /// The names spelled out in `args` (which builds without emm-core) are emm-core's.
    #[test]
    fn the_command_lines_names_are_emm_cores() {
        let named: Vec<&str> = NAMED_RESOURCES.iter().map(|(n, _)| *n).collect();
        assert_eq!(RESOURCES.as_slice(), named.as_slice());
        assert_eq!(WORKLOADS, emm_core::workloads::NAMES);
        let backends: Vec<&str> = Backend::value_variants().iter().map(|b| b.name()).collect();
        assert_eq!(backends, super::BACKENDS);
    }
}
