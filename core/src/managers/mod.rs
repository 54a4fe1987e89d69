//! The built-in memory managers (EMM plugins).
//!
//! - [`default`]: [`DefaultManager`], Numba's own behaviour — direct driver allocation with
//!   deferred, batched deallocation. Registered as `default`.
//! - [`host_only`]: [`HostOnlyManager`], the host side of the contract over any
//!   [`crate::mr::DeviceMemoryResource`]: how a resource chain becomes a plugin.
//! - [`resource_manager`]: [`ResourceManagerFactory`], `HostOnlyManager` over a named resource
//!   chain: the built-in `pool`, `arena`, `binning`, `async` and `managed` managers.
//! - `manager_base`: `ManagerBase`, what both managers share: the driver and
//!   context, pending deallocations, initialization, pinned, mapped and managed memory, IPC.

pub mod default;
pub mod host_only;
mod manager_base;
pub mod resource_manager;

pub use default::{DefaultManager, DEFAULT_MANAGER_NAME};
pub use host_only::HostOnlyManager;
pub use resource_manager::ResourceManagerFactory;

#[cfg(test)]
mod mock_tests;
