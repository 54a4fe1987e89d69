//! [`Storage`]: the memory behind `ManagedBuffer` handles — the RFC's `RealStorage`, which
//! keeps the original allocation context and releases the memory when the last handle goes.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::containers::DeviceBuffer;
use crate::driver::{DevicePtr, StreamId};
use crate::unified::caching::CachingManagedAllocator;
use crate::unified::hints::Placement;

/// What a managed block's range is advised as now, and the stream of its last use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockState {
    /// The advice in force over the block (its pool's until a move changes it).
    pub advised: Placement,
    /// The stream the block is freed on: the last one it was used or moved on.
    pub stream: StreamId,
}

/// The memory of one or more `ManagedBuffer` handles.
pub(crate) enum Storage {
    /// A block of the caching managed allocator, returned to it (with its pool's advice) when
    /// the last handle goes.
    Managed {
        alloc: Arc<CachingManagedAllocator>,
        ptr: DevicePtr,
        bytes: usize,
        state: Mutex<BlockState>,
    },
    /// Standard device memory.
    Device(DeviceBuffer),
    /// Standard (pageable) host memory.
    Host(Mutex<Vec<u8>>),
}

impl Storage {
    /// The block's state (managed storage only).
    pub(crate) fn block_state(&self) -> Option<MutexGuard<'_, BlockState>> {
        match self {
            // Nothing panics while it is held; a poisoned state is still whole.
            Storage::Managed { state, .. } => Some(state.lock().unwrap_or_else(|e| e.into_inner())),
            _ => None,
        }
    }

    /// The device-visible address: managed or device memory.
    pub(crate) fn device_ptr(&self) -> Option<DevicePtr> {
        match self {
            Storage::Managed { ptr, .. } => Some(*ptr),
            Storage::Device(b) => Some(b.ptr()),
            Storage::Host(_) => None,
        }
    }

    /// The host bytes (standard host memory only).
    pub(crate) fn host(&self) -> Option<MutexGuard<'_, Vec<u8>>> {
        match self {
            Storage::Host(v) => Some(v.lock().unwrap_or_else(|e| e.into_inner())),
            _ => None,
        }
    }

    /// Records `stream` as the block's last stream (managed storage only).
    pub(crate) fn used_on(&self, stream: StreamId) {
        if let Some(mut s) = self.block_state() {
            s.stream = stream;
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Storage::Managed {
            alloc,
            ptr,
            bytes,
            state,
        } = self
        {
            let s = *state.get_mut().unwrap_or_else(|e| e.into_inner());
            // No caller to report to: the allocator keeps the failure for take_failures.
            if let Err(e) = alloc.free_advised(*ptr, *bytes, s.stream, s.advised) {
                alloc.record_failure(e);
            }
        }
    }
}
