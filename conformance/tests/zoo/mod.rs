//! The zoo: deliberately broken plugins, one per bug class of the issue, each a correct
//! manager with one thing broken.

#![allow(dead_code, reason = "each test file uses a part")]
#![allow(clippy::unwrap_used, reason = "test helpers")]

pub mod block;
pub mod broken;

pub use broken::{Bug, ZooFactory};
