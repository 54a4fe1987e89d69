//! emm-conformance: checks any EMM plugin against the contract by property testing, on the
//! simulated GPU (and, through [`Backend`], on a real one), and shrinks every failure to the
//! shortest sequence of calls that breaks a rule, with a command that replays it.
//!
//! ```no_run
//! use emm_conformance::{check, Config};
//! use emm_core::managers::DefaultManager;
//!
//! let report = check(&*DefaultManager::factory(), &Config::new(42));
//! println!("{}", report.to_table(false));
//! assert!(report.passed);
//! ```
//!
//! Modules:
//! - [`checks`]: the named checks and the sentence each enforces ([`CHECKS`]).
//! - [`assertions`]: one `check_<rule>` per sentence.
//! - [`model`]: the reference model (live and freed address ranges).
//! - [`sut`]: the system under test: a manager on a machine, driven one [`Op`] at a time.
//! - [`transition`]: [`Op`], every operation a case can make.
//! - [`strategy`]: the weights cases are drawn with, and the fixed scenarios.
//! - [`sandboxed`]: [`sandboxed::Sandboxed`], a wasm plugin's factory whose statistics the
//!   suite checks.
//! - [`runner`]: [`check`]: parallel cases, shrinking; [`runner::replay`] runs a regression
//!   file's case again.
//! - [`report`]: [`Report`]: table and JSON.
//! - [`replay`]: regression files, written and read.
//! - [`config`]: [`Config`]: depth, seed (`EMM_SEED`), backend.
//! - [`coverage`]: [`coverage::Coverage`]: what a run exercised; checks it could not exercise are skipped.
//! - [`backend`]: [`Backend`] and [`Observes`]: where cases run and what is seen there.
//! - [`sim_backend`]: [`SimBackend`], the simulated GPU.
//! - [`cuda_backend`]: [`CudaBackend`], the real GPU.
//! - [`resolve`]: [`resolve_plugin`]: a built-in manager's name or a `.wasm` plugin's path.
//! - [`verdict`]: a run's verdict as a record of the gate's store ([`emm_sandbox::gate`]).
//! - [`sweep`]: the fault-injection sweep (`emm sweep`).
//! - [`stress`]: concurrency stress with seeded op lists and a replayable order.
//! - [`soak`]: random workloads for a set time with faults and quarantines (`emm soak`).

pub mod assertions;
pub mod backend;
pub mod checks;
pub mod config;
pub mod coverage;
pub mod cuda_backend;
pub mod model;
pub mod replay;
pub mod report;
pub mod resolve;
pub mod runner;
pub mod sandboxed;
pub mod sim_backend;
pub mod soak;
pub mod strategy;
pub mod stress;
pub mod sut;
pub mod sweep;
pub mod transition;
pub mod verdict;

pub use backend::{Backend, Machine, Observes};
pub use checks::{CheckId, CHECKS};
pub use config::Config;
pub use cuda_backend::CudaBackend;
pub use report::Report;
pub use resolve::resolve_plugin;
pub use runner::check;
pub use sim_backend::SimBackend;
pub use transition::{Op, Size};
