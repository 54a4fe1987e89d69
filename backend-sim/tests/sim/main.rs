//! emm-sim's integration tests, one module per topic, in one test binary.

mod presentation;
mod properties;
mod reliability;
mod rules;
mod snapshot;
mod vmm;
