//! [`UnifiedError`]: why unified memory could not do what was asked.

use crate::contract::EmmError;
use crate::driver::DeviceId;
use crate::error::DriverError;
use crate::mr::MrError;
use crate::units::Bytes;

/// Why the caching managed allocator, a `ManagedBuffer` or the enablement switch failed. Every
/// message says what was asked, what went wrong and what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum UnifiedError {
    /// A new managed segment would pass the allocator's limit (asking a real GPU for more
    /// managed memory than it has free can hang it).
    #[error("CachingManagedAllocator: refused a {} managed segment for a {} request: it would hold {} of managed memory while the device has {} free of {} and the limit is {:.0} % (oversubscribing managed memory can hang a real GPU); free memory, ask for less, or allow oversubscription (ManagedLimit::Oversubscribe) on a device known to handle it", Bytes(*segment), Bytes(*requested), Bytes(held + segment), Bytes(*free), Bytes(*total), fraction * 100.0)]
    LimitExceeded {
        /// Bytes requested.
        requested: u64,
        /// Bytes of the segment that would have been taken.
        segment: u64,
        /// Bytes of managed memory the allocator holds already.
        held: u64,
        /// Free device memory (`cuMemGetInfo`).
        free: u64,
        /// Total device memory.
        total: u64,
        /// The fraction allowed.
        fraction: f64,
    },
    /// Unified memory was asked of a device that cannot prefetch or advise managed memory.
    #[error("unified memory needs a device with concurrent managed access (prefetch and advice); {device} ({name}) has none, so it cannot be enabled there; leave it off (set_enabled_unified_memory(false), unset EMM_ENABLE_UNIFIED_MEMORY) or use another device")]
    NotSupported {
        /// The device.
        device: DeviceId,
        /// Its name.
        name: String,
    },
    /// An argument the operation refuses (size 0, a range outside the buffer, a foreign
    /// pointer). Nothing was changed.
    #[error("{operation}: {reason}")]
    InvalidArgument {
        /// The operation, e.g. `ManagedBuffer::write`.
        operation: &'static str,
        /// What was wrong and what to do.
        reason: String,
    },
    /// A bad setting: an option out of range or an environment variable that does not parse.
    #[error("{setting} = {value:?}: {reason}")]
    InvalidConfig {
        /// The setting, e.g. `EMM_ENABLE_UNIFIED_MEMORY`.
        setting: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        reason: String,
    },
    /// The allocator's memory ran out or refused a free (`MrError::OutOfMemory`,
    /// `MrError::InvalidFree`).
    #[error(transparent)]
    Resource(#[from] MrError),
    /// The driver failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
}

impl UnifiedError {
    /// True when memory ran out: the limit, or an out-of-memory error underneath.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            UnifiedError::LimitExceeded { .. } => true,
            UnifiedError::Resource(e) => e.is_out_of_memory(),
            UnifiedError::Driver(e) => e.is_out_of_memory(),
            _ => false,
        }
    }

    /// An [`UnifiedError::InvalidArgument`].
    pub fn invalid(operation: &'static str, reason: impl Into<String>) -> Self {
        UnifiedError::InvalidArgument {
            operation,
            reason: reason.into(),
        }
    }
}

/// The resource name in an [`MrError`] made from a [`UnifiedError::LimitExceeded`].
const LIMITED: &str = "CachingManagedAllocator (held below its fraction of free device memory: oversubscribing managed memory can hang a real GPU; ManagedLimit::Oversubscribe lifts it)";

impl From<UnifiedError> for MrError {
    fn from(e: UnifiedError) -> Self {
        match e {
            UnifiedError::Resource(e) => e,
            UnifiedError::Driver(e) => MrError::Driver(e),
            UnifiedError::LimitExceeded {
                requested,
                held,
                total,
                fraction,
                ..
            } => MrError::OutOfMemory {
                resource: LIMITED,
                requested,
                available: Some(((total as f64 * fraction) as u64).saturating_sub(held)),
            },
            other => MrError::InvalidArgument {
                resource: "CachingManagedAllocator",
                reason: other.to_string(),
            },
        }
    }
}

impl From<UnifiedError> for EmmError {
    fn from(e: UnifiedError) -> Self {
        match e {
            UnifiedError::Resource(MrError::OutOfMemory {
                resource,
                requested,
                available,
            }) => EmmError::OutOfMemory {
                manager: resource.to_string(),
                requested,
                available,
            },
            UnifiedError::Resource(e) => EmmError::Resource(e),
            UnifiedError::Driver(e) => EmmError::Driver(e),
            UnifiedError::LimitExceeded {
                requested, free, ..
            } => EmmError::OutOfMemory {
                manager: e.to_string(),
                requested,
                available: Some(free),
            },
            UnifiedError::InvalidConfig {
                setting,
                value,
                reason,
            } => EmmError::InvalidConfig {
                setting,
                value,
                reason,
            },
            UnifiedError::NotSupported { .. } => {
                EmmError::unsupported("UnifiedManager", "unified memory", e.to_string())
            }
            UnifiedError::InvalidArgument { operation, reason } => {
                EmmError::InvalidArgument { operation, reason }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_says_what_was_asked_why_and_what_to_do() {
        let e = UnifiedError::LimitExceeded {
            requested: 3 << 20,
            segment: 20 << 20,
            held: 70 << 30,
            free: 8 << 30,
            total: 80 << 30,
            fraction: 0.9,
        };
        assert_eq!(
            e.to_string(),
            "CachingManagedAllocator: refused a 20.0 MiB managed segment for a 3.0 MiB request: \
             it would hold 70.0 GiB of managed memory while the device has 8.0 GiB free of 80.0 \
             GiB and the limit is 90 % (oversubscribing managed memory can hang a real GPU); \
             free memory, ask for less, or allow oversubscription (ManagedLimit::Oversubscribe) \
             on a device known to handle it"
        );
        assert!(e.is_out_of_memory());
        assert!(MrError::from(e.clone()).is_out_of_memory());
        assert!(EmmError::from(e).is_out_of_memory());
    }
}
