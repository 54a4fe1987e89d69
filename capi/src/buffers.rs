//! [`Buffers`]: the `DeviceBuffer`s the C ABI handed out, by handle. C callers hold a number,
//! never a Rust pointer, so a stale or doubled handle is an error instead of a crash.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use emm_core::containers::DeviceBuffer;
use emm_core::DeviceId;

use crate::ffi::lock;
use crate::status::{CapiError, CapiResult, EmmStatus};

/// Live buffers by handle, with their device.
#[derive(Default)]
pub(crate) struct Buffers {
    live: Mutex<BTreeMap<u64, (DeviceId, DeviceBuffer)>>,
    next: AtomicU64,
}

impl Buffers {
    /// Keeps `buffer` and returns its handle (never 0).
    pub(crate) fn insert(&self, device: DeviceId, buffer: DeviceBuffer) -> u64 {
        let handle = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.live).insert(handle, (device, buffer));
        handle
    }

    /// Takes the buffer `handle` out (the caller drops it, which frees its memory).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a handle that is not live.
    pub(crate) fn remove(&self, function: &str, handle: u64) -> CapiResult<DeviceBuffer> {
        lock(&self.live)
            .remove(&handle)
            .map(|(_, b)| b)
            .ok_or_else(|| unknown(function, handle))
    }

    /// Runs `f` on the buffer `handle` and its device, under the table's lock.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a handle that is not live; `f`'s.
    pub(crate) fn with<T>(
        &self,
        function: &str,
        handle: u64,
        f: impl FnOnce(DeviceId, &mut DeviceBuffer) -> CapiResult<T>,
    ) -> CapiResult<T> {
        let mut live = lock(&self.live);
        let (device, buffer) = live
            .get_mut(&handle)
            .ok_or_else(|| unknown(function, handle))?;
        f(*device, buffer)
    }

    /// How many buffers are live.
    pub(crate) fn len(&self) -> usize {
        lock(&self.live).len()
    }
}

fn unknown(function: &str, handle: u64) -> CapiError {
    CapiError::new(
        EmmStatus::InvalidArgument,
        format!(
            "{function}: {handle} is not a live DeviceBuffer handle (freed already, or never \
             given by emm_device_buffer_new)"
        ),
    )
}
