//! emm-core: GPU memory management built around the External Memory Management (EMM) plugin
//! contract of Numba's NBEP 7, with RMM-style memory resources.
//!
//! Modules:
//! - [`driver`]: the [`Driver`] trait, the one seam between emm and a GPU, and its typed handles.
//! - [`error`]: [`DriverError`] and CUDA result codes ([`CudaCode`]).
//! - [`containers`]: `DeviceBuffer`, `DeviceVec`, `DeviceScalar`, streams, the current resource.
//! - [`attribution`]: caller tags, so a backend can log which layer made each driver call.
//! - [`contract`]: the EMM plugin contract: [`contract::MemoryManager`], pointers, [`contract::Context`].
//! - [`managers`]: the built-in managers ([`managers::DefaultManager`], [`managers::HostOnlyManager`]).
//! - [`mr`]: memory resources and adaptors (RMM's model): the [`mr::DeviceMemoryResource`] trait.
//! - [`unified`]: unified memory: the caching managed allocator, `ManagedBuffer`, the switch.
//! - [`units`]: byte-count formatting for error messages.
//! - [`workloads`]: the standard allocation workloads W1, W2, W3.

pub mod attribution;
pub mod containers;
pub mod contract;
pub mod driver;
pub mod error;
pub mod managers;
pub mod mr;
pub(crate) mod sync;
pub mod unified;
pub mod units;
pub mod workloads;

pub use containers::{reinitialize, reinitialize_chains, ReinitializeOptions, ReinitializedChain};
pub use driver::{
    Advice, ContextId, DeviceId, DeviceProperties, DevicePtr, Driver, EventId, HostAllocFlags,
    HostPtr, IpcMemHandle, Location, MemInfo, MemPoolId, MemPoolUsage, PhysHandle, StreamId,
};
pub use error::{CudaCode, DriverError, DriverResult};
