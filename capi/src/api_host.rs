//! Host memory (pinned, mapped, pins of existing memory) and managed memory with prefetch and
//! advice. All of it is released by `emm_free`.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use emm_core::{Advice, DevicePtr, HostPtr, Location};

use crate::api_config::cudaStream_t;
use crate::ffi::lock;
use crate::ffi::{status, write_out};
use crate::host_table::{overlapping, HostEntry};
use crate::live_table::Live;
use crate::runtime::{runtime, Runtime};
use crate::status::{CapiError, CapiResult, EmmStatus};

/// `emm_host_alloc` flag: map the memory into the device address space.
pub const EMM_HOST_MAPPED: u32 = 1;
/// `emm_host_alloc` flag: pinned for every context, not only `device`'s.
pub const EMM_HOST_PORTABLE: u32 = 2;
/// `emm_host_alloc` flag: write-combined (fast for the device to read, slow for the host).
pub const EMM_HOST_WRITE_COMBINED: u32 = 4;

/// `emm_managed_prefetch` / `emm_managed_advise` location: the host (any other negative
/// value is refused).
pub const EMM_LOCATION_HOST: i32 = -1;

/// Allocates `size` bytes of pinned host memory through `device`'s manager; writes the host
/// address to `*host_ptr` and, with `EMM_HOST_MAPPED`, the device address to `*device_ptr`
/// (which may be NULL otherwise). Freed by `emm_free(host_ptr)`.
///
/// # Safety
///
/// 1. `host_ptr` is NULL or valid for writing one pointer; so is `device_ptr`.
#[no_mangle]
pub unsafe extern "C" fn emm_host_alloc(
    size: usize,
    device: c_int,
    flags: u32,
    host_ptr: *mut *mut c_void,
    device_ptr: *mut *mut c_void,
) -> EmmStatus {
    const F: &str = "emm_host_alloc";
    status(F, || {
        CapiError::non_null(F, "host_ptr", host_ptr)?;
        if flags & !(EMM_HOST_MAPPED | EMM_HOST_PORTABLE | EMM_HOST_WRITE_COMBINED) != 0 {
            return Err(CapiError::invalid(
                F,
                format!("flags {flags:#x} has unknown bits; combine EMM_HOST_MAPPED, EMM_HOST_PORTABLE, EMM_HOST_WRITE_COMBINED"),
            ));
        }
        let mapped = flags & EMM_HOST_MAPPED != 0;
        if mapped && device_ptr.is_null() {
            return Err(CapiError::null(F, "device_ptr (EMM_HOST_MAPPED is set)"));
        }
        let r = runtime()?;
        let d = r.device(device)?;
        let memory = r.context(d)?.memhostalloc(
            size,
            mapped,
            flags & EMM_HOST_PORTABLE != 0,
            flags & EMM_HOST_WRITE_COMBINED != 0,
        )?;
        let dev = memory.device_ptr();
        let (h, entry) = if r.backend().is_sim() {
            HostEntry::with_real_memory(memory)?
        } else {
            (memory.host_ptr().0, HostEntry::plain(memory))
        };
        lock(&r.host).insert(h, entry);
        // SAFETY: checked non-null above; writable by the caller's promise (1).
        unsafe { write_out(F, "host_ptr", host_ptr, h as *mut c_void) }?;
        if let (Some(dp), false) = (dev, device_ptr.is_null()) {
            // SAFETY: non-null; writable by the caller's promise (1).
            unsafe { write_out(F, "device_ptr", device_ptr, dp.0 as *mut c_void) }?;
        }
        Ok(())
    })
}

/// Pins the caller's `size` bytes at `ptr` (page-locks them) through `device`'s manager;
/// `mapped` also maps them and writes the device address to `*device_ptr`. `emm_free(ptr)`
/// unpins; the memory stays the caller's.
///
/// # Safety
///
/// 1. `ptr` points to `size` bytes of host memory the caller owns until it is unpinned.
/// 2. `device_ptr` is NULL or valid for writing one pointer.
#[no_mangle]
pub unsafe extern "C" fn emm_host_pin(
    ptr: *mut c_void,
    size: usize,
    device: c_int,
    mapped: c_int,
    device_ptr: *mut *mut c_void,
) -> EmmStatus {
    const F: &str = "emm_host_pin";
    status(F, || {
        CapiError::non_null(F, "ptr", ptr)?;
        if mapped != 0 && device_ptr.is_null() {
            return Err(CapiError::null(F, "device_ptr (mapped is set)"));
        }
        let r = runtime()?;
        let d = r.device(device)?;
        let addr = ptr as u64;
        let entry = if r.backend().is_sim() {
            pin_stand_in(r, d, addr, size, mapped != 0)?
        } else {
            let memory = r
                .context(d)?
                .mempin(None, HostPtr(addr), size, mapped != 0)?;
            HostEntry::plain(memory)
        };
        let dev = entry.device_ptr();
        lock(&r.host).insert(addr, entry);
        if let (Some(dp), false) = (dev, device_ptr.is_null()) {
            // SAFETY: non-null; writable by the caller's promise (2).
            unsafe { write_out(F, "device_ptr", device_ptr, dp.0 as *mut c_void) }?;
        }
        Ok(())
    })
}

/// On the simulator: pins a simulated stand-in of the caller's `size` bytes at `addr` (the
/// simulator pins only memory it handed out), refusing a range that overlaps one already
/// pinned or allocated, as CUDA does.
fn pin_stand_in(
    r: &Runtime,
    d: emm_core::DeviceId,
    addr: u64,
    size: usize,
    mapped: bool,
) -> CapiResult<HostEntry> {
    const F: &str = "emm_host_pin";
    if size == 0 {
        return Err(CapiError::invalid(F, "size 0: pin at least one byte"));
    }
    if let Some(base) = overlapping(&lock(&r.host), addr, size) {
        return Err(CapiError::invalid(
            F,
            format!(
                "{size} bytes at {addr:#x} overlap the host memory or pin at {base:#x}; free \
                 that first"
            ),
        ));
    }
    let context = r.context(d)?;
    let driver = Arc::clone(r.driver());
    let stand_in = r.in_context(d, || Ok(driver.pageable_alloc(size)?))?;
    match context.mempin(None, stand_in, size, mapped) {
        Ok(memory) => Ok(HostEntry::with_stand_in(memory, driver, stand_in)),
        Err(e) => {
            let _ = driver.pageable_free(stand_in);
            Err(e.into())
        }
    }
}

/// Allocates `size` bytes of managed memory on `device` (`attach_global`: accessible from any
/// stream) and writes the address to `*ptr`. Freed by `emm_free`.
///
/// Returns `EMM_STATUS_UNSUPPORTED` when the manager does not allocate managed memory.
///
/// # Safety
///
/// 1. `ptr` is NULL or valid for writing one pointer.
#[no_mangle]
pub unsafe extern "C" fn emm_managed_alloc(
    size: usize,
    device: c_int,
    attach_global: c_int,
    ptr: *mut *mut c_void,
) -> EmmStatus {
    const F: &str = "emm_managed_alloc";
    status(F, || {
        CapiError::non_null(F, "ptr", ptr)?;
        let r = runtime()?;
        let d = r.device(device)?;
        let context = r.context(d)?;
        let memory = context.memallocmanaged(size, attach_global != 0)?;
        let addr = memory.device_ptr().0;
        r.live(d).insert(
            addr,
            Live::Managed {
                memory,
                _context: context,
            },
        );
        // SAFETY: checked non-null above; writable by the caller's promise (1).
        unsafe { write_out(F, "ptr", ptr, addr as *mut c_void) }
    })
}

fn location(r: &Runtime, function: &str, l: i32) -> CapiResult<Location> {
    match l {
        EMM_LOCATION_HOST => Ok(Location::Host),
        _ if l < 0 => Err(CapiError::invalid(
            function,
            format!("location {l}: give a device ordinal or EMM_LOCATION_HOST (-1)"),
        )),
        _ => Ok(Location::Device(r.device(l)?)),
    }
}

/// The device of the managed allocation holding `[ptr, ptr + size)`, checked.
fn managed_range(
    r: &Runtime,
    function: &str,
    ptr: *mut c_void,
    size: usize,
) -> CapiResult<emm_core::DeviceId> {
    let addr = ptr as u64;
    for i in 0..r.device_count() as i32 {
        let d = r.device(i)?;
        let live = r.live(d);
        if let Some((base, Live::Managed { memory, .. })) = live.containing(addr) {
            let end = addr.checked_add(size as u64);
            if size == 0 || end.is_none_or(|e| e > base + memory.size() as u64) {
                return Err(CapiError::invalid(
                    function,
                    format!(
                        "{size} bytes at {addr:#x} do not lie inside the managed allocation at \
                         {base:#x} ({} bytes); give a non-empty range inside it",
                        memory.size()
                    ),
                ));
            }
            return Ok(d);
        }
    }
    Err(CapiError::new(
        EmmStatus::UnknownPointer,
        format!("{function}: {addr:#x} is not inside a live emm managed allocation"),
    ))
}

/// Migrates `size` bytes of managed memory at `ptr` to `location` (a device ordinal or
/// `EMM_LOCATION_HOST`), ordered on `stream`.
///
/// # Safety
///
/// 1. `stream` is NULL, 2, or a live stream of the allocation's device.
#[no_mangle]
pub unsafe extern "C" fn emm_managed_prefetch(
    ptr: *mut c_void,
    size: usize,
    location: c_int,
    stream: cudaStream_t,
) -> EmmStatus {
    const F: &str = "emm_managed_prefetch";
    status(F, || {
        let r = runtime()?;
        let d = managed_range(r, F, ptr, size)?;
        let to = self::location(r, F, location)?;
        let s = r.stream(stream, d)?;
        r.in_context(d, || {
            Ok(r.driver()
                .mem_prefetch(DevicePtr(ptr as u64), size, to, s)?)
        })
    })
}

/// Advises the driver about `size` bytes of managed memory at `ptr`. `advice` takes CUDA's
/// `CUmem_advise` values: 1 set read-mostly, 2 unset read-mostly, 3 set preferred location,
/// 4 unset preferred location, 5 set accessed-by, 6 unset accessed-by; `location` is a device
/// ordinal or `EMM_LOCATION_HOST`.
#[no_mangle]
pub extern "C" fn emm_managed_advise(
    ptr: *mut c_void,
    size: usize,
    advice: c_int,
    location: c_int,
) -> EmmStatus {
    const F: &str = "emm_managed_advise";
    status(F, || {
        let a = match advice {
            1 => Advice::SetReadMostly,
            2 => Advice::UnsetReadMostly,
            3 => Advice::SetPreferredLocation,
            4 => Advice::UnsetPreferredLocation,
            5 => Advice::SetAccessedBy,
            6 => Advice::UnsetAccessedBy,
            other => {
                return Err(CapiError::invalid(
                    F,
                    format!("advice {other} is not a CUmem_advise value; give 1 to 6"),
                ))
            }
        };
        let r = runtime()?;
        let d = managed_range(r, F, ptr, size)?;
        let at = self::location(r, F, location)?;
        r.in_context(d, || {
            Ok(r.driver().mem_advise(DevicePtr(ptr as u64), size, a, at)?)
        })
    })
}
