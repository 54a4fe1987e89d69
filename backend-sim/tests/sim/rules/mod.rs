//! One test per rule of the simulated GPU.

use crate::two_streams;

use emm_core::attribution::CallerScope;
use emm_core::{Advice, CudaCode, DeviceId, DevicePtr, Driver, HostAllocFlags, Location, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, Violation, GIB, MIB, POISON};

fn gpu() -> SimDriver {
    SimDriver::new(SimConfig::new(1).memory_per_device(GIB)).unwrap()
}

fn code<T: std::fmt::Debug>(r: emm_core::DriverResult<T>) -> CudaCode {
    r.unwrap_err().code
}

mod contexts;
mod host;
mod ipc;
mod managed;
mod memory;
mod pools;
mod streams;
