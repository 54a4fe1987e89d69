//! The command line of `emm`, declared with clap: [`Cli`], one [`Commands`] variant per
//! subcommand and one `*Args` struct each, and [`command`] to build it.
//!
//! This file uses clap and std only, so `cargo xtask completions` and `cargo xtask man` build
//! the same definitions (`#[path]`-included) without emm's engine. Names that live in
//! emm-core (the resources, the workloads) are spelled out here; a test in `cli` checks they
//! agree.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

/// The most random cases `--cases` takes: a million cases run for minutes even against the
/// fastest manager, and the count fits a verdict's depth.
pub const MAX_CASES: usize = 1_000_000;
/// The most operations `--ops` takes: a case is a vector of this many operations, made and
/// shrunk on every thread at once.
pub const MAX_OPS: usize = 10_000;

/// The names `--resource` takes: emm-core's `NAMED_RESOURCES`, in its order.
pub const RESOURCES: [&str; 9] = [
    "pool",
    "pool-vmm",
    "pool-vmm-tight",
    "sharded",
    "arena",
    "binning",
    "async",
    "managed",
    "cuda",
];
/// The names `--workload` takes: emm-core's `workloads::NAMES`.
pub const WORKLOADS: [&str; 3] = ["W1", "W2", "W3"];

/// The exit statuses, for the end of every help text.
const EXIT_STATUS: &str = "exit status: 0 pass, 1 a check failed, 2 cannot run or a usage error";

/// GPU memory management by the EMM contract
#[derive(Debug, Parser)]
#[command(
    name = "emm",
    version = env!("CARGO_PKG_VERSION"),
    arg_required_else_help = true,
    after_help = EXIT_STATUS,
)]
pub struct Cli {
    /// No progress and no chatter on stderr: only results and errors
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// The subcommand.
    #[command(subcommand)]
    pub command: Commands,
}

/// Every subcommand, in the order `emm help` lists them.
#[derive(Debug, Subcommand)]
pub enum Commands {
    /// Check a plugin against the EMM contract (emm check default)
    ///
    /// A .wasm plugin runs on a real GPU only after it has passed on the simulated one, with the
    /// same config (EMM_PLUGIN_CONFIG) and limits, at the depth EMM_GATE_MIN_DEPTH asks (default
    /// 256x64, the default depth here), and while no record of its bytes failed; EMM_GATE=warn lets
    /// an unchecked plugin through with a warning (never one that failed). Records are
    /// authenticated with a per-user key ($EMM_GATE_KEY, else ~/.config/emm/gate.key, made on first
    /// use); emm never removes or replaces a failing record.
    Check(CheckArgs),
    /// List the checks with their rules, and the built-in plugins
    ///
    /// Print every check of `emm check` with the sentence of the source documents it enforces, then
    /// the built-in plugins and the backends.
    List(ListArgs),
    /// Replay an RMM-format allocation log or a PyTorch memory snapshot against a resource
    ///
    /// Replay every event of an RMM-format log (header Thread,Time,Action,Pointer,Size,Stream) —
    /// every stream, every thread's order kept — or the program's allocations and frees in a
    /// PyTorch memory snapshot (recorded with torch.cuda.memory._record_memory_history), and
    /// report time, peak memory held, fragmentation and leaks. A corrupt or truncated log is
    /// refused with the line number.
    Replay(ReplayArgs),
    /// Time the standard workloads W1-W3 against named resources (emm bench --json)
    ///
    /// Replay the standard workloads against each resource the peers' way: one stream, one untimed
    /// warm-up pass, the median of the timed passes, ns per operation; and memory held from the
    /// device at peak over peak live bytes.
    Bench(BenchArgs),
    /// Fail every driver call of every manager in turn (emm sweep target/wasm/*.wasm)
    ///
    /// Run W1-W3 (cut to --ops ops) and the suite's fixed op sequence against every built-in
    /// manager and each .wasm plugin named, on the simulated GPU, failing the k-th driver call the
    /// manager makes for every k and every failure kind. At every position: no panic, the error
    /// reaches the caller naming the failure, allocations made before keep their contents, and
    /// after teardown nothing is held. Prints positions x kinds swept and the time.
    Sweep(SweepArgs),
    /// Random workloads for N minutes with faults and quarantines (emm soak --minutes 30)
    ///
    /// Run random workloads (W1-W3 prefixes, 8-thread stress runs) against every built-in manager
    /// and each .wasm plugin named, each on a long-lived simulated GPU, with random driver failures
    /// every few rounds and a hostile plugin quarantined every few rounds. Fails when memory held
    /// after a reset grows, an allocation loses its contents, anything leaks, or resident memory
    /// creeps. Prints a summary.
    Soak(SoakArgs),
}

/// Where a subcommand runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// The simulated GPU
    Sim,
    /// The GPU of this machine
    Cuda,
}

impl Backend {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sim => "sim",
            Backend::Cuda => "cuda",
        }
    }
}

/// How `emm replay` orders a log's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReplayThreads {
    /// One thread, in log order
    Single,
    /// One thread per thread of the log, each keeping its order
    PerLogThread,
}

/// When `emm replay` runs each event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReplayPace {
    /// At its time in the log after the first event's
    Recorded,
    /// As soon as the event before is done
    Flat,
}

/// Which streams the threads of `emm bench --threads` allocate on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Streams {
    /// A stream per thread
    Own,
    /// The default stream, shared by all threads
    Shared,
}

/// `emm check`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "exit status: 0 all checks pass, 1 a check fails, 2 the plugin cannot be loaded \
or run, or a usage error"
)]
pub struct CheckArgs {
    /// A built-in manager (`emm list` shows them) or the path of a .wasm plugin
    #[arg(value_name = "PLUGIN")]
    pub plugin: OsString,
    /// Where to run: sim or cuda (the GPU of this machine) [default: sim; with --replay, the
    /// file's]
    #[arg(long, value_name = "NAME", value_enum)]
    pub backend: Option<Backend>,
    /// The run's seed (default: $EMM_SEED, else the constant 20261127)
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Random cases after the fixed scenarios [default: 256]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_CASES as u64))]
    pub cases: Option<u64>,
    /// Most operations in a case [default: 64]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_OPS as u64))]
    pub ops: Option<u64>,
    /// Cases run at once (default: every core; one on cuda)
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Where failures are written [default: .emm/regressions]
    #[arg(long, value_name = "DIR")]
    pub regressions: Option<PathBuf>,
    /// Write no regression files
    #[arg(long)]
    pub no_regressions: bool,
    /// The verdict store: a .wasm plugin's run on sim records its verdict there, and it runs
    /// on cuda only with a passing one (default: $EMM_VERDICT_DIR, else
    /// ~/.local/share/emm/verdicts); a built-in manager's run is recorded only when DIR is
    /// given
    #[arg(long, value_name = "DIR")]
    pub verdicts: Option<PathBuf>,
    /// Record no verdict
    #[arg(long)]
    pub no_verdict: bool,
    /// Run the case of a regression file again and give its verdict
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Print the report as JSON (for CI)
    #[arg(long)]
    pub json: bool,
    /// No colours (NO_COLOR in the environment too)
    #[arg(long)]
    pub no_color: bool,
}

/// `emm list`.
#[derive(Debug, Clone, clap::Args)]
pub struct ListArgs {
    /// Print the list as JSON
    #[arg(long)]
    pub json: bool,
}

/// `emm replay`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "exit status: 0 the log replayed, 1 the replay failed, 2 the log or the resource \
cannot be used, or a usage error"
)]
pub struct ReplayArgs {
    /// The log: RMM's CSV (LoggingAdaptor writes one), or a PyTorch memory snapshot
    /// (torch.cuda.memory._dump_snapshot's pickle, plain or .gz)
    #[arg(value_name = "LOG")]
    pub log: PathBuf,
    /// The resource to replay against
    #[arg(long, value_name = "NAME", default_value = "pool-vmm-tight", value_parser = PossibleValuesParser::new(RESOURCES))]
    pub resource: String,
    /// Where to run: sim (80 GiB, contents and race tracking off) or cuda (this GPU)
    #[arg(long, value_name = "NAME", value_enum, default_value_t = Backend::Sim)]
    pub backend: Backend,
    /// The replay's threads
    #[arg(long, value_name = "MODE", value_enum, default_value_t = ReplayThreads::Single)]
    pub threads: ReplayThreads,
    /// When each event runs: at its time in the log (the host sleeps through the program's own
    /// work; virtual time on sim, so free), or each as soon as the one before is done
    #[arg(long, value_name = "PACE", value_enum, default_value_t = ReplayPace::Recorded)]
    pub pace: ReplayPace,
    /// The report as one JSON object
    #[arg(long)]
    pub json: bool,
}

/// `emm bench`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = EXIT_STATUS
)]
pub struct BenchArgs {
    /// Where to run: sim (80 GiB, contents tracking off) or cuda (this GPU)
    #[arg(long, value_name = "NAME", value_enum, default_value_t = Backend::Sim)]
    pub backend: Backend,
    /// Comma-separated resources [default: all of them]
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = PossibleValuesParser::new(RESOURCES))]
    pub resource: Option<Vec<String>>,
    /// Comma-separated workloads [default: all]
    #[arg(long, value_name = "LIST", value_delimiter = ',', ignore_case = true, value_parser = PossibleValuesParser::new(WORKLOADS))]
    pub workload: Option<Vec<String>>,
    /// Timed passes
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub passes: usize,
    /// Many threads instead: each of LIST (e.g. 1,2,4,8,16) threads replays its own copy of
    /// each workload at once; ops/s and held / peak live
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// With --threads: comma-separated own (a stream per thread), shared (the default
    /// stream) [default: both]
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_enum)]
    pub streams: Option<Vec<Streams>>,
    /// With --threads or --report: operations per thread in a timed round, at least (each
    /// thread replays its list to reach it) [default: 1000000; with --report 20000, so that
    /// the many-threads section fits its time budget]
    #[arg(long, value_name = "N")]
    pub round_ops: Option<usize>,
    /// Instead, on a simulated node of each of LIST devices (e.g. 1,2,4,8,16, each 1 to 16)
    /// with every pair peer-enabled: virtual ns per op of one pass, where each cuMemAlloc
    /// pays peer registration
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=16))]
    pub devices: Option<Vec<u32>>,
    /// Everything into DIR: one thread, many threads (--threads, default 1,2,4,8,16;
    /// resources pool, sharded, arena; 20000 operations per thread a round), memory held
    /// against time (W1), cost against free holes, peer registration (sim only):
    /// results.jsonl, report.md and SVG charts. The many-threads section keeps to a time
    /// budget (--budget); report.md states the round size and budget and lists the cells
    /// skipped
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// With --report: seconds the report may run before its many-threads section starts
    /// no more cells (those left are skipped and listed in report.md; 0: no budget)
    #[arg(long, value_name = "SECONDS", default_value_t = 240)]
    pub budget: u64,
    /// With --report: the many-threads section's resources (default pool, sharded, arena;
    /// the shared pool is slow by 16 threads, so name fewer where a run must fit a time
    /// limit)
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = PossibleValuesParser::new(RESOURCES))]
    pub threads_resource: Option<Vec<String>>,
    /// Comma-separated outputs of the peers' harness (RESULT and THREADS lines) to put
    /// beside emm's figures in the report
    #[arg(long, value_name = "FILES", value_delimiter = ',')]
    pub peers: Vec<PathBuf>,
    /// One JSON object per line: resource, workload, ops, ns_per_op, peak_held_bytes,
    /// peak_live_bytes, backend, device
    #[arg(long)]
    pub json: bool,
}

/// `emm sweep`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "exit status: 0 every position passes, 1 one fails, 2 a plugin cannot be \
loaded, or a usage error"
)]
pub struct SweepArgs {
    /// .wasm plugins to sweep beside the built-in managers
    #[arg(value_name = "PLUGIN.WASM")]
    pub plugins: Vec<OsString>,
    /// Ops of each workload
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub ops: usize,
    /// Comma-separated CUDA codes, with or without CUDA_ERROR_ (default: all six:
    /// OUT_OF_MEMORY, INVALID_VALUE, LAUNCH_FAILED, ILLEGAL_ADDRESS, INVALID_HANDLE, UNKNOWN)
    #[arg(long, value_name = "LIST")]
    pub kinds: Option<String>,
    /// Comma-separated built-in managers [default: all of them]
    #[arg(long, value_name = "LIST")]
    pub only: Option<String>,
    /// Sweep every N-th position only
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub stride: usize,
    /// The suite's op sequence only
    #[arg(long)]
    pub no_workloads: bool,
    /// The simulator's seed
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
}

/// `emm soak`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "exit status: 0 nothing crept, 1 something did, 2 a plugin cannot be loaded, or \
a usage error"
)]
pub struct SoakArgs {
    /// .wasm plugins to soak beside the built-in managers
    #[arg(value_name = "PLUGIN.WASM")]
    pub plugins: Vec<OsString>,
    /// How long (fractions allowed)
    #[arg(long, value_name = "N", default_value_t = 1.0, value_parser = positive_minutes)]
    pub minutes: f64,
    /// Seed of the round choices
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Every N-th round runs with driver faults
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub fault_every: u64,
    /// Every N-th round quarantines a hostile plugin
    #[arg(long, value_name = "N", default_value_t = 7)]
    pub quarantine_every: u64,
    /// The longest workload round
    #[arg(long, value_name = "N", default_value_t = 5000)]
    pub max_ops: u64,
}

/// A positive, finite number of minutes.
fn positive_minutes(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(m) if m.is_finite() && m > 0.0 => Ok(m),
        _ => Err("give a positive number".to_string()),
    }
}

/// The whole command line of `emm`, for parsing, help, completions and the man page.
pub fn command() -> clap::Command {
    Cli::command()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_definitions_are_consistent() {
        command().debug_assert();
    }
}
