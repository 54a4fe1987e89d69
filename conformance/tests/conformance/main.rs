//! emm-conformance's integration tests, one module per topic, in one test binary. `zoo` holds
//! the deliberately broken managers the suite must catch.

mod alignments;
mod builtins;
mod guest_memory;
mod oom_at_limit;
mod replay;
mod snapshots;
mod soak;
mod stress;
mod sweep;
mod zoo;
mod zoo_is_caught;
mod zoo_streams;
