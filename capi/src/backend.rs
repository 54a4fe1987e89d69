//! [`Backend`]: the driver the process uses, chosen once by `EMM_BACKEND` — `cuda` (the
//! default: the real GPU, an error value and never a panic when there is none) or `sim` (the
//! simulated GPU, for tests and machines without a GPU; `EMM_SIM_DEVICES` devices of
//! `EMM_SIM_MEMORY` bytes each) — and the mapping of a caller's raw stream to a driver stream.

use std::ffi::c_void;
use std::sync::Arc;

use emm_core::{DeviceId, Driver, StreamId};
use emm_cuda::CudaDriver;
use emm_sim::{SimConfig, SimDriver};

use crate::status::{CapiError, CapiResult, EmmStatus};

/// The environment variable choosing the backend: `cuda` (default) or `sim`.
pub(crate) const BACKEND_ENV_VAR: &str = "EMM_BACKEND";

enum Kind {
    Cuda(Arc<CudaDriver>),
    Sim,
}

/// The process's driver, as a `dyn Driver`, and what the C ABI needs of its concrete type.
pub(crate) struct Backend {
    driver: Arc<dyn Driver>,
    kind: Kind,
}

fn env_number(name: &'static str, default: u64) -> CapiResult<u64> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v.trim().parse().map_err(|_| {
            CapiError::new(
                EmmStatus::Config,
                format!("{name} = {v:?} is not a whole number; unset it or give one"),
            )
        }),
    }
}

impl Backend {
    /// The backend `EMM_BACKEND` names.
    ///
    /// # Errors
    ///
    /// `Config` for an unknown name or a bad `EMM_SIM_*` value; `NoDevice` when `cuda` finds
    /// no GPU (the message says to set `EMM_BACKEND=sim`).
    pub(crate) fn from_env() -> CapiResult<Backend> {
        let name = std::env::var(BACKEND_ENV_VAR).unwrap_or_default();
        match name.trim() {
            "" | "cuda" => {
                let d = CudaDriver::new().map_err(|e| {
                    CapiError::from(e).with_hint(
                        "set EMM_BACKEND=sim to use the simulated GPU on a machine without one",
                    )
                })?;
                let d = Arc::new(d);
                Ok(Backend {
                    driver: d.clone(),
                    kind: Kind::Cuda(d),
                })
            }
            "sim" => {
                let devices = env_number("EMM_SIM_DEVICES", 1)?;
                let devices = u32::try_from(devices).unwrap_or(u32::MAX);
                let mut config = SimConfig::new(env_number("EMM_SIM_SEED", 1)?)
                    .devices(devices)
                    // A long-lived process: keep no trace in memory.
                    .record_trace(false);
                if std::env::var_os("EMM_SIM_MEMORY").is_some() {
                    config = config.memory_per_device(env_number("EMM_SIM_MEMORY", 0)?);
                }
                let d = SimDriver::new(config).map_err(|e| {
                    CapiError::new(
                        EmmStatus::Config,
                        format!(
                            "EMM_BACKEND=sim: the simulated GPU refuses its configuration: {e}"
                        ),
                    )
                })?;
                Ok(Backend {
                    driver: Arc::new(d),
                    kind: Kind::Sim,
                })
            }
            other => Err(CapiError::new(
                EmmStatus::Config,
                format!("{BACKEND_ENV_VAR} = {other:?} is not a backend; use cuda or sim"),
            )),
        }
    }

    /// The driver.
    pub(crate) fn driver(&self) -> &Arc<dyn Driver> {
        &self.driver
    }

    /// The driver's stream for a caller's raw stream on `device`: `0` and `1` are the legacy
    /// default stream, `2` the per-thread one; on CUDA any other value is a `CUstream` of the
    /// caller (CuPy's, PyTorch's), adopted and checked once and never destroyed by emm; on the
    /// simulator it is a stream made by `emm_stream_create`.
    ///
    /// # Errors
    ///
    /// A handle that is not a live stream of `device`.
    #[inline]
    pub(crate) fn stream(&self, raw: *mut c_void, device: DeviceId) -> CapiResult<StreamId> {
        let raw = raw as u64;
        match (raw, &self.kind) {
            (0 | 1, _) => Ok(StreamId::DEFAULT),
            (2, _) => Ok(StreamId::PER_THREAD),
            (_, Kind::Cuda(d)) => Ok(d.adopt_stream(raw, device)?),
            (_, Kind::Sim) => {
                // The simulator checks the handle (a pool's fast path would not ask it).
                let s = StreamId(raw);
                self.driver.stream_query(s)?;
                Ok(s)
            }
        }
    }

    /// Whether the GPU is the simulated one, whose host memory is simulated too.
    pub(crate) fn is_sim(&self) -> bool {
        matches!(self.kind, Kind::Sim)
    }

    /// Drops a borrowed stream from the CUDA driver's list (its owner destroys it).
    pub(crate) fn forget_stream(&self, s: StreamId) -> bool {
        match &self.kind {
            Kind::Cuda(d) => d.forget_stream(s),
            Kind::Sim => false,
        }
    }
}

impl CapiError {
    /// The same error with `hint` appended to its message.
    pub(crate) fn with_hint(mut self, hint: &str) -> Self {
        self.message = format!("{}; {hint}", self.message);
        self
    }
}
