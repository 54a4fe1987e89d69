//! RMM memory event log replay: run an [`EventLog`] (emm-core's parser of the CSV that RMM's
//! `logging_resource_adaptor` and emm's `LoggingAdaptor` write) against any
//! [`DeviceMemoryResource`](emm_core::mr::DeviceMemoryResource) and report time, peak memory
//! held and live, fragmentation and leaks. The `emm replay` subcommand is a thin layer over
//! this.
//!
//! Modules:
//! - [`options`]: [`ReplayOptions`]: [`Threading`], [`HeldProbe`].
//! - [`replayer`]: [`replay`], every stream and every thread's order kept.
//! - [`report`]: [`ReplayReport`] and what it lists.
//!
//! The log's types are re-exported from `emm_core::mr::event_log`.
//!
//! # Examples
//!
//! ```
//! use emm_bench::replay::{replay, EventLog, ReplayOptions};
//! # fn run(resource: &dyn emm_core::mr::DeviceMemoryResource) -> Result<(), Box<dyn std::error::Error>> {
//! let log = EventLog::parse_str(
//!     "Thread,Time,Action,Pointer,Size,Stream\n\
//!      7,10:00:00.000001,allocate,0x7f0000000000,1024,0x0\n\
//!      7,10:00:00.000002,free,0x7f0000000000,1024,0x0\n",
//! )?;
//! let report = replay(&log, resource, &ReplayOptions::default())?;
//! assert_eq!((report.allocations, report.frees), (1, 1));
//! println!("{report}");
//! # Ok(()) }
//! ```

pub mod options;
pub mod replayer;
pub mod report;

pub use emm_core::mr::event_log::{
    EventLog, LogAction, LogEvent, LogSummary, ReplayError, TimeOfDay, HEADER, MAX_LINE_BYTES,
    MICROS_PER_DAY,
};
pub use options::{HeldProbe, Pace, ReplayOptions, Threading, MAX_REPLAY_THREADS};
pub use replayer::{replay, MAX_PACED_GAP_NS};
pub use report::{LoggedAllocation, ReplayFailure, ReplayReport, SizeMismatch};
