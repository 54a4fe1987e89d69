//! [`EmmError`]: why a memory manager, a context or a pointer could not do what was asked.

use crate::driver::DevicePtr;
use crate::error::DriverError;
use crate::mr::MrError;
use crate::units::Bytes;

/// Why an operation of the EMM contract failed. Every message says what was asked, what went
/// wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmmError {
    /// Not enough memory, even after flushing pending deallocations and retrying once.
    #[error("{manager}: out of memory: requested {}, {}; free memory or ask for less", Bytes(*requested), available_text(*available))]
    OutOfMemory {
        /// The manager that ran out.
        manager: String,
        /// Bytes requested.
        requested: u64,
        /// Bytes still free on the device, if known.
        available: Option<u64>,
    },
    /// The manager does not offer this operation (`get_memory_info` of a pool, the
    /// stream-ordered extension of a v1-only manager, …).
    #[error("{manager}: {operation} is not supported: {reason}")]
    Unsupported {
        /// The manager asked.
        manager: String,
        /// The operation, e.g. `get_memory_info`.
        operation: &'static str,
        /// Why, and what to use instead.
        reason: String,
    },
    /// The manager implements another version of the plugin interface.
    #[error("memory manager interface version mismatch: emm implements version {expected}, the manager {manager} reports {found}; rebuild the plugin against emm's contract v{expected}")]
    VersionMismatch {
        /// The version emm implements ([`crate::contract::INTERFACE_VERSION`]).
        expected: u32,
        /// The version the manager reports.
        found: u32,
        /// The manager's name.
        manager: String,
    },
    /// An argument the operation refuses (size 0, an absurd size, a range outside a pointer, a
    /// foreign pointer). Nothing was changed.
    #[error("{operation}: {reason}")]
    InvalidArgument {
        /// The operation asked, e.g. `memalloc` or `MemoryPointer::view`.
        operation: &'static str,
        /// What was wrong and what to do.
        reason: String,
    },
    /// An allocation was asked of a manager whose `initialize` has not run.
    #[error("{manager}: {operation} before initialize; call initialize (Context::prepare_for_use) first")]
    NotInitialized {
        /// The manager asked.
        manager: String,
        /// The operation, e.g. `memalloc`.
        operation: &'static str,
    },
    /// `IpcHandle::open` on a handle that is already open.
    #[error("IpcHandle is already opened (mapped at {at}); close it before opening it again")]
    IpcAlreadyOpened {
        /// Where the open handle is mapped in this process.
        at: DevicePtr,
    },
    /// `IpcHandle::close` on a handle that is not open.
    #[error("IpcHandle not opened; open it before closing it")]
    IpcNotOpened,
    /// No memory manager is known by this name (`EMM_MEMORY_MANAGER` or a registry lookup).
    #[error("no memory manager named {name:?}; the built-in managers are {known}; set EMM_MEMORY_MANAGER to one of them (or to the path of a .wasm plugin)")]
    UnknownManager {
        /// The name asked for.
        name: String,
        /// The names that are known, comma-separated.
        known: String,
    },
    /// A bad configuration value (an environment variable that does not parse, a ratio out of
    /// range).
    #[error("{setting} = {value:?}: {reason}")]
    InvalidConfig {
        /// The setting, e.g. `EMM_MAX_PENDING_DEALLOCS_RATIO`.
        setting: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        reason: String,
    },
    /// Deferred deallocations failed when they ran (they ran in a finalizer, where the error
    /// could not be returned). Reported by the next `reset` or `PendingDeallocs::flush`.
    #[error("{count} deferred deallocation(s) failed; the first: {first}")]
    DeallocationsFailed {
        /// How many failed since the last report.
        count: usize,
        /// The first failure.
        first: DriverError,
    },
    /// The driver failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The device memory resource behind a manager failed.
    #[error(transparent)]
    Resource(#[from] MrError),
}

fn available_text(available: Option<u64>) -> String {
    match available {
        Some(a) => format!("{} free", Bytes(a)),
        None => "free memory unknown".to_string(),
    }
}

impl EmmError {
    /// True when memory ran out: [`EmmError::OutOfMemory`], or a driver or resource
    /// out-of-memory error.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            EmmError::OutOfMemory { .. } => true,
            EmmError::Driver(e) => e.is_out_of_memory(),
            EmmError::Resource(e) => e.is_out_of_memory(),
            _ => false,
        }
    }

    /// An [`EmmError::InvalidArgument`].
    pub fn invalid(operation: &'static str, reason: impl Into<String>) -> Self {
        EmmError::InvalidArgument {
            operation,
            reason: reason.into(),
        }
    }

    /// An [`EmmError::Unsupported`].
    pub fn unsupported(
        manager: impl Into<String>,
        operation: &'static str,
        reason: impl Into<String>,
    ) -> Self {
        EmmError::Unsupported {
            manager: manager.into(),
            operation,
            reason: reason.into(),
        }
    }
}

/// The result of an operation of the EMM contract.
pub type EmmResult<T> = Result<T, EmmError>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CudaCode;

    #[test]
    fn messages_say_what_was_asked_what_went_wrong_and_what_to_do() {
        let e = EmmError::VersionMismatch {
            expected: 1,
            found: 2,
            manager: "MyPlugin".into(),
        };
        assert_eq!(
            e.to_string(),
            "memory manager interface version mismatch: emm implements version 1, the manager \
             MyPlugin reports 2; rebuild the plugin against emm's contract v1"
        );
        let e = EmmError::OutOfMemory {
            manager: "DefaultManager".into(),
            requested: 1 << 50,
            available: Some(80 << 30),
        };
        assert_eq!(
            e.to_string(),
            "DefaultManager: out of memory: requested 1.0 PiB, 80.0 GiB free; free memory or ask \
             for less"
        );
        assert!(e.is_out_of_memory());
        let d = DriverError::new("cuMemAlloc", CudaCode::OUT_OF_MEMORY, "requested 1 B");
        assert!(EmmError::from(d.clone()).is_out_of_memory());
        assert!(EmmError::from(MrError::Driver(d)).is_out_of_memory());
        assert!(!EmmError::IpcNotOpened.is_out_of_memory());
    }
}
