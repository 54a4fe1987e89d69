//! emm-sim's integration tests, one module per topic, in one test binary.

mod presentation;
mod properties;
mod reliability;
mod rules;
mod snapshot;
mod vmm;

use emm_core::{Driver, HostAllocFlags, HostPtr};
use emm_sim::SimDriver;

/// `bytes` of pinned host memory mapped into the device's address space.
fn mapped_host(g: &SimDriver, bytes: usize) -> HostPtr {
    let flags = HostAllocFlags {
        mapped: true,
        ..HostAllocFlags::default()
    };
    g.host_alloc(bytes, flags).unwrap()
}
