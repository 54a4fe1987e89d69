//! [`open_on_device`]: an IPC handle opened for a chosen device of the importing process —
//! mapped directly when that device is the exporter's or can access it as a peer, or copied
//! into memory of that device otherwise (a staged copy, as Numba's `_StagedIpcImpl`).
//!
//! A handle made on GPU 0 names memory of GPU 0. A process working on GPU 1 can map it when
//! GPU 1 may access GPU 0 (peer access, enabled here first); where the driver allows no peer
//! access, the bytes are opened with GPU 0's context current and copied into a buffer of GPU 1
//! taken from a resource of GPU 1. The copy is a snapshot: later writes on either side are not
//! seen by the other.

use std::sync::Arc;

use crate::contract::error::{EmmError, EmmResult};
use crate::contract::ipc::IpcHandle;
use crate::driver::{ContextId, DeviceId, DevicePtr, Driver, StreamId};
use crate::mr::DeviceMemoryResource;

/// How the bytes reached the target device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpcAccess {
    /// The handle was made on the target device: mapped directly.
    SameDevice,
    /// The target device accesses the exporter's as a peer: mapped directly.
    Peer,
    /// No peer access: copied into memory of the target device.
    Staged,
}

/// An IPC handle's bytes, usable on one device of the importing process.
pub struct IpcImport {
    ptr: DevicePtr,
    size: usize,
    access: IpcAccess,
    /// The staging buffer and the resource it came from, freed on drop.
    staged: Option<Arc<dyn DeviceMemoryResource>>,
}

impl IpcImport {
    /// Where the bytes are, on the target device.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Their size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// How they got there.
    pub fn access(&self) -> IpcAccess {
        self.access
    }
}

impl Drop for IpcImport {
    fn drop(&mut self) {
        if let Some(r) = self.staged.take() {
            // Nothing to report to from a drop; the staging buffer was ours alone.
            let _ = r.deallocate(self.ptr, self.size, StreamId::DEFAULT);
        }
    }
}

impl std::fmt::Debug for IpcImport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpcImport")
            .field("ptr", &self.ptr)
            .field("size", &self.size)
            .field("access", &self.access)
            .finish()
    }
}

/// Runs `f` with `ctx` current, restoring the caller's context after.
fn with_context<T>(
    driver: &dyn Driver,
    ctx: ContextId,
    f: impl FnOnce() -> EmmResult<T>,
) -> EmmResult<T> {
    let before = driver.current_context().ok();
    driver.set_current_context(ctx)?;
    let r = f();
    if let Some(b) = before {
        let _ = driver.set_current_context(b);
    }
    r
}

/// Opens `handle` for use on the device of `target` (see the module doc). A direct mapping
/// stays open in `handle` (close it with [`IpcHandle::close`] when done with the import); a
/// staged copy takes its buffer from `staging`, which must allocate on the target's device,
/// and closes the handle once copied.
///
/// # Errors
///
/// The driver's error opening, enabling peer access or copying; `staging`'s error when the
/// copy's buffer cannot be had; [`EmmError::IpcAlreadyOpened`] when `handle` is open.
pub fn open_on_device(
    handle: &mut IpcHandle,
    driver: Arc<dyn Driver>,
    target: ContextId,
    staging: &Arc<dyn DeviceMemoryResource>,
) -> EmmResult<IpcImport> {
    let d = &*driver;
    let target_dev = d.context_device(target)?;
    let source_dev = DeviceId(handle.source_info.device);
    let size = usize::try_from(handle.size).map_err(|_| {
        EmmError::invalid(
            "open_on_device",
            "the exported size does not fit this process",
        )
    })?;
    if target_dev == source_dev {
        let p = with_context(d, target, || handle.open(Arc::clone(&driver), target))?;
        return Ok(IpcImport {
            ptr: p.device_ptr(),
            size,
            access: IpcAccess::SameDevice,
            staged: None,
        });
    }
    let source_ctx = d.primary_context(source_dev)?;
    if d.can_access_peer(target_dev, source_dev)? {
        let p = with_context(d, target, || {
            // Enabling twice is the driver's "already enabled": the access is there.
            let _ = d.enable_peer_access(source_ctx);
            handle.open(Arc::clone(&driver), target)
        })?;
        return Ok(IpcImport {
            ptr: p.device_ptr(),
            size,
            access: IpcAccess::Peer,
            staged: None,
        });
    }
    let dst = with_context(d, target, || Ok(staging.allocate(size, StreamId::DEFAULT)?))?;
    let copied = with_context(d, source_ctx, || {
        let src = handle.open(Arc::clone(&driver), source_ctx)?;
        let r = d
            .memcpy_dtod(dst, src.device_ptr(), size, None)
            .and_then(|()| d.context_synchronize());
        let closed = handle.close();
        r?;
        closed
    });
    if let Err(e) = copied {
        let _ = staging.deallocate(dst, size, StreamId::DEFAULT);
        return Err(e);
    }
    Ok(IpcImport {
        ptr: dst,
        size,
        access: IpcAccess::Staged,
        staged: Some(Arc::clone(staging)),
    })
}
