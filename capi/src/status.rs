//! [`EmmStatus`]: what every entry point returns, and [`CapiError`], the failure behind a
//! status other than `EMM_STATUS_OK`.

use emm_core::contract::EmmError;
use emm_core::mr::MrError;
use emm_core::{CudaCode, DriverError};

/// The outcome of a call. `EMM_STATUS_OUT_OF_MEMORY` is kept apart from every other failure
/// so that a caller can free memory and retry (PyTorch's `OutOfMemoryError`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmmStatus {
    /// Success.
    Ok = 0,
    /// A bad argument: a null pointer, size 0, a size that does not fit, malformed JSON, an
    /// unknown advice. Nothing was changed.
    InvalidArgument = 1,
    /// Not enough device (or host) memory, even after emm freed what it could.
    OutOfMemory = 2,
    /// The pointer is not a live emm allocation: never allocated here, or already freed.
    UnknownPointer = 3,
    /// The manager does not offer this operation (IPC of pool memory, managed memory, …).
    Unsupported = 4,
    /// A bad configuration: an unknown manager name, a plugin that does not load, bad
    /// options, a bad environment variable.
    Config = 5,
    /// No GPU (or no such device ordinal).
    NoDevice = 6,
    /// The driver failed otherwise (the message names the call and the CUDA code).
    Driver = 7,
    /// An internal error (a caught panic): emm's bug; the message says where.
    Panic = 8,
    /// Writing a file emm was told to write failed (the allocation log on a full disk): the
    /// memory calls went on, the file is incomplete; the message says from where.
    Io = 9,
}

/// A failure at the C boundary: a status and the message `emm_last_error_message` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapiError {
    /// The status returned.
    pub status: EmmStatus,
    /// What was asked, what went wrong, what to do.
    pub message: String,
}

impl CapiError {
    /// A failure with `status` and `message`.
    pub fn new(status: EmmStatus, message: impl Into<String>) -> Self {
        CapiError {
            status,
            message: message.into(),
        }
    }

    /// A bad argument of `function`.
    pub fn invalid(function: &str, reason: impl std::fmt::Display) -> Self {
        CapiError::new(EmmStatus::InvalidArgument, format!("{function}: {reason}"))
    }

    /// A null pointer given for `argument` of `function`.
    pub fn null(function: &str, argument: &str) -> Self {
        CapiError::invalid(
            function,
            format!("{argument} is NULL; pass a valid pointer"),
        )
    }

    /// `Ok` when `ptr`, given for `argument` of `function`, is not null; else [`Self::null`].
    pub fn non_null<T>(function: &str, argument: &str, ptr: *const T) -> Result<(), Self> {
        if ptr.is_null() {
            Err(CapiError::null(function, argument))
        } else {
            Ok(())
        }
    }
}

impl std::fmt::Display for CapiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CapiError {}

fn driver_status(e: &DriverError) -> EmmStatus {
    if e.is_out_of_memory() {
        EmmStatus::OutOfMemory
    } else if e.code == CudaCode::NO_DEVICE || e.code == CudaCode::INVALID_DEVICE {
        EmmStatus::NoDevice
    } else {
        EmmStatus::Driver
    }
}

impl From<DriverError> for CapiError {
    fn from(e: DriverError) -> Self {
        CapiError::new(driver_status(&e), e.to_string())
    }
}

impl From<MrError> for CapiError {
    fn from(e: MrError) -> Self {
        let status = match &e {
            _ if e.is_out_of_memory() => EmmStatus::OutOfMemory,
            MrError::Driver(d) => driver_status(d),
            MrError::InvalidFree { .. } => EmmStatus::UnknownPointer,
            _ => EmmStatus::InvalidArgument,
        };
        CapiError::new(status, e.to_string())
    }
}

impl From<EmmError> for CapiError {
    fn from(e: EmmError) -> Self {
        let status = match &e {
            _ if e.is_out_of_memory() => EmmStatus::OutOfMemory,
            EmmError::Unsupported { .. } => EmmStatus::Unsupported,
            EmmError::InvalidArgument { .. } => EmmStatus::InvalidArgument,
            EmmError::UnknownManager { .. }
            | EmmError::VersionMismatch { .. }
            | EmmError::InvalidConfig { .. } => EmmStatus::Config,
            EmmError::Driver(d) => driver_status(d),
            EmmError::Resource(MrError::InvalidFree { .. }) => EmmStatus::UnknownPointer,
            EmmError::Resource(
                MrError::InvalidArgument { .. } | MrError::UnsupportedAlignment { .. },
            ) => EmmStatus::InvalidArgument,
            EmmError::Resource(MrError::Driver(d)) => driver_status(d),
            _ => EmmStatus::Driver,
        };
        CapiError::new(status, e.to_string())
    }
}

/// The result of the crate's internal functions.
pub(crate) type CapiResult<T> = Result<T, CapiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_is_told_apart_wherever_it_comes_from() {
        let driver = DriverError::new("cuMemAlloc", CudaCode::OUT_OF_MEMORY, "1 TiB");
        let resource = MrError::OutOfMemory {
            resource: "PoolResource",
            requested: 1,
            available: None,
        };
        for e in [
            CapiError::from(driver.clone()),
            CapiError::from(resource.clone()),
            CapiError::from(EmmError::Driver(driver)),
            CapiError::from(EmmError::Resource(resource)),
        ] {
            assert_eq!(e.status, EmmStatus::OutOfMemory, "{e}");
        }
        let bad = MrError::InvalidArgument {
            resource: "reinitialize",
            reason: "x".into(),
        };
        assert_eq!(
            CapiError::from(EmmError::Resource(bad)).status,
            EmmStatus::InvalidArgument
        );
        let none = DriverError::new("cuInit", CudaCode::NO_DEVICE, "no GPU");
        assert_eq!(CapiError::from(none).status, EmmStatus::NoDevice);
    }
}
