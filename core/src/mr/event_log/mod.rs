//! RMM memory event log replay, as a library: parse a CSV log written by RMM's
//! `logging_resource_adaptor` or emm's [`LoggingAdaptor`](crate::mr::adaptor::LoggingAdaptor),
//! then replay it against any [`DeviceMemoryResource`](crate::mr::DeviceMemoryResource) and
//! report time, peak memory held and live, fragmentation and leaks. The `emm replay`
//! subcommand is a thin layer over this.
//!
//! Modules:
//! - [`event`]: [`LogEvent`], one line of the log, its [`LogAction`] and the [`HEADER`].
//! - [`log`]: [`EventLog`], strict parsing with line-numbered errors, and [`LogSummary`].
//! - [`error`]: the error type, [`ReplayError`].
//! - [`options`]: [`ReplayOptions`]: [`Threading`], [`HeldProbe`].
//! - [`replayer`]: [`replay`], every stream and every thread's order kept.
//! - [`report`]: [`ReplayReport`] and what it lists.
//!
//! # Examples
//!
//! ```
//! use emm_core::mr::replay::{replay, EventLog, ReplayOptions};
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

pub mod error;
pub mod event;
pub mod log;
pub mod options;
pub mod replayer;
pub mod report;

pub use error::ReplayError;
pub use event::{LogAction, LogEvent, TimeOfDay, HEADER, MICROS_PER_DAY};
pub use log::{EventLog, LogSummary, MAX_LINE_BYTES};
pub use options::{HeldProbe, ReplayOptions, Threading, MAX_REPLAY_THREADS};
pub use replayer::replay;
pub use report::{LoggedAllocation, ReplayFailure, ReplayReport, SizeMismatch};
