//! emm-sim: a deterministic simulated GPU implementing [`emm_core::Driver`].
//!
//! Tests can trust it: memory holds real bytes, streams run on virtual time with
//! happens-before tracked by vector clocks, and every misuse CUDA cannot see — use after free,
//! double free, out-of-bounds copies, races between streams — is reported in a [`SimReport`].
//! The same seed and the same calls give the same results and the same trace, byte for byte.
//!
//! Modules:
//! - [`config`]: [`SimConfig`], the cost model and injected faults.
//! - `driver`: [`SimDriver`], one simulated process, and its `Driver` implementation.
//! - `state`: the machine's state behind one lock: what is the whole machine's, and its parts.
//!
//! The parts the state owns, each with the methods that need only its own fields:
//! - `allocation_table`: the live and recently freed allocations.
//! - `byte_store`: what memory holds.
//! - `virtual_memory`: physical memory and the reservations' address range.
//! - `managed_residency`: managed memory's address range, the device-resident pages and the
//!   counters.
//! - `driver_pool_table`: the driver memory pools.
//! - `host_regions`: host memory in use and the registered ranges.
//! - `stream_table`: the live streams and events.
//! - `audit`: the injected faults, the violations found and the call trace.
//!
//! The operations, methods of the state that borrow the parts they need:
//! - `memory`: allocation, copies and the checks on every access.
//! - `streams`: streams and events on virtual time: queuing work, waiting, events.
//! - `managed`: managed-memory residency, migration, advice and oversubscription.
//! - `ipc`: IPC handles between simulated processes.
//! - `vmm`: virtual memory management: reserve, create, map, grant access, and the check on
//!   every access to a reservation.
//!
//! Below them all:
//! - `managed_range`: the pages and advice of one managed allocation.
//! - `reservation`: the virtual memory pieces: reservations, their mappings, physical memory.
//! - `address_space`: where each kind of memory takes its addresses.
//! - `clock`: vector clocks.
//! - [`trace`]: the call trace and its hash.
//! - [`report`]: violations and outstanding resources.

mod address_space;
mod allocation_table;
mod audit;
mod byte_store;
mod clock;
pub mod config;
mod driver;
mod driver_pool_table;
mod host_regions;
mod ipc;
mod managed;
mod managed_range;
mod managed_residency;
mod memory;
pub mod report;
mod reservation;
mod state;
mod stream_table;
mod streams;
pub mod trace;
mod virtual_memory;
mod vmm;

pub use byte_store::POISON;
pub use config::{CostModel, Fault, SimConfig, GIB, MIB};
pub use driver::SimDriver;
pub use managed_range::ManagedAdvice;
pub use managed_residency::ManagedStats;
pub use report::{Leak, Outstanding, SimReport, Violation};
pub use trace::{CallKind, TraceEvent};
