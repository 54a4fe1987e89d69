//! [`IpcHandle`]: a CUDA IPC handle that another process opens to reach the same bytes, and
//! [`get_ipc_handle_via_driver`], the default `get_ipc_handle` (Numba's
//! `GetIpcHandleMixin`).
//!
//! Numba's reference: "If the underlying memory does not point to the base of an allocation
//! returned by the CUDA driver or runtime API (e.g. if a pool allocator is in use) then the
//! offset from the base must be provided." The handle names the driver allocation; `offset`
//! says where the pointer lies inside it.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::contract::error::{EmmError, EmmResult};
use crate::contract::pointer::MemoryPointer;
use crate::driver::{ContextId, DeviceId, DevicePtr, Driver, IpcMemHandle};

/// The device an IPC handle was made on (Numba's `source_info`, Numba's device identity).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SourceInfo {
    /// The backend that made the handle (`sim`, `cuda`).
    pub backend: String,
    /// The device ordinal.
    pub device: u32,
    /// The device's name.
    pub device_name: String,
}

impl SourceInfo {
    /// The identity of `device` as `driver` reports it.
    ///
    /// # Errors
    ///
    /// The driver cannot describe the device.
    pub fn of<D: Driver + ?Sized>(driver: &D, device: DeviceId) -> EmmResult<SourceInfo> {
        Ok(SourceInfo {
            backend: driver.backend_name().to_string(),
            device: device.0,
            device_name: driver.device_properties(device)?.name,
        })
    }
}

struct Opened {
    driver: Arc<dyn Driver>,
    mapped: DevicePtr,
}

/// A CUDA IPC handle with what the importer needs: the allocation's size, where it came from,
/// and the offset of the exported pointer inside the driver allocation.
///
/// Serializable (serde) so that it can be sent to another process; the exporting side keeps
/// the exported memory alive for as long as its `IpcHandle` lives (Numba's `base`). Opening
/// is tracked per handle value: [`IpcHandle::open`] on an open handle is
/// [`EmmError::IpcAlreadyOpened`], [`IpcHandle::close`] on a closed one
/// [`EmmError::IpcNotOpened`]. Dropping an open handle closes it. A clone starts closed; a
/// deserialized handle starts closed and keeps nothing alive.
#[derive(Serialize, Deserialize)]
pub struct IpcHandle {
    /// The driver's 64-byte handle (`CUipcMemHandle`).
    #[serde(with = "handle_bytes")]
    pub handle: [u8; 64],
    /// Size in bytes of the exported memory.
    pub size: u64,
    /// The device the handle was made on.
    pub source_info: SourceInfo,
    /// Bytes from the driver allocation's base to the exported pointer.
    pub offset: u64,
    #[serde(skip)]
    base: Option<MemoryPointer>,
    #[serde(skip)]
    opened: Option<Opened>,
}

impl IpcHandle {
    /// A handle for `base` (kept alive while the handle lives, `None` for none).
    pub fn new(
        base: Option<MemoryPointer>,
        handle: [u8; 64],
        size: u64,
        source_info: SourceInfo,
        offset: u64,
    ) -> Self {
        IpcHandle {
            handle,
            size,
            source_info,
            offset,
            base,
            opened: None,
        }
    }

    /// The exported memory, on the exporting side.
    pub fn base(&self) -> Option<&MemoryPointer> {
        self.base.as_ref()
    }

    /// Whether this handle is open in this process.
    pub fn is_open(&self) -> bool {
        self.opened.is_some()
    }

    /// Opens the handle in `context` of the importing process and returns a pointer to the
    /// exported bytes (the mapping's base plus `offset`). The pointer is valid until
    /// [`IpcHandle::close`]; it has no finalizer of its own.
    ///
    /// # Errors
    ///
    /// [`EmmError::IpcAlreadyOpened`] when open already; a driver error when the handle cannot
    /// be opened (freed, from another machine, opened in its own process).
    pub fn open(
        &mut self,
        driver: Arc<dyn Driver>,
        context: ContextId,
    ) -> EmmResult<MemoryPointer> {
        if let Some(o) = &self.opened {
            return Err(EmmError::IpcAlreadyOpened { at: o.mapped });
        }
        let size = usize::try_from(self.size).map_err(|_| {
            EmmError::invalid(
                "IpcHandle::open",
                format!(
                    "size {} does not fit this process's address space",
                    self.size
                ),
            )
        })?;
        let mapped = driver.ipc_open_mem_handle(&IpcMemHandle(self.handle))?;
        self.opened = Some(Opened { driver, mapped });
        Ok(MemoryPointer::new(
            context,
            mapped.offset(self.offset),
            size,
            None,
        ))
    }

    /// Closes the handle opened by [`IpcHandle::open`] (`cuIpcCloseMemHandle`).
    ///
    /// # Errors
    ///
    /// [`EmmError::IpcNotOpened`] when it is not open; a driver error (the handle stays open).
    pub fn close(&mut self) -> EmmResult<()> {
        let Some(o) = self.opened.take() else {
            return Err(EmmError::IpcNotOpened);
        };
        match o.driver.ipc_close_mem_handle(o.mapped) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.opened = Some(o);
                Err(e.into())
            }
        }
    }
}

impl Drop for IpcHandle {
    fn drop(&mut self) {
        if let Some(o) = self.opened.take() {
            // Nothing to report to from a drop; the mapping is gone or never was.
            let _ = o.driver.ipc_close_mem_handle(o.mapped);
        }
    }
}

impl Clone for IpcHandle {
    /// A closed copy of the handle's data (what the receiving process sees).
    fn clone(&self) -> Self {
        IpcHandle::new(
            self.base.clone(),
            self.handle,
            self.size,
            self.source_info.clone(),
            self.offset,
        )
    }
}

impl PartialEq for IpcHandle {
    /// Handles are equal when they name the same bytes: handle, size, source and offset.
    fn eq(&self, other: &Self) -> bool {
        self.handle == other.handle
            && self.size == other.size
            && self.source_info == other.source_info
            && self.offset == other.offset
    }
}

impl fmt::Debug for IpcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IpcHandle")
            .field("handle", &IpcMemHandle(self.handle))
            .field("size", &self.size)
            .field("source_info", &self.source_info)
            .field("offset", &self.offset)
            .field("open", &self.is_open())
            .finish()
    }
}

/// The default `get_ipc_handle` (Numba's `GetIpcHandleMixin`): finds the base of the driver
/// allocation holding `memory` with `cuMemGetAddressRange`, makes a handle for it with
/// `cuIpcGetMemHandle`, and records the offset of `memory` from that base. Right for any
/// suballocator whose memory comes from driver allocations.
///
/// # Errors
///
/// A driver error (the pointer is not device memory, IPC is unsupported).
pub fn get_ipc_handle_via_driver<D: Driver + ?Sized>(
    driver: &D,
    memory: &MemoryPointer,
    source_info: SourceInfo,
) -> EmmResult<IpcHandle> {
    let ptr = memory.device_ptr();
    let (base, _) = driver.mem_get_address_range(ptr)?;
    let handle = driver.ipc_get_mem_handle(base)?;
    Ok(IpcHandle::new(
        Some(memory.clone()),
        handle.0,
        memory.size() as u64,
        source_info,
        ptr.0 - base.0,
    ))
}

mod handle_bytes {
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(h: &[u8; 64], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(h)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 64], D::Error> {
        d.deserialize_bytes(HandleVisitor)
    }

    struct HandleVisitor;

    impl<'de> Visitor<'de> for HandleVisitor {
        type Value = [u8; 64];

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the 64 bytes of a CUDA IPC handle")
        }

        fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<[u8; 64], E> {
            v.try_into().map_err(|_| E::invalid_length(v.len(), &self))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<[u8; 64], A::Error> {
            let mut out = [0u8; 64];
            for (i, b) in out.iter_mut().enumerate() {
                *b = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(i, &self))?;
            }
            if seq.next_element::<u8>()?.is_some() {
                return Err(A::Error::invalid_length(65, &self));
            }
            Ok(out)
        }
    }
}
