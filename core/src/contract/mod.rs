//! The EMM plugin contract: managers, pointers, contexts, deferred cleanup and IPC.
//!
//! The contract of NBEP 7 (<https://numba.readthedocs.io/en/stable/proposals/external-memory-management.html>)
//! as shipped in Numba's EMM plugin reference
//! (<https://numba.readthedocs.io/en/stable/cuda/external-memory.html>); where they differ emm
//! follows the reference, and [`manager`] lists the
//! differences. Modules:
//! - [`manager`]: the [`MemoryManager`] trait (interface v1 plus `memallocmanaged` and the
//!   stream-ordered extension), [`Capabilities`], [`MemoryInfo`], [`INTERFACE_VERSION`].
//! - [`pointer`](mod@pointer): [`MemoryPointer`] — owners, views, finalizers that run exactly once.
//! - [`host_memory`]: [`MappedMemory`], [`PinnedMemory`], [`HostMemory`].
//! - [`managed`]: [`ManagedMemory`], unified memory.
//! - [`finalizer`]: [`Finalizer`], [`Dealloc`], [`DeallocSink`].
//! - [`pending`]: [`PendingDeallocs`], Numba's deferred deallocation.
//! - [`guard`]: [`DeferCleanupGuard`], what `defer_cleanup` returns.
//! - [`ipc`]: [`IpcHandle`] (serde) and the default `get_ipc_handle`.
//! - [`ipc_device`]: [`open_on_device`]: a handle opened for another device, directly or staged.
//! - [`context`]: [`Context`], one context bound to one manager instance.
//! - [`stream`]: [`Stream`] and [`Event`], owned by a context.
//! - [`selection`]: process-wide [`set_memory_manager`] and `EMM_MEMORY_MANAGER`.
//! - [`error`]: [`EmmError`], every failure of the contract.

pub mod context;
pub mod error;
pub mod finalizer;
pub mod guard;
pub mod host_memory;
pub mod ipc;
pub mod ipc_device;
pub mod managed;
pub mod manager;
pub mod pending;
pub mod pointer;
pub mod selection;
pub mod stream;

pub use context::Context;
pub use error::{EmmError, EmmResult};
pub use finalizer::{Dealloc, DeallocSink, Finalizer};
pub use guard::DeferCleanupGuard;
pub use host_memory::{HostMemory, MappedMemory, PinnedMemory};
pub use ipc::{get_ipc_handle_via_driver, IpcHandle, SourceInfo};
pub use ipc_device::{open_on_device, IpcAccess, IpcImport};
pub use managed::ManagedMemory;
pub use manager::{
    check_interface_version, Capabilities, MemoryInfo, MemoryManager, INTERFACE_VERSION,
};
pub use pending::{PendingDeallocs, PendingDeallocsConfig};
pub use pointer::{MemoryPointer, PinOwner, Released};
pub use selection::{
    clear_memory_manager, current_factory, register_manager, resolve_selection, set_memory_manager,
    Choice, ManagerFactory, ManagerTarget, Resolution, Selected, MANAGER_ENV_VAR,
};
pub use stream::{Event, Stream};
