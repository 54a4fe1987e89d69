//! RMM's memory event log: the CSV format RMM's `logging_resource_adaptor` and emm's
//! [`LoggingAdaptor`](crate::mr::adaptor::LoggingAdaptor) write, its strict parser, and
//! PyTorch memory snapshots read as the same events. The
//! replay of a log against a resource (`emm replay`) is `emm_bench::replay`, over these types.
//!
//! Modules:
//! - [`event`]: [`LogEvent`], one line of the log, its [`LogAction`] and the [`HEADER`].
//! - [`log`]: [`EventLog`], strict parsing with line-numbered errors, and [`LogSummary`].
//! - [`torch_snapshot`]: PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`) read as
//!   event logs ([`EventLog::from_file`] tells the two formats apart).
//! - [`error`]: the error type of reading and replaying a log, [`ReplayError`].
//!
//! # Examples
//!
//! ```
//! use emm_core::mr::event_log::{EventLog, LogAction};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let log = EventLog::parse_str(
//!     "Thread,Time,Action,Pointer,Size,Stream\n\
//!      7,10:00:00.000001,allocate,0x7f0000000000,1024,0x0\n\
//!      7,10:00:00.000002,free,0x7f0000000000,1024,0x0\n",
//! )?;
//! assert_eq!(log.events().len(), 2);
//! assert_eq!(log.events()[1].action, LogAction::Free);
//! # Ok(()) }
//! ```

pub mod error;
pub mod event;
pub mod log;
pub mod torch_snapshot;

pub use error::ReplayError;
pub use event::{LogAction, LogEvent, TimeOfDay, HEADER, MICROS_PER_DAY};
pub use log::{EventLog, LogSummary, MAX_LINE_BYTES};
