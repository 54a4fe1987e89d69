//! The gate: a `.wasm` plugin reaches a real GPU only after it has passed the EMM contract on
//! the simulated GPU.
//!
//! `emm check plugin.wasm` (on the simulator) writes a [`VerdictRecord`] into a
//! [`VerdictStore`]: the sha256 of the plugin's bytes ([`ContentHash`]), the ABI and suite
//! versions, the config and limits it ran with, the depth, seed, date and every check's
//! result, authenticated by an HMAC under a per-user key kept outside the store. When a
//! [`crate::PluginFactory`] makes a manager for a driver that is not simulated
//! (`Driver::is_simulated`), it asks [`GatePolicy::admit`]: a passing, intact record of the
//! plugin's exact bytes at [`GatePolicy::min_depth`] or deeper lets it through; otherwise a
//! [`GateError`] says why and which command to run. Every loading path goes through the
//! factory (`EMM_MEMORY_MANAGER`, `emm check`, the Rust API, the C ABI), so every path is
//! gated; the simulator never needs a verdict. Not gated: a `PluginResource` or
//! `PluginManager` built by hand from a `PluginModule` (the building blocks the factory uses,
//! for tests and benchmarks); code that does so picks its own upstream memory and answers for
//! it.
//!
//! The overrides (`EMM_GATE`, [`GateMode`]): `warn` lets an unchecked or shallowly checked
//! plugin through with a warning naming the risk; it never lets through a plugin with a failed
//! or an edited record. `allow-failed`, the loud form, lets anything through with a louder
//! warning, for comparing a failing plugin on the simulator and on hardware.
//!
//! - [`content_hash`]: [`ContentHash`], the sha256 of a plugin.
//! - [`subject`]: [`Subject`], what a verdict is about.
//! - [`depth`]: [`Depth`] (cases × operations) and [`DEFAULT_MIN_DEPTH`].
//! - [`check_verdict`]: [`CheckVerdict`], one check's outcome.
//! - [`key`]: [`GateKey`], the per-user key records are authenticated with.
//! - [`record`]: [`VerdictRecord`], its [`Settings`] and its MAC.
//! - [`store`]: [`VerdictStore`], the folder of records (layout in its doc).
//! - [`stored_record`]: [`StoredRecord`], one file of it, judged.
//! - [`mode`]: [`GateMode`] and the override `EMM_GATE`.
//! - [`policy`]: [`GatePolicy`] and [`GatePolicy::admit`].
//! - [`admission`]: [`Admission`], why a plugin was let through.
//! - [`error`]: [`GateError`], why it was not.

pub mod admission;
pub mod check_verdict;
pub mod content_hash;
pub mod depth;
pub mod error;
mod folders;
pub mod key;
pub mod mode;
pub mod policy;
pub mod record;
pub mod store;
pub mod stored_record;
pub mod subject;

pub use admission::Admission;
pub use check_verdict::CheckVerdict;
pub use content_hash::ContentHash;
pub use depth::{Depth, DEFAULT_MIN_DEPTH};
pub use error::GateError;
pub use key::{GateKey, KEY_VAR};
pub use mode::{GateMode, GATE_VAR};
pub use policy::{GatePolicy, MIN_DEPTH_VAR};
pub use record::{utc_date, Settings, VerdictRecord, RECORD_FORMAT};
pub use store::{VerdictStore, MAX_RECORD_BYTES, VERDICT_DIR_VAR};
pub use stored_record::StoredRecord;
pub use subject::Subject;
