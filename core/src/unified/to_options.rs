//! [`ToOptions`]: what `ManagedBuffer::to_with` is asked to change, as the keyword arguments of
//! PyTorch's `Tensor.to(device, copy=, non_blocking=)` and the RFC's optional `manage=`.

use crate::driver::Location;

/// The target of a conversion. Only a change of location moves a managed buffer without
/// copying; a forced copy or a change of managed-ness copies, as the RFC specifies.
///
/// # Examples
///
/// ```
/// use emm_core::unified::ToOptions;
/// use emm_core::{DeviceId, Location};
///
/// let o = ToOptions::new(Location::Device(DeviceId(0))).non_blocking(true);
/// assert!(o.non_blocking && !o.copy && o.managed.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToOptions {
    /// Where the result lives.
    pub location: Location,
    /// A device-to-host move does not synchronize; the caller owns synchronization.
    pub non_blocking: bool,
    /// Copy even when a move would do (the RFC's `copy=True`).
    pub copy: bool,
    /// Whether the result is managed (`None`: as the source is; the RFC's `manage=`).
    pub managed: Option<bool>,
}

impl ToOptions {
    /// A conversion to `location` and nothing else.
    pub fn new(location: Location) -> Self {
        ToOptions {
            location,
            non_blocking: false,
            copy: false,
            managed: None,
        }
    }

    /// Sets whether a device-to-host move skips the device synchronize.
    ///
    /// Default: false (it synchronizes).
    pub fn non_blocking(mut self, on: bool) -> Self {
        self.non_blocking = on;
        self
    }

    /// Forces a copy.
    ///
    /// Default: false.
    pub fn copy(mut self, on: bool) -> Self {
        self.copy = on;
        self
    }

    /// Asks for a managed (`true`) or standard (`false`) result.
    ///
    /// Default: `None`, as the source is.
    pub fn managed(mut self, on: bool) -> Self {
        self.managed = Some(on);
        self
    }
}
