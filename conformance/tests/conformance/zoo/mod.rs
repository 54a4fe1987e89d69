//! The zoo: deliberately broken plugins, each a correct manager with one thing broken: native
//! ones ([`broken`]) and sandboxed wasm policies ([`wasm`]), which reach the suite through the
//! sandbox's host checks.

#![allow(dead_code, reason = "each test file uses a part")]
#![allow(clippy::unwrap_used, reason = "test helpers")]

pub mod block;
pub mod broken;
pub mod wasm;

pub use broken::{Bug, ZooFactory};
