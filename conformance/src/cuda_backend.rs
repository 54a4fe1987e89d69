//! [`CudaBackend`]: the real GPU (`emm-cuda`) as a [`Backend`]. It observes only what the
//! driver answers: contents, addresses, memory info, out of memory. Races, use after free and
//! attribution are the simulator's to see, so the checks that need them are skipped here.
//!
//! Every case runs on the one GPU of the process, one case at a time (the CLI runs the cuda
//! backend on one thread), so that memory-info checks see only the plugin's allocations.

use std::sync::{Arc, OnceLock};

use emm_core::Driver;
use emm_cuda::CudaDriver;

use crate::backend::{Attributed, Backend, Held, Machine, Observes, Seen};

/// The real GPU, opened once per process.
#[derive(Debug, Clone, Copy, Default)]
pub struct CudaBackend;

fn gpu() -> Result<Arc<CudaDriver>, String> {
    static GPU: OnceLock<Result<Arc<CudaDriver>, String>> = OnceLock::new();
    GPU.get_or_init(|| CudaDriver::new().map(Arc::new).map_err(|e| e.to_string()))
        .clone()
}

impl CudaBackend {
    /// Opens the GPU now, so that a machine without one fails before any case runs.
    ///
    /// # Errors
    ///
    /// No GPU or no NVIDIA driver, with the reason.
    pub fn open() -> Result<Self, String> {
        gpu().map(|_| CudaBackend)
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn observes(&self) -> Observes {
        Observes::NOTHING
    }

    fn machine(&self, _seed: u64) -> Result<Box<dyn Machine>, String> {
        Ok(Box::new(CudaMachine { driver: gpu()? }))
    }
}

struct CudaMachine {
    driver: Arc<CudaDriver>,
}

impl Machine for CudaMachine {
    fn driver(&self) -> Arc<dyn Driver> {
        self.driver.clone()
    }

    fn second_process(&self) -> Option<Arc<dyn Driver>> {
        None
    }

    fn importer_done(&self) -> Result<(), String> {
        Ok(())
    }

    fn seen_since(&self, _skip: usize) -> Vec<Seen> {
        Vec::new()
    }

    fn device_allocations(&self) -> Vec<Attributed> {
        Vec::new()
    }

    fn held(&self) -> Option<Held> {
        None
    }

    fn trace_hash(&self) -> Option<u64> {
        None
    }

    fn device_bytes_in_use(&self) -> Option<u64> {
        self.driver.allocated_bytes().ok()
    }

    fn describe_in_use(&self) -> Option<String> {
        let live = self.driver.live_allocations();
        let shown: Vec<String> = live
            .iter()
            .take(8)
            .map(|(p, n)| format!("{p} ({})", emm_core::units::Bytes(*n as u64)))
            .collect();
        let total = self.driver.allocated_bytes().unwrap_or(0);
        let in_live: u64 = live.iter().map(|(_, n)| *n as u64).sum();
        Some(format!(
            "{} live: {}; driver pools hold {} beyond what they hand out",
            live.len(),
            shown.join(", "),
            emm_core::units::Bytes(total.saturating_sub(in_live))
        ))
    }
}
