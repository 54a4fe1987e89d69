//! emm-sandbox: untrusted allocation policies compiled to WebAssembly, run as EMM memory
//! managers without trusting them.
//!
//! A plugin is an allocation *policy*: it asks the host for chunks of device memory and
//! answers each request with a chunk and an offset. The host checks every answer before it
//! becomes a device pointer, owns the chunks and knows every live allocation, so a plugin that
//! lies, traps, loops or grows without bound is quarantined and nothing handed out is lost.
//!
//! Modules:
//! - [`abi`]: the versioned core-module ABI, all of it (prose in `plugins/ABI.md`).
//! - [`limits`]: [`PluginLimits`], fuel, deadline, memory cap, stack, module size, restarts.
//! - [`fault`]: [`PluginFault`], [`Rule`] and [`Breach`], why a plugin was quarantined.
//! - [`error`]: [`SandboxError`], why a plugin could not be loaded or started.
//! - [`module`]: [`PluginModule`], a compiled plugin checked against the ABI; `budget`: what a
//!   module may cost before it is compiled; `exports`: the checks of its imports and exports;
//!   `read`: reading a file (a plugin, a record, the gate's key) without blocking or reading
//!   without end.
//! - [`resource`]: [`PluginResource`], a plugin as a `DeviceMemoryResource`.
//! - `control`: its reset, trim, defer-cleanup scopes, statistics, breaches and logs.
//! - [`stats`]: [`PluginStats`], the host's snapshot of a plugin.
//! - [`manager`]: [`PluginManager`], a plugin as a `MemoryManager`.
//! - [`factory`]: [`PluginFactory`], [`load_plugin`] and the `EMM_MEMORY_MANAGER` loader
//!   ([`install_loader`]); the one way in, and where the gate stands.
//! - [`gate`]: the gate: a plugin runs on a real GPU only with a passing verdict
//!   ([`GatePolicy`], [`VerdictStore`], [`VerdictRecord`], [`GateError`]).
//! - [`host`]: the host functions a guest imports, [`LogLine`]; `stream_order`: the events
//!   behind `emm::stream_order`.
//! - `registry`: chunks and live allocations, with `chunk`, `live_map` (live allocations by
//!   address) and `start_bitmap` (where a chunk's allocations start) behind its O(1) checks;
//!   `instance`: one store and its calls; `ticker`: the epoch thread behind deadlines.

#![warn(clippy::cast_possible_truncation)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
#![warn(unsafe_op_in_unsafe_fn)]

pub mod abi;
mod budget;
mod chunk;
mod control;
pub mod error;
mod exports;
pub mod factory;
pub mod fault;
pub mod gate;
pub mod host;
mod instance;
pub mod limits;
mod live_map;
pub mod manager;
pub mod module;
mod read;
mod registry;
pub mod resource;
mod start_bitmap;
pub mod stats;
mod stream_order;
mod ticker;

pub use error::SandboxError;
pub use factory::{install_loader, load_plugin, loader, PluginFactory, CONFIG_ENV_VAR};
pub use fault::{Breach, PluginFault, Rule};
pub use gate::{
    Admission, ContentHash, Depth, GateError, GateMode, GatePolicy, VerdictRecord, VerdictStore,
};
pub use host::LogLine;
pub use limits::PluginLimits;
pub use manager::PluginManager;
pub use module::PluginModule;
pub use resource::PluginResource;
pub use stats::PluginStats;
