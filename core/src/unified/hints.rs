//! [`Placement`]: the RFC's placement hints (`cuMemAdvise`) for each kind of allocation.
//!
//! The RFC ("Tuning Managed Memory with MemAdvise hints"):
//! - "Device allocations will use the managed memory APIs with initial memadvise hints for
//!   device mapping. `CudaMemAdviseSetPreferredLocation` = current GPU device,
//!   `CudaMemAdviseSetAccessedBy` = unset."
//! - "CPU allocations will be directed to the CachingManagedAllocator, but with initial
//!   memadvise hints for host mapping. `CudaMemAdviseSetPreferredLocation` = cudaCpuDeviceId,
//!   `CudaMemAdviseSetAccessedBy` = current GPU device."
//!
//! Plain `memallocmanaged` memory (the EMM contract's) gets no advice: the caller asked for
//! ordinary managed memory, which migrates on access.

use crate::driver::{Advice, DeviceId, DevicePtr, Driver, Location};
use crate::error::DriverResult;

/// Where an allocation is meant to live, and so which advice its range carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Placement {
    /// A device allocation: preferred location = the device, no accessed-by.
    Device(DeviceId),
    /// A host allocation: preferred location = the host, accessed-by = the device that uses
    /// it (the current device when it was allocated), so its kernels map the pages instead of
    /// faulting them over.
    Host {
        /// The device given `SetAccessedBy`.
        accessed_by: DeviceId,
    },
    /// Plain managed memory: no advice; pages migrate on access.
    Unadvised,
}

/// At most three advice calls move a range from one placement to another.
pub type AdviceCalls = [Option<(Advice, Location)>; 3];

impl Placement {
    /// The RFC's placement for memory meant for `location`, where `current` is the current
    /// device (the one a host allocation is accessed by).
    #[inline]
    pub fn for_location(location: Location, current: DeviceId) -> Placement {
        match location {
            Location::Device(d) => Placement::Device(d),
            Location::Host => Placement::Host {
                accessed_by: current,
            },
        }
    }

    /// The preferred location the placement sets, if any.
    #[inline]
    pub fn preferred_location(self) -> Option<Location> {
        match self {
            Placement::Device(d) => Some(Location::Device(d)),
            Placement::Host { .. } => Some(Location::Host),
            Placement::Unadvised => None,
        }
    }

    /// The device given `SetAccessedBy`, if any.
    #[inline]
    pub fn accessed_by(self) -> Option<DeviceId> {
        match self {
            Placement::Host { accessed_by } => Some(accessed_by),
            Placement::Device(_) | Placement::Unadvised => None,
        }
    }

    /// The advice calls that turn a range advised as `from` into one advised as `to`, in
    /// order (nothing when they agree). From [`Placement::Unadvised`], these are the initial
    /// hints of `to`.
    ///
    /// # Time complexity
    ///
    /// O(1); allocates nothing.
    pub fn transition(from: Placement, to: Placement) -> AdviceCalls {
        let mut calls: AdviceCalls = [None; 3];
        let mut n = 0;
        let mut push = |call| {
            calls[n] = Some(call);
            n += 1;
        };
        match (from.preferred_location(), to.preferred_location()) {
            (a, b) if a == b => {}
            (_, Some(l)) => push((Advice::SetPreferredLocation, l)),
            (Some(l), None) => push((Advice::UnsetPreferredLocation, l)),
            (None, None) => {}
        }
        if from.accessed_by() != to.accessed_by() {
            if let Some(d) = from.accessed_by() {
                push((Advice::UnsetAccessedBy, Location::Device(d)));
            }
            if let Some(d) = to.accessed_by() {
                push((Advice::SetAccessedBy, Location::Device(d)));
            }
        }
        calls
    }

    /// Advises `[ptr, ptr + size)`, currently advised as `from`, as `to`; returns the number
    /// of `cuMemAdvise` calls made.
    ///
    /// # Errors
    ///
    /// The driver's; the calls before the failing one have taken effect.
    pub fn advise(
        driver: &dyn Driver,
        ptr: DevicePtr,
        size: usize,
        from: Placement,
        to: Placement,
    ) -> DriverResult<u32> {
        let mut made = 0;
        for (advice, location) in Placement::transition(from, to).into_iter().flatten() {
            driver.mem_advise(ptr, size, advice, location)?;
            made += 1;
        }
        Ok(made)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D0: DeviceId = DeviceId(0);
    const D1: DeviceId = DeviceId(1);

    fn calls(from: Placement, to: Placement) -> Vec<(Advice, Location)> {
        Placement::transition(from, to)
            .into_iter()
            .flatten()
            .collect()
    }

    #[test]
    fn initial_hints_are_the_rfcs() {
        assert_eq!(
            calls(Placement::Unadvised, Placement::Device(D0)),
            [(Advice::SetPreferredLocation, Location::Device(D0))]
        );
        assert_eq!(
            calls(Placement::Unadvised, Placement::Host { accessed_by: D0 }),
            [
                (Advice::SetPreferredLocation, Location::Host),
                (Advice::SetAccessedBy, Location::Device(D0))
            ]
        );
        assert!(calls(Placement::Unadvised, Placement::Unadvised).is_empty());
    }

    #[test]
    fn transitions_undo_what_the_target_does_not_have() {
        let host = Placement::Host { accessed_by: D0 };
        assert_eq!(
            calls(host, Placement::Device(D1)),
            [
                (Advice::SetPreferredLocation, Location::Device(D1)),
                (Advice::UnsetAccessedBy, Location::Device(D0))
            ]
        );
        assert_eq!(
            calls(Placement::Device(D0), Placement::Device(D1)),
            [(Advice::SetPreferredLocation, Location::Device(D1))]
        );
        assert_eq!(
            calls(host, Placement::Unadvised),
            [
                (Advice::UnsetPreferredLocation, Location::Host),
                (Advice::UnsetAccessedBy, Location::Device(D0))
            ]
        );
        assert_eq!(
            calls(host, Placement::Host { accessed_by: D1 }),
            [
                (Advice::UnsetAccessedBy, Location::Device(D0)),
                (Advice::SetAccessedBy, Location::Device(D1))
            ]
        );
        assert!(calls(host, host).is_empty());
        assert_eq!(
            Placement::for_location(Location::Host, D1),
            Placement::Host { accessed_by: D1 }
        );
    }
}
