//! [`RuntimeResource`]: the C ABI's manager of one device seen as a `DeviceMemoryResource`, so
//! that `DeviceBuffer`s handed out by `emm_device_buffer_*` draw on the same manager (the same
//! pool) and show in the same statistics as `emm_alloc`.
//!
//! - **Thread safety**: `Send + Sync`; it holds only the device, and the runtime locks.
//! - **Stream semantics**: an allocation on the legacy default stream is the v1 `memalloc`
//!   (usable on every stream); on any other stream it is stream-ordered when the manager
//!   offers it. A free on a stream frees in that stream's order.
//! - **Clone and ownership**: cheap to clone; the memory belongs to the runtime's manager.
//! - **Intended use and cost**: containers of the C ABI; one table insert per allocation on
//!   top of the manager's cost. Size 0 gives the null pointer, as RMM's `device_buffer`.

use std::sync::Arc;

use emm_core::mr::{DeviceMemoryResource, MrError, MrResult};
use emm_core::{DeviceId, DevicePtr, Driver, StreamId};

use crate::runtime::runtime;
use crate::status::{CapiError, EmmStatus};

/// The runtime's manager of one device, as a resource.
#[derive(Clone)]
pub(crate) struct RuntimeResource {
    device: DeviceId,
    driver: Arc<dyn Driver>,
}

impl RuntimeResource {
    /// The resource of `device` (checked by the caller) on the runtime's `driver`.
    pub(crate) fn new(device: DeviceId, driver: Arc<dyn Driver>) -> Self {
        RuntimeResource { device, driver }
    }
}

fn to_mr(e: CapiError) -> MrError {
    match e.status {
        EmmStatus::OutOfMemory => MrError::OutOfMemory {
            resource: "emm-capi",
            requested: 0,
            available: None,
        },
        _ => MrError::InvalidArgument {
            resource: "emm-capi",
            reason: e.message,
        },
    }
}

impl DeviceMemoryResource for RuntimeResource {
    fn name(&self) -> &'static str {
        "emm-capi"
    }

    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let r = runtime().map_err(to_mr)?;
        r.alloc(self.device, bytes, stream)
            .map(DevicePtr)
            .map_err(|e| match e.status {
                EmmStatus::OutOfMemory => MrError::OutOfMemory {
                    resource: "emm-capi",
                    requested: bytes as u64,
                    available: None,
                },
                _ => to_mr(e),
            })
    }

    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        let r = runtime().map_err(to_mr)?;
        r.free("DeviceBuffer::drop", ptr.0, Some(stream), Some(self.device))
            .map_err(|e| MrError::InvalidFree {
                resource: "emm-capi",
                ptr,
                bytes: bytes as u64,
                reason: e.message,
            })
    }

    fn driver(&self) -> &dyn Driver {
        &*self.driver
    }
}

const _: () = emm_core::mr::assert_resource::<RuntimeResource>();
