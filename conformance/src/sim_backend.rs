//! [`SimBackend`]: the simulated GPU (`emm-sim`) as a [`Backend`]; it observes everything.

use std::sync::Arc;

use emm_core::attribution::CallerScope;
use emm_core::{DevicePtr, Driver};
use emm_sim::{Fault, SimConfig, SimDriver, Violation, GIB};

use emm_sim::CallKind;

use crate::backend::{Attributed, Backend, Held, Machine, Observes, Seen, UpstreamCalls};
use crate::sut::HARNESS;

/// Device memory of the simulated GPU the suite uses by default: small enough that
/// near-total requests and out of memory come up, large enough for every size class.
pub const SIM_MEMORY: u64 = 80 * GIB;

/// The simulated GPU, a fresh machine per case seeded from the case's seed.
#[derive(Debug, Clone)]
pub struct SimBackend {
    memory: u64,
    hardware: bool,
    driver_reserve: u64,
    faults: Vec<Fault>,
}

impl SimBackend {
    /// A backend whose machines have one device of [`SIM_MEMORY`] bytes.
    pub fn new() -> Self {
        SimBackend {
            memory: SIM_MEMORY,
            hardware: false,
            driver_reserve: 0,
            faults: Vec::new(),
        }
    }

    /// With `bytes` of device memory per machine.
    pub fn with_memory(mut self, bytes: u64) -> Self {
        self.memory = bytes;
        self
    }

    /// With machines whose driver keeps `bytes` of each device for itself while
    /// `cuMemGetInfo` reports them free, as a GPU keeps memory for page tables
    /// ([`SimConfig::driver_reserve`](emm_sim::SimConfig::driver_reserve)).
    pub fn with_driver_reserve(mut self, bytes: u64) -> Self {
        self.driver_reserve = bytes;
        self
    }

    /// With machines whose driver fails calls as `fault` says from the start
    /// ([`SimConfig::fault`]): how a suite's reports read when a GPU misbehaves.
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.faults.push(fault);
        self
    }

    /// With machines that present themselves as hardware (`Driver::is_simulated` is false):
    /// the stubbed device that takes a `.wasm` plugin through the gate as a real GPU does.
    pub fn present_as_hardware(mut self, on: bool) -> Self {
        self.hardware = on;
        self
    }
}

impl Default for SimBackend {
    fn default() -> Self {
        SimBackend::new()
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn observes(&self) -> Observes {
        Observes::EVERYTHING
    }

    fn machine(&self, seed: u64) -> Result<Box<dyn Machine>, String> {
        let config = SimConfig::new(seed)
            .memory_per_device(self.memory)
            .driver_reserve(self.driver_reserve)
            .present_as_hardware(self.hardware);
        let config = self.faults.iter().cloned().fold(config, SimConfig::fault);
        let driver = SimDriver::new(config)?;
        // The second process and its doorbell exist from the start, so that the doorbell
        // never competes with the plugin for memory (the baseline includes it).
        let second = driver.process();
        let bell = {
            let _h = CallerScope::enter(HARNESS);
            second
                .mem_alloc(1)
                .map_err(|e| format!("the second process's doorbell: {e}"))?
        };
        Ok(Box::new(SimMachine {
            driver: Arc::new(driver),
            second: Arc::new(second),
            bell,
        }))
    }
}

struct SimMachine {
    driver: Arc<SimDriver>,
    second: Arc<SimDriver>,
    /// One byte of the second process's, exported to carry its clock back.
    bell: DevicePtr,
}

fn seen(v: &Violation) -> Seen {
    let text = v.to_string();
    match v {
        Violation::Race { .. } => Seen::Race(text),
        Violation::UseAfterFree { .. } => Seen::UseAfterFree(text),
        Violation::DoubleFree { .. } | Violation::InvalidFree { .. } => Seen::BadFree(text),
        Violation::OutOfBounds { .. } => Seen::OutOfBounds(text),
        _ => Seen::Other(text),
    }
}

impl Machine for SimMachine {
    fn driver(&self) -> Arc<dyn Driver> {
        self.driver.clone()
    }

    fn second_process(&self) -> Option<Arc<dyn Driver>> {
        Some(self.second.clone())
    }

    fn importer_done(&self) -> Result<(), String> {
        // An IPC handle carries its exporter's clock to the importer (the simulator's model
        // of a message between processes): the doorbell exported the other way carries the
        // second process's clock back.
        self.second
            .ipc_get_mem_handle(self.bell)
            .and_then(|h| self.driver.ipc_open_mem_handle(&h))
            .and_then(|a| self.driver.ipc_close_mem_handle(a))
            .map_err(|e| e.to_string())
    }

    fn seen_since(&self, skip: usize) -> Vec<Seen> {
        let report = self.driver.report();
        report.violations.iter().skip(skip).map(seen).collect()
    }

    fn device_allocations(&self) -> Vec<Attributed> {
        self.driver
            .trace()
            .iter()
            .filter(|e| e.process == 0 && e.call.allocates_device_memory() && e.result.is_ok())
            .map(|e| Attributed {
                call: e.call.name(),
                bytes: e.args[0],
                caller: e.caller,
            })
            .collect()
    }

    fn held(&self) -> Option<Held> {
        let r = self.driver.report();
        Some(Held {
            pinned: r.pinned_memory.count,
            registrations: r.registrations.count,
            managed: r.managed_memory.count,
        })
    }

    fn trace_hash(&self) -> Option<u64> {
        Some(self.driver.trace_hash())
    }
    fn call_mark(&self) -> Option<u64> {
        Some(self.driver.call_count())
    }
    fn upstream_since(&self, mark: u64) -> Option<UpstreamCalls> {
        let mut calls = UpstreamCalls::default();
        for e in self.driver.trace().iter().rev() {
            if e.seq < mark {
                break;
            }
            if e.process != 0 || e.caller == HARNESS {
                continue;
            }
            if e.call.allocates_device_memory() && e.result.is_err() {
                calls.refused_allocations += 1;
            }
            if matches!(e.call, CallKind::MemFree | CallKind::MemRelease) && e.result.is_ok() {
                calls.returns += 1;
            }
        }
        Some(calls)
    }
}
