//! [`SimBackend`]: the simulated GPU (`emm-sim`) as a [`Backend`]; it observes everything.

use std::sync::Arc;

use emm_core::attribution::CallerScope;
use emm_core::{DevicePtr, Driver};
use emm_sim::{SimConfig, SimDriver, Violation, GIB};

use emm_sim::CallKind;

use crate::backend::{Attributed, Backend, Held, Machine, Observes, Seen, UpstreamCalls};
use crate::sut::HARNESS;

/// Device memory of the simulated GPU the suite uses by default: small enough that
/// near-total requests and out of memory come up, large enough for every size class.
pub const SIM_MEMORY: u64 = 80 * GIB;

/// The simulated GPU, a fresh machine per case seeded from the case's seed.
#[derive(Debug, Clone)]
pub struct SimBackend {
    /// Every machine's configuration but its seed.
    config: SimConfig,
}

impl SimBackend {
    /// A backend whose machines have one device of [`SIM_MEMORY`] bytes.
    pub fn new() -> Self {
        SimBackend {
            config: SimConfig::default().memory_per_device(SIM_MEMORY),
        }
    }

    /// With machines configured by `change` from this backend's configuration, e.g.
    /// `SimBackend::new().configure(|c| c.fault(fault))`: a driver that fails calls from the
    /// start ([`SimConfig::fault`]), memory kept for the driver itself
    /// ([`SimConfig::driver_reserve`]), or machines that present themselves as hardware
    /// ([`SimConfig::present_as_hardware`]: the stubbed device that takes a `.wasm` plugin
    /// through the gate as a real GPU does). The seed stays each case's own.
    pub fn configure(mut self, change: impl FnOnce(SimConfig) -> SimConfig) -> Self {
        self.config = change(self.config);
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
        let config = SimConfig {
            seed,
            ..self.config.clone()
        };
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
