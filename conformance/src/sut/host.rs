//! Host memory (`memhostalloc`, `mempin`), managed memory, IPC handles and memory info.

use std::sync::Arc;

use emm_core::attribution::CallerScope;
use emm_core::contract::{EmmError, HostMemory, PinOwner};
use emm_core::{CudaCode, DeviceId};

use super::device::{spans, EDGE};
use super::{BufKind, Buffer, Found, Handle, Sut, HARNESS};
use crate::assertions::{
    check_get_memory_info_consistent, check_ipc_handle_addresses_same_bytes,
    check_memalloc_never_overlaps, check_memhostalloc_honours_flags,
    check_out_of_memory_is_an_error, check_writes_stay_in_their_allocation,
    check_zero_size_is_an_error,
};
use crate::checks::CheckId;
use crate::transition::{Pick, Size};

/// Host buffers larger than this are asked for at this size (the size classes are for
/// device memory; a host test needs no more).
const HOST_CAP: usize = 16 << 20;

impl Sut {
    pub(super) fn memhostalloc(
        &mut self,
        size: Size,
        mapped: bool,
        portable: bool,
        wc: bool,
    ) -> Found {
        const C: CheckId = CheckId::MemhostallocHonoursFlags;
        self.ensure_initialized()?;
        let bytes = host_bytes(size, self.device_total);
        let r = self
            .call(|m| m.memhostalloc(bytes, mapped, portable, wc))?
            .map_err(|p| self.fail(oom_or(size, C), format!("memhostalloc({bytes}): {p}")))?;
        if size == Size::Zero {
            return check_zero_size_is_an_error("memhostalloc", &r)
                .map_err(|m| self.fail(CheckId::ZeroSizeIsAnError, m));
        }
        if size.is_absurd() {
            return check_out_of_memory_is_an_error("memhostalloc", bytes, &r)
                .map_err(|m| self.fail(CheckId::OutOfMemoryIsAnError, m));
        }
        let mem = match r {
            Ok(m) => m,
            Err(e) if e.is_out_of_memory() => return Ok(()),
            Err(e) => {
                return Err(self.fail(
                    C,
                    format!("memhostalloc({bytes}, mapped={mapped}) failed: {e}"),
                ))
            }
        };
        let what = format!("memhostalloc({bytes}, mapped={mapped}, portable={portable}, wc={wc})");
        check_memhostalloc_honours_flags(&what, &mem, mapped, bytes)
            .map_err(|m| self.fail(C, m))?;
        self.host_round_trip(&what, &mem, bytes, C)?;
        self.handles.push(Handle::Host { mem, pin: None });
        Ok(())
    }

    pub(super) fn mempin(&mut self, size: Size, mapped: bool) -> Found {
        const C: CheckId = CheckId::MempinUnpinsInFinalizer;
        self.ensure_initialized()?;
        if size.is_absurd() {
            return Ok(()); // no host buffer of that size exists to pin
        }
        let bytes = host_bytes(size, self.device_total);
        let ptr = {
            let _h = CallerScope::enter(HARNESS);
            self.driver.pageable_alloc(bytes.max(1))
        };
        let ptr = match ptr {
            Ok(p) => p,
            Err(e) if e.is_out_of_memory() => return Ok(()),
            Err(e) => return Err(self.harness_error(C, "allocating a host buffer to pin", e)),
        };
        self.pageable.push((ptr, bytes.max(1)));
        let owner: PinOwner = Arc::new(bytes);
        let r = self
            .call(|m| m.mempin(Some(owner), ptr, bytes, mapped))?
            .map_err(|p| self.fail(C, format!("mempin({bytes}): {p}")))?;
        if size == Size::Zero {
            return check_zero_size_is_an_error("mempin", &r)
                .map_err(|m| self.fail(CheckId::ZeroSizeIsAnError, m));
        }
        let mem = match r {
            Ok(m) => m,
            Err(e) if e.is_out_of_memory() => return Ok(()),
            Err(e) => {
                return Err(self.fail(C, format!("mempin({bytes}, mapped={mapped}) failed: {e}")))
            }
        };
        let what = format!("mempin({bytes}, mapped={mapped})");
        check_memhostalloc_honours_flags(&what, &mem, mapped, bytes)
            .map_err(|m| self.fail(C, m))?;
        let kept = match &mem {
            HostMemory::Mapped(m) => m.pin_owner().is_some(),
            HostMemory::Pinned(p) => p.pin_owner().is_some(),
        };
        if !kept {
            return Err(self.fail(
                C,
                format!("{what} dropped the owner; it must keep it alive while pinned"),
            ));
        }
        if mem.host_ptr() != ptr {
            return Err(self.fail(
                C,
                format!("{what} returned {}, not the pinned {ptr}", mem.host_ptr()),
            ));
        }
        self.host_round_trip(&what, &mem, bytes, C)?;
        self.handles.push(Handle::Host {
            mem,
            pin: Some((ptr, bytes)),
        });
        Ok(())
    }

    /// The host writes a pattern; the device side (mapped) or the host (pinned) reads it back.
    fn host_round_trip(&self, what: &str, mem: &HostMemory, bytes: usize, check: CheckId) -> Found {
        let _h = CallerScope::enter(HARNESS);
        let n = bytes.min(EDGE);
        let pattern = [0x5au8; EDGE];
        self.driver
            .host_write(mem.host_ptr(), &pattern[..n])
            .map_err(|e| self.fail(check, format!("{what}: the host cannot write it: {e}")))?;
        let mut back = [0u8; EDGE];
        let r = match mem.device_ptr() {
            Some(d) => self.driver.memcpy_dtoh(&mut back[..n], d, None),
            None => self.driver.host_read(mem.host_ptr(), &mut back[..n]),
        };
        r.map_err(|e| self.fail(check, format!("{what}: reading it back failed: {e}")))?;
        if back[..n] != pattern[..n] {
            return Err(self.fail(
                check,
                format!("{what}: the device pointer does not reach the bytes the host wrote"),
            ));
        }
        Ok(())
    }

    pub(super) fn memallocmanaged(&mut self, size: Size, attach_global: bool) -> Found {
        const C: CheckId = CheckId::MemallocmanagedIsUnified;
        self.ensure_initialized()?;
        let bytes = size.bytes(self.device_total);
        let r = self
            .call(|m| m.memallocmanaged(bytes, attach_global))?
            .map_err(|p| self.fail(oom_or(size, C), format!("memallocmanaged({bytes}): {p}")))?;
        if !self.caps.managed_memory {
            return match r {
                Err(_) => Ok(()),
                Ok(_) => Err(self.fail(
                    C,
                    "capabilities().managed_memory is false, yet memallocmanaged returned memory",
                )),
            };
        }
        if size == Size::Zero {
            return check_zero_size_is_an_error("memallocmanaged", &r)
                .map_err(|m| self.fail(CheckId::ZeroSizeIsAnError, m));
        }
        if size.is_absurd() {
            return check_out_of_memory_is_an_error("memallocmanaged", bytes, &r)
                .map_err(|m| self.fail(CheckId::OutOfMemoryIsAnError, m));
        }
        let mem = match r {
            Ok(m) => m,
            Err(e) if e.is_out_of_memory() => return Ok(()),
            Err(e) => return Err(self.fail(C, format!("memallocmanaged({bytes}) failed: {e}"))),
        };
        let what = format!("memallocmanaged({bytes}, attach_global={attach_global})");
        if mem.host_ptr() != mem.device_ptr().as_host() || mem.size() < bytes {
            return Err(self.fail(C, format!("{what} returned {mem:?}: host and device must see one address of at least {bytes} bytes")));
        }
        let base = mem.device_ptr();
        check_memalloc_never_overlaps(&self.model, &what, base, bytes)
            .map_err(|m| self.fail(CheckId::MemallocNeverOverlaps, m))?;
        // The host writes through its address; the device side must read the same bytes.
        let fill = 0x3c;
        {
            let _h = CallerScope::enter(HARNESS);
            let mut back = [0u8; EDGE];
            for (off, len) in spans(bytes).into_iter().filter(|s| s.1 > 0) {
                let at = off as u64;
                self.driver
                    .host_write(mem.host_ptr().offset(at), &[fill; EDGE][..len])
                    .and_then(|()| {
                        self.driver
                            .memcpy_dtoh(&mut back[..len], base.offset(at), None)
                    })
                    .map_err(|e| {
                        let note = BufKind::Managed.fault_note(&e);
                        self.fail(
                            C,
                            format!("{what}: host write and device read failed: {e}{note}"),
                        )
                    })?;
                check_writes_stay_in_their_allocation(u32::MAX, at, fill, &back[..len])
                    .map_err(|m| self.fail(C, format!("{what}: host and device disagree: {m}")))?;
            }
        }
        let id = self.new_buffer(Buffer {
            base,
            size: bytes,
            kind: BufKind::Managed,
            alloc_stream: None,
            last_stream: emm_core::StreamId::DEFAULT,
            fill,
            handles: 1,
        });
        self.model.insert_live(base.0, bytes as u64, id, None);
        self.handles.push(Handle::Managed { buffer: id, mem });
        self.coverage.managed += 1;
        Ok(())
    }

    pub(super) fn ipc(&mut self, pick: Pick, start: u16) -> Found {
        const C: CheckId = CheckId::IpcHandleAddressesSameBytes;
        let Some(id) = self.pick_buffer(pick, |b| {
            b.kind == BufKind::Device && b.alloc_stream.is_none()
        }) else {
            return Ok(());
        };
        let (Some(owner), Some(b)) = (self.pointer_of(id), self.buffers.get(&id)) else {
            return Ok(());
        };
        let (fill, last) = (b.fill, b.last_stream);
        let head = owner.size().min(EDGE);
        let off = usize::from(start) % head;
        let exported = owner
            .view(off..)
            .map_err(|e| self.fail(C, format!("a view failed: {e}")))?;
        {
            let _h = CallerScope::enter(HARNESS);
            self.driver
                .stream_synchronize(last)
                .map_err(|e| self.harness_error(C, "synchronizing before export", e))?;
        }
        let r = self
            .call(|m| m.get_ipc_handle(&exported))?
            .map_err(|p| self.fail(C, format!("get_ipc_handle: {p}")))?;
        let mut handle = match r {
            Ok(h) => h,
            Err(EmmError::Unsupported { .. }) => return Ok(()),
            Err(e) => {
                return Err(self.fail(
                    C,
                    format!("get_ipc_handle of {} failed: {e}", exported.device_ptr()),
                ))
            }
        };
        check_ipc_handle_addresses_same_bytes(&*self.driver, &exported, &handle)
            .map_err(|m| self.fail(C, m))?;
        self.coverage.ipc_handles += 1;
        if let (true, Some(importer)) =
            (self.observes.second_process, self.machine.second_process())
        {
            let _h = CallerScope::enter(HARNESS);
            let ctx = importer
                .primary_context(DeviceId(0))
                .map_err(|e| self.harness_error(C, "the second process's context", e))?;
            let opened = handle.open(importer.clone(), ctx).map_err(|e| {
                self.fail(
                    C,
                    format!("opening the handle in a second process failed: {e}"),
                )
            })?;
            let n = head - off;
            let mut back = [0u8; EDGE];
            let read = importer.memcpy_dtoh(&mut back[..n], opened.device_ptr(), None);
            let closed = handle.close();
            self.machine.importer_done().map_err(|e| {
                self.harness_error(C, "ordering the exporter after the importer", e)
            })?;
            read.map_err(|e| {
                self.fail(
                    C,
                    format!("the importer cannot read the handle's bytes: {e}"),
                )
            })?;
            closed.map_err(|e| self.fail(C, format!("closing the opened handle failed: {e}")))?;
            check_writes_stay_in_their_allocation(id, off as u64, fill, &back[..n]).map_err(
                |m| {
                    self.fail(
                        C,
                        format!("opened in another process, the handle reaches other bytes: {m}"),
                    )
                },
            )?;
        }
        self.handles.push(Handle::Ipc { buffer: id, handle });
        if let Some(b) = self.buffers.get_mut(&id) {
            b.handles += 1;
        }
        Ok(())
    }

    pub(super) fn memory_info(&mut self) -> Found {
        const C: CheckId = CheckId::GetMemoryInfoConsistent;
        let r = self
            .call(|m| m.get_memory_info())?
            .map_err(|p| self.fail(C, format!("get_memory_info: {p}")))?;
        if r.is_ok() {
            self.coverage.memory_info += 1;
        }
        check_get_memory_info_consistent(&r, self.caps.memory_info, self.device_total)
            .map_err(|m| self.fail(C, m))
    }

    /// Pins and unpins again every host buffer no live pointer pins: it must not be pinned
    /// any more ("pinned memory is immediately unpinned by its finalizer").
    pub(super) fn check_unpinned(&self, when: &str) -> Found {
        let _h = CallerScope::enter(HARNESS);
        for &(ptr, len) in &self.pageable {
            let pinned_now = self
                .handles
                .iter()
                .any(|h| matches!(h, Handle::Host { pin: Some((p, _)), .. } if *p == ptr));
            if pinned_now {
                continue;
            }
            match self.driver.host_register(ptr, len, false) {
                Ok(()) => {
                    self.driver.host_unregister(ptr).map_err(|e| {
                        self.harness_error(
                            CheckId::MempinUnpinsInFinalizer,
                            "unpinning a test pin",
                            e,
                        )
                    })?;
                }
                Err(e) if e.code == CudaCode::HOST_MEMORY_ALREADY_REGISTERED => {
                    return Err(self.fail(
                        CheckId::MempinUnpinsInFinalizer,
                        format!("{ptr} ({len} bytes) is still pinned {when}; the finalizer must unpin it"),
                    ));
                }
                Err(e) => {
                    return Err(self.harness_error(
                        CheckId::MempinUnpinsInFinalizer,
                        "pinning a test buffer",
                        e,
                    ))
                }
            }
        }
        Ok(())
    }

    /// Frees the suite's host buffers (after the pins on them are checked).
    pub(super) fn free_pageable(&mut self) {
        let _h = CallerScope::enter(HARNESS);
        for (p, _) in self.pageable.drain(..) {
            let _ = self.driver.pageable_free(p);
        }
    }
}

fn host_bytes(size: Size, total: u64) -> usize {
    if size.is_absurd() {
        size.bytes(total)
    } else {
        size.bytes(total).min(HOST_CAP)
    }
}

fn oom_or(size: Size, check: CheckId) -> CheckId {
    if size.is_absurd() {
        CheckId::OutOfMemoryIsAnError
    } else {
        check
    }
}
