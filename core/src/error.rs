//! Driver errors: the CUDA result code, the call that returned it, and what was asked.

use std::fmt;

/// A CUDA driver result code (`CUresult`), kept as the number the driver returned so that codes
/// emm does not name survive intact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CudaCode(pub i32);

macro_rules! cuda_codes {
    ($($name:ident = $value:literal, $text:literal;)*) => {
        impl CudaCode {
            $(
                #[doc = concat!("`", $text, "`")]
                pub const $name: CudaCode = CudaCode($value);
            )*

            /// The driver's name for this code, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
            pub fn name(self) -> &'static str {
                match self.0 {
                    $($value => $text,)*
                    _ => "CUDA_ERROR_UNRECOGNIZED",
                }
            }

            /// Every code emm names, for fault-injection sweeps.
            pub const ALL: &'static [CudaCode] = &[$(CudaCode($value)),*];
        }
    };
}

cuda_codes! {
    SUCCESS = 0, "CUDA_SUCCESS";
    INVALID_VALUE = 1, "CUDA_ERROR_INVALID_VALUE";
    OUT_OF_MEMORY = 2, "CUDA_ERROR_OUT_OF_MEMORY";
    NOT_INITIALIZED = 3, "CUDA_ERROR_NOT_INITIALIZED";
    DEINITIALIZED = 4, "CUDA_ERROR_DEINITIALIZED";
    NO_DEVICE = 100, "CUDA_ERROR_NO_DEVICE";
    INVALID_DEVICE = 101, "CUDA_ERROR_INVALID_DEVICE";
    INVALID_CONTEXT = 201, "CUDA_ERROR_INVALID_CONTEXT";
    ALREADY_MAPPED = 208, "CUDA_ERROR_ALREADY_MAPPED";
    NOT_MAPPED = 211, "CUDA_ERROR_NOT_MAPPED";
    PEER_ACCESS_UNSUPPORTED = 217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED";
    INVALID_HANDLE = 400, "CUDA_ERROR_INVALID_HANDLE";
    ILLEGAL_STATE = 401, "CUDA_ERROR_ILLEGAL_STATE";
    NOT_FOUND = 500, "CUDA_ERROR_NOT_FOUND";
    NOT_READY = 600, "CUDA_ERROR_NOT_READY";
    ILLEGAL_ADDRESS = 700, "CUDA_ERROR_ILLEGAL_ADDRESS";
    LAUNCH_OUT_OF_RESOURCES = 701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    PEER_ACCESS_ALREADY_ENABLED = 704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED";
    PEER_ACCESS_NOT_ENABLED = 705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED";
    HOST_MEMORY_ALREADY_REGISTERED = 712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
    HOST_MEMORY_NOT_REGISTERED = 713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
    LAUNCH_FAILED = 719, "CUDA_ERROR_LAUNCH_FAILED";
    NOT_PERMITTED = 800, "CUDA_ERROR_NOT_PERMITTED";
    NOT_SUPPORTED = 801, "CUDA_ERROR_NOT_SUPPORTED";
    UNKNOWN = 999, "CUDA_ERROR_UNKNOWN";
}

impl fmt::Display for CudaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// A failed driver call: which call, the CUDA code, and what was asked and why it failed.
///
/// The message reads `cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY (2): requested 1.0 PiB,
/// 80.0 GiB free on device 0`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed with {code}: {detail}")]
pub struct DriverError {
    /// The driver entry point that failed, e.g. `cuMemAlloc`.
    pub call: &'static str,
    /// The CUDA result code.
    pub code: CudaCode,
    /// What was asked and what went wrong.
    pub detail: String,
}

impl DriverError {
    /// An error from `call` with `code` and a message saying what was asked and what went wrong.
    pub fn new(call: &'static str, code: CudaCode, detail: impl Into<String>) -> Self {
        DriverError {
            call,
            code,
            detail: detail.into(),
        }
    }

    /// True when the driver ran out of memory (`CUDA_ERROR_OUT_OF_MEMORY`).
    pub fn is_out_of_memory(&self) -> bool {
        self.code == CudaCode::OUT_OF_MEMORY
    }

    /// True when the device faulted (`CUDA_ERROR_ILLEGAL_ADDRESS`, `CUDA_ERROR_LAUNCH_FAILED`):
    /// the error is sticky, so every later call in the context fails too.
    pub fn is_device_fault(&self) -> bool {
        matches!(
            self.code,
            CudaCode::ILLEGAL_ADDRESS | CudaCode::LAUNCH_FAILED
        )
    }
}

/// The result of a driver call.
pub type DriverResult<T> = Result<T, DriverError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_call_code_and_detail() {
        let e = DriverError::new("cuMemAlloc", CudaCode::OUT_OF_MEMORY, "requested 1.0 PiB");
        assert_eq!(
            e.to_string(),
            "cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY (2): requested 1.0 PiB"
        );
        assert!(e.is_out_of_memory());
    }

    #[test]
    fn only_sticky_errors_are_device_faults() {
        let fault = |code| DriverError::new("cuMemcpyDtoH", code, "").is_device_fault();
        assert!(fault(CudaCode::ILLEGAL_ADDRESS) && fault(CudaCode::LAUNCH_FAILED));
        assert!(!fault(CudaCode::OUT_OF_MEMORY) && !fault(CudaCode::INVALID_VALUE));
    }

    #[test]
    fn unknown_codes_survive() {
        let code = CudaCode(12345);
        assert_eq!(code.name(), "CUDA_ERROR_UNRECOGNIZED");
        assert_eq!(code.0, 12345);
        assert_eq!(
            CudaCode::ILLEGAL_ADDRESS.name(),
            "CUDA_ERROR_ILLEGAL_ADDRESS"
        );
    }
}
