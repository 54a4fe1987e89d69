//! emm-sim's integration tests, one module per topic, in one test binary.

mod presentation;
mod properties;
mod reliability;
mod rules;
mod snapshot;
mod vmm;

use emm_core::{Driver, HostAllocFlags, HostPtr, StreamId};
use emm_sim::SimDriver;

/// `bytes` of pinned host memory mapped into the device's address space.
fn mapped_host(g: &SimDriver, bytes: usize) -> HostPtr {
    let flags = HostAllocFlags {
        mapped: true,
        ..HostAllocFlags::default()
    };
    g.host_alloc(bytes, flags).unwrap()
}

/// Two non-blocking streams: nothing orders them with each other or with the legacy default
/// stream.
fn two_streams(g: &SimDriver) -> (StreamId, StreamId) {
    (
        g.stream_create(true).unwrap(),
        g.stream_create(true).unwrap(),
    )
}
