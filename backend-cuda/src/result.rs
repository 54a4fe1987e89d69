//! One function per CUDA driver call, each returning a `DriverResult`. All of emm-cuda's
//! `unsafe` lives here; `driver.rs` calls these and holds no raw call.
//!
//! Each function links the NVIDIA page of the call it wraps. The callers guarantee the
//! handles are live (the driver module tracks every stream, event, pool and context it made).

use std::ffi::{c_char, c_void, CStr};

use cudarc::driver::sys;
use emm_core::{CudaCode, DriverError, DriverResult};

/// Turns a `CUresult` into a `DriverResult`, naming the call and what was asked.
fn check(call: &'static str, r: sys::CUresult, asked: impl FnOnce() -> String) -> DriverResult<()> {
    check_code(call, r as i32, asked)
}

/// Whether `EMM_CUDA_TRACE=1` asked for every driver call to be printed on stderr.
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("EMM_CUDA_TRACE").is_some_and(|v| v == "1"))
}

/// As [`check`], for a code already read as a number.
fn check_code(call: &'static str, code: i32, asked: impl FnOnce() -> String) -> DriverResult<()> {
    if tracing() {
        let detail = asked();
        eprintln!("cuda: {call} ({detail}) -> {}", CudaCode(code));
        if code == 0 {
            return Ok(());
        }
        return Err(DriverError::new(call, CudaCode(code), detail));
    }
    if code == 0 {
        return Ok(());
    }
    Err(DriverError::new(call, CudaCode(code), asked()))
}

/// Whether `libcuda` can be loaded at all; cudarc panics on a missing library, so every other
/// call here must come after this returned true.
#[cfg(feature = "dynamic-loading")]
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the library by name; no symbol is called.
    unsafe { sys::is_culib_present() }
}

/// Linked against `libcuda` (`dynamic-linking`, `static-linking`): the program could not have
/// started without it.
#[cfg(not(feature = "dynamic-loading"))]
pub fn driver_present() -> bool {
    true
}

/// [cuInit](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__INITIALIZE.html)
pub fn init() -> DriverResult<()> {
    // SAFETY: cuInit takes no pointers.
    let r = unsafe { sys::cuInit(0) };
    check("cuInit", r, || "initializing the CUDA driver".into())
}

pub mod device {
    //! Devices: [group__CUDA__DEVICE](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)
    use super::*;

    /// `cuDeviceGetCount`
    pub fn count() -> DriverResult<i32> {
        let mut n = 0;
        // SAFETY: writes one int.
        let r = unsafe { sys::cuDeviceGetCount(&mut n) };
        check("cuDeviceGetCount", r, || "counting devices".into())?;
        Ok(n)
    }

    /// `cuDeviceGet`
    pub fn get(ordinal: i32) -> DriverResult<sys::CUdevice> {
        let mut d = 0;
        // SAFETY: writes one CUdevice.
        let r = unsafe { sys::cuDeviceGet(&mut d, ordinal) };
        check("cuDeviceGet", r, || format!("device {ordinal}"))?;
        Ok(d)
    }

    /// `cuDeviceGetName`
    pub fn name(d: sys::CUdevice) -> DriverResult<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
        let r = unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, d) };
        check("cuDeviceGetName", r, || format!("device {d}"))?;
        // SAFETY: NUL-terminated within the buffer on success.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// `cuDeviceTotalMem`
    pub fn total_mem(d: sys::CUdevice) -> DriverResult<usize> {
        let mut n = 0;
        // SAFETY: writes one size_t.
        let r = unsafe { sys::cuDeviceTotalMem_v2(&mut n, d) };
        check("cuDeviceTotalMem", r, || format!("device {d}"))?;
        Ok(n)
    }

    /// `cuDeviceGetAttribute`
    pub fn attribute(d: sys::CUdevice, attr: sys::CUdevice_attribute) -> DriverResult<i32> {
        let mut v = 0;
        // SAFETY: writes one int.
        let r = unsafe { sys::cuDeviceGetAttribute(&mut v, attr, d) };
        check("cuDeviceGetAttribute", r, || {
            format!("{attr:?} of device {d}")
        })?;
        Ok(v)
    }

    /// `cuDeviceCanAccessPeer`
    pub fn can_access_peer(d: sys::CUdevice, peer: sys::CUdevice) -> DriverResult<bool> {
        let mut v = 0;
        // SAFETY: writes one int.
        let r = unsafe { sys::cuDeviceCanAccessPeer(&mut v, d, peer) };
        check("cuDeviceCanAccessPeer", r, || {
            format!("device {d} to {peer}")
        })?;
        Ok(v != 0)
    }

    /// `cuDeviceGetDefaultMemPool`
    pub fn default_mem_pool(d: sys::CUdevice) -> DriverResult<sys::CUmemoryPool> {
        let mut p = std::ptr::null_mut();
        // SAFETY: writes one handle.
        let r = unsafe { sys::cuDeviceGetDefaultMemPool(&mut p, d) };
        check("cuDeviceGetDefaultMemPool", r, || format!("device {d}"))?;
        Ok(p)
    }
}

pub mod ctx {
    //! Contexts: [group__CUDA__CTX](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)
    use super::*;

    /// `cuDevicePrimaryCtxRetain`
    pub fn primary_retain(d: sys::CUdevice) -> DriverResult<sys::CUcontext> {
        let mut c = std::ptr::null_mut();
        // SAFETY: writes one handle.
        let r = unsafe { sys::cuDevicePrimaryCtxRetain(&mut c, d) };
        check("cuDevicePrimaryCtxRetain", r, || format!("device {d}"))?;
        Ok(c)
    }

    /// `cuCtxSetCurrent`
    pub fn set_current(c: sys::CUcontext) -> DriverResult<()> {
        // SAFETY: `c` is a retained primary context (checked by the caller).
        let r = unsafe { sys::cuCtxSetCurrent(c) };
        check("cuCtxSetCurrent", r, || "making a context current".into())
    }

    /// `cuCtxGetCurrent`
    pub fn get_current() -> DriverResult<sys::CUcontext> {
        let mut c = std::ptr::null_mut();
        // SAFETY: writes one handle (null when none is current).
        let r = unsafe { sys::cuCtxGetCurrent(&mut c) };
        check("cuCtxGetCurrent", r, || {
            "reading the current context".into()
        })?;
        Ok(c)
    }

    /// `cuCtxSynchronize`
    pub fn synchronize() -> DriverResult<()> {
        // SAFETY: takes no pointers.
        let r = unsafe { sys::cuCtxSynchronize() };
        check("cuCtxSynchronize", r, || {
            "synchronizing the current context".into()
        })
    }

    /// `cuCtxEnablePeerAccess`
    pub fn enable_peer_access(peer: sys::CUcontext) -> DriverResult<()> {
        // SAFETY: `peer` is a retained primary context (checked by the caller).
        let r = unsafe { sys::cuCtxEnablePeerAccess(peer, 0) };
        check("cuCtxEnablePeerAccess", r, || "enabling peer access".into())
    }
}

pub mod mem {
    //! Memory: [group__CUDA__MEM](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
    //! [group__CUDA__MALLOC__ASYNC](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html),
    //! [group__CUDA__UNIFIED](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)
    use super::*;
    use emm_core::units::Bytes;

    /// `cuMemAlloc`
    pub fn alloc(size: usize) -> DriverResult<u64> {
        let mut p = 0;
        // SAFETY: writes one device pointer.
        let r = unsafe { sys::cuMemAlloc_v2(&mut p, size) };
        check("cuMemAlloc", r, || {
            format!("requested {}", Bytes(size as u64))
        })?;
        Ok(p)
    }

    /// `cuMemFree`
    pub fn free(p: u64) -> DriverResult<()> {
        // SAFETY: the driver validates the pointer and returns an error for a foreign one.
        let r = unsafe { sys::cuMemFree_v2(p) };
        check("cuMemFree", r, || format!("freeing {p:#x}"))
    }

    /// `cuMemAllocAsync`
    pub fn alloc_async(size: usize, s: sys::CUstream) -> DriverResult<u64> {
        let mut p = 0;
        // SAFETY: writes one device pointer; `s` is a live stream (checked by the caller).
        let r = unsafe { sys::cuMemAllocAsync(&mut p, size, s) };
        check("cuMemAllocAsync", r, || {
            format!("requested {} on stream {s:?}", Bytes(size as u64))
        })?;
        Ok(p)
    }

    /// `cuMemAllocFromPoolAsync`
    pub fn alloc_from_pool_async(
        size: usize,
        pool: sys::CUmemoryPool,
        s: sys::CUstream,
    ) -> DriverResult<u64> {
        let mut p = 0;
        // SAFETY: writes one device pointer; `pool` and `s` are live (checked by the caller).
        let r = unsafe { sys::cuMemAllocFromPoolAsync(&mut p, size, pool, s) };
        check("cuMemAllocFromPoolAsync", r, || {
            format!("requested {} on stream {s:?}", Bytes(size as u64))
        })?;
        Ok(p)
    }

    /// `cuMemFreeAsync`
    pub fn free_async(p: u64, s: sys::CUstream) -> DriverResult<()> {
        // SAFETY: the driver validates the pointer; `s` is live (checked by the caller).
        let r = unsafe { sys::cuMemFreeAsync(p, s) };
        check("cuMemFreeAsync", r, || {
            format!("freeing {p:#x} on stream {s:?}")
        })
    }

    /// `cuMemPoolCreate` for device memory on device `d`.
    pub fn pool_create(d: i32) -> DriverResult<sys::CUmemoryPool> {
        // SAFETY: an all-zero CUmemPoolProps is a valid value of this plain C struct.
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = d;
        let mut pool = std::ptr::null_mut();
        // SAFETY: `props` is initialized; writes one handle.
        let r = unsafe { sys::cuMemPoolCreate(&mut pool, &props) };
        check("cuMemPoolCreate", r, || format!("a pool on device {d}"))?;
        Ok(pool)
    }

    /// `cuMemPoolDestroy`
    pub fn pool_destroy(pool: sys::CUmemoryPool) -> DriverResult<()> {
        // SAFETY: `pool` was created by pool_create (checked by the caller).
        let r = unsafe { sys::cuMemPoolDestroy(pool) };
        check("cuMemPoolDestroy", r, || "destroying a pool".into())
    }

    /// `cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)`
    pub fn pool_set_release_threshold(pool: sys::CUmemoryPool, bytes: u64) -> DriverResult<()> {
        let mut v = bytes;
        // SAFETY: the attribute is a cuuint64_t read from `v`.
        let r = unsafe {
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut v as *mut u64).cast::<c_void>(),
            )
        };
        check("cuMemPoolSetAttribute", r, || {
            format!("release threshold {}", Bytes(bytes))
        })
    }

    /// `cuMemPoolGetAttribute` of a `cuuint64_t` attribute.
    pub fn pool_get_u64(
        pool: sys::CUmemoryPool,
        attr: sys::CUmemPool_attribute,
    ) -> DriverResult<u64> {
        let mut v = 0u64;
        // SAFETY: the reserved/used attributes are cuuint64_t written to `v`.
        let r = unsafe {
            sys::cuMemPoolGetAttribute(pool, attr, (&mut v as *mut u64).cast::<c_void>())
        };
        check("cuMemPoolGetAttribute", r, || format!("{attr:?}"))?;
        Ok(v)
    }

    /// `cuMemPoolTrimTo`
    pub fn pool_trim_to(pool: sys::CUmemoryPool, keep: usize) -> DriverResult<()> {
        // SAFETY: `pool` is live (checked by the caller).
        let r = unsafe { sys::cuMemPoolTrimTo(pool, keep) };
        check("cuMemPoolTrimTo", r, || {
            format!("trimming to {}", Bytes(keep as u64))
        })
    }

    /// `cuMemAllocManaged`
    pub fn alloc_managed(size: usize, attach_global: bool) -> DriverResult<u64> {
        let flags = if attach_global { 1 } else { 2 };
        let mut p = 0;
        // SAFETY: writes one device pointer.
        let r = unsafe { sys::cuMemAllocManaged(&mut p, size, flags) };
        check("cuMemAllocManaged", r, || {
            format!("requested {} of managed memory", Bytes(size as u64))
        })?;
        Ok(p)
    }

    /// A CUDA 13 location: a device ordinal, or the host when `None`.
    pub fn location(device: Option<i32>) -> sys::CUmemLocation {
        // SAFETY: an all-zero CUmemLocation is a valid value of this plain C struct.
        let mut l: sys::CUmemLocation = unsafe { std::mem::zeroed() };
        match device {
            Some(d) => {
                l.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
                l.id = d;
            }
            None => l.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
        }
        l
    }

    /// `cuMemAdvise_v2`
    pub fn advise(
        p: u64,
        size: usize,
        advice: sys::CUmem_advise,
        loc: sys::CUmemLocation,
    ) -> DriverResult<()> {
        // SAFETY: the driver validates the range.
        let r = unsafe { sys::cuMemAdvise_v2(p, size, advice, loc) };
        check("cuMemAdvise_v2", r, || {
            format!("{advice:?} on {p:#x}+{size}")
        })
    }

    /// `cuMemPrefetchAsync_v2`
    pub fn prefetch(
        p: u64,
        size: usize,
        loc: sys::CUmemLocation,
        s: sys::CUstream,
    ) -> DriverResult<()> {
        // SAFETY: the driver validates the range; `s` is live (checked by the caller).
        let r = unsafe { sys::cuMemPrefetchAsync_v2(p, size, loc, 0, s) };
        check("cuMemPrefetchAsync_v2", r, || {
            format!("prefetching {p:#x}+{size}")
        })
    }

    /// `cuMemHostAlloc`
    pub fn host_alloc(size: usize, flags: u32) -> DriverResult<u64> {
        let mut p = std::ptr::null_mut();
        // SAFETY: writes one host pointer.
        let r = unsafe { sys::cuMemHostAlloc(&mut p, size, flags) };
        check("cuMemHostAlloc", r, || {
            format!("requested {} of pinned host memory", Bytes(size as u64))
        })?;
        Ok(p as u64)
    }

    /// `cuMemFreeHost`
    pub fn free_host(p: u64) -> DriverResult<()> {
        // SAFETY: the caller checked that `p` came from host_alloc.
        let r = unsafe { sys::cuMemFreeHost(p as *mut c_void) };
        check("cuMemFreeHost", r, || format!("freeing {p:#x}"))
    }

    /// `cuMemHostRegister`
    pub fn host_register(p: u64, size: usize, mapped: bool) -> DriverResult<()> {
        let flags = if mapped { 2 } else { 0 };
        // SAFETY: the driver validates that the range is mapped host memory.
        let r = unsafe { sys::cuMemHostRegister_v2(p as *mut c_void, size, flags) };
        check("cuMemHostRegister", r, || {
            format!("registering {p:#x}+{size}")
        })
    }

    /// `cuMemHostUnregister`
    pub fn host_unregister(p: u64) -> DriverResult<()> {
        // SAFETY: the driver validates the pointer.
        let r = unsafe { sys::cuMemHostUnregister(p as *mut c_void) };
        check("cuMemHostUnregister", r, || format!("unregistering {p:#x}"))
    }

    /// `cuMemHostGetDevicePointer`
    pub fn host_device_pointer(p: u64) -> DriverResult<u64> {
        let mut d = 0;
        // SAFETY: writes one device pointer; the driver validates `p`.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, p as *mut c_void, 0) };
        check("cuMemHostGetDevicePointer", r, || format!("{p:#x}"))?;
        Ok(d)
    }

    /// `cuMemGetInfo`
    pub fn get_info() -> DriverResult<(usize, usize)> {
        let (mut free, mut total) = (0, 0);
        // SAFETY: writes two size_t.
        let r = unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) };
        check("cuMemGetInfo", r, || "reading free memory".into())?;
        Ok((free, total))
    }

    /// `cuMemGetAddressRange`
    pub fn get_address_range(p: u64) -> DriverResult<(u64, usize)> {
        let (mut base, mut size) = (0, 0);
        // SAFETY: writes a pointer and a size; the driver validates `p`.
        let r = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, p) };
        check("cuMemGetAddressRange", r, || format!("{p:#x}"))?;
        Ok((base, size))
    }

    /// `cuIpcGetMemHandle`
    pub fn ipc_get_handle(p: u64) -> DriverResult<[u8; 64]> {
        // SAFETY: an all-zero handle is a valid value of this plain C struct.
        let mut h: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
        // SAFETY: writes the handle; the driver validates `p`.
        let r = unsafe { sys::cuIpcGetMemHandle(&mut h, p) };
        check("cuIpcGetMemHandle", r, || format!("{p:#x}"))?;
        Ok(h.reserved.map(|c| c as u8))
    }

    /// `cuIpcOpenMemHandle` with lazy peer access.
    pub fn ipc_open_handle(handle: &[u8; 64]) -> DriverResult<u64> {
        // SAFETY: an all-zero handle is a valid value of this plain C struct.
        let mut h: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
        h.reserved = handle.map(|b| b as c_char);
        let mut p = 0;
        // SAFETY: the driver validates the handle's contents.
        let r = unsafe { sys::cuIpcOpenMemHandle_v2(&mut p, h, 1) };
        check("cuIpcOpenMemHandle", r, || "opening an IPC handle".into())?;
        Ok(p)
    }

    /// `cuIpcCloseMemHandle`
    pub fn ipc_close_handle(p: u64) -> DriverResult<()> {
        // SAFETY: the driver validates the pointer.
        let r = unsafe { sys::cuIpcCloseMemHandle(p) };
        check("cuIpcCloseMemHandle", r, || format!("closing {p:#x}"))
    }

    /// `cuMemcpyHtoD[Async]`
    pub fn htod(dst: u64, src: &[u8], s: Option<sys::CUstream>) -> DriverResult<()> {
        let n = src.len();
        // SAFETY: `src` is valid for `n` bytes; the driver validates `dst`; `s` is live.
        let r = unsafe {
            match s {
                None => sys::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), n),
                Some(s) => sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), n, s),
            }
        };
        check("cuMemcpyHtoD", r, || {
            format!("{n} bytes to {dst:#x} on {s:?}")
        })
    }

    /// `cuMemcpyDtoH[Async]`; the stream form is followed by a synchronize by the caller.
    pub fn dtoh(dst: &mut [u8], src: u64, s: Option<sys::CUstream>) -> DriverResult<()> {
        let n = dst.len();
        // SAFETY: `dst` is valid for `n` bytes; the driver validates `src`; `s` is live.
        let r = unsafe {
            match s {
                None => sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, n),
                Some(s) => sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src, n, s),
            }
        };
        check("cuMemcpyDtoH", r, || {
            format!("{n} bytes from {src:#x} on {s:?}")
        })
    }

    /// `cuMemcpy[Async]`
    pub fn copy(dst: u64, src: u64, n: usize, s: Option<sys::CUstream>) -> DriverResult<()> {
        // SAFETY: the driver validates both unified addresses; `s` is live.
        let r = unsafe {
            match s {
                None => sys::cuMemcpy(dst, src, n),
                Some(s) => sys::cuMemcpyAsync(dst, src, n, s),
            }
        };
        check("cuMemcpy", r, || {
            format!("{n} bytes from {src:#x} to {dst:#x}")
        })
    }

    /// `cuMemsetD8[Async]`
    pub fn set_d8(dst: u64, value: u8, n: usize, s: Option<sys::CUstream>) -> DriverResult<()> {
        // SAFETY: the driver validates `dst`; `s` is live.
        let r = unsafe {
            match s {
                None => sys::cuMemsetD8_v2(dst, value, n),
                Some(s) => sys::cuMemsetD8Async(dst, value, n, s),
            }
        };
        check("cuMemsetD8", r, || {
            format!("{n} bytes at {dst:#x} on {s:?}")
        })
    }
}

pub mod vmm {
    //! Virtual memory management: [group__CUDA__VA](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)
    use super::*;
    use emm_core::units::Bytes;

    /// Properties of pinned device memory on device `d` with no shareable handle, as
    /// `cuMemCreate` and `cuMemGetAllocationGranularity` take them.
    fn device_prop(d: i32) -> sys::CUmemAllocationProp {
        // SAFETY: an all-zero CUmemAllocationProp is a valid value of this plain C struct (a
        // null win32 pointer, no flags).
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        prop.location = mem::location(Some(d));
        prop
    }

    /// [`cuMemGetAllocationGranularity`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)
    /// with `CU_MEM_ALLOC_GRANULARITY_MINIMUM`.
    pub fn granularity(d: i32) -> DriverResult<usize> {
        let prop = device_prop(d);
        let mut g = 0;
        // SAFETY: `prop` is initialized; writes one size_t.
        let r = unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut g,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        };
        check("cuMemGetAllocationGranularity", r, || {
            format!("the granularity of device {d}")
        })?;
        Ok(g)
    }

    /// [`cuMemAddressReserve`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)
    /// anywhere (no address hint), no flags.
    pub fn address_reserve(size: usize, alignment: usize) -> DriverResult<u64> {
        let mut p = 0;
        // SAFETY: writes one device pointer; the driver validates size and alignment.
        let r = unsafe { sys::cuMemAddressReserve(&mut p, size, alignment, 0, 0) };
        check("cuMemAddressReserve", r, || {
            format!(
                "reserving {} of address space aligned to {alignment}",
                Bytes(size as u64)
            )
        })?;
        Ok(p)
    }

    /// [`cuMemAddressFree`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)
    pub fn address_free(p: u64, size: usize) -> DriverResult<()> {
        // SAFETY: takes no pointers; the caller checked that `p` is a live reservation of
        // `size` bytes with nothing mapped in it.
        let r = unsafe { sys::cuMemAddressFree(p, size) };
        check("cuMemAddressFree", r, || {
            format!("freeing the reservation {p:#x} of {}", Bytes(size as u64))
        })
    }

    /// [`cuMemCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)
    /// of pinned memory on device `d`.
    pub fn create(size: usize, d: i32) -> DriverResult<u64> {
        let prop = device_prop(d);
        let mut h = 0;
        // SAFETY: `prop` is initialized; writes one handle.
        let r = unsafe { sys::cuMemCreate(&mut h, size, &prop, 0) };
        check("cuMemCreate", r, || {
            format!("requested {} on device {d}", Bytes(size as u64))
        })?;
        Ok(h)
    }

    /// [`cuMemRelease`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)
    pub fn release(h: u64) -> DriverResult<()> {
        // SAFETY: the caller checked that `h` is a live handle from `create`.
        let r = unsafe { sys::cuMemRelease(h) };
        check("cuMemRelease", r, || format!("releasing phys:{h:#x}"))
    }

    /// [`cuMemMap`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html) at
    /// offset 0.
    pub fn map(p: u64, size: usize, h: u64) -> DriverResult<()> {
        // SAFETY: the caller checked that `h` is a live handle; the driver validates the range.
        let r = unsafe { sys::cuMemMap(p, size, 0, h, 0) };
        check("cuMemMap", r, || {
            format!("mapping {} of phys:{h:#x} at {p:#x}", Bytes(size as u64))
        })
    }

    /// [`cuMemUnmap`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)
    pub fn unmap(p: u64, size: usize) -> DriverResult<()> {
        // SAFETY: takes no pointers; the driver validates the range.
        let r = unsafe { sys::cuMemUnmap(p, size) };
        check("cuMemUnmap", r, || {
            format!("unmapping {} at {p:#x}", Bytes(size as u64))
        })
    }

    /// [`cuMemSetAccess`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html):
    /// read and write for device `d`.
    pub fn set_access(p: u64, size: usize, d: i32) -> DriverResult<()> {
        // SAFETY: an all-zero CUmemAccessDesc is a valid value of this plain C struct.
        let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
        desc.location = mem::location(Some(d));
        desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        // SAFETY: `desc` is one initialized descriptor, and the count says one.
        let r = unsafe { sys::cuMemSetAccess(p, size, &desc, 1) };
        check("cuMemSetAccess", r, || {
            format!(
                "read-write access for device {d} to {} at {p:#x}",
                Bytes(size as u64)
            )
        })
    }
}

pub mod stream {
    //! Streams and events: [group__CUDA__STREAM](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html),
    //! [group__CUDA__EVENT](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)
    use super::*;

    /// `cuStreamCreate`
    pub fn create(non_blocking: bool) -> DriverResult<sys::CUstream> {
        let mut s = std::ptr::null_mut();
        // SAFETY: writes one handle.
        let r = unsafe { sys::cuStreamCreate(&mut s, u32::from(non_blocking)) };
        check("cuStreamCreate", r, || format!("creating stream {s:?}"))?;
        Ok(s)
    }

    /// `cuStreamDestroy`
    pub fn destroy(s: sys::CUstream) -> DriverResult<()> {
        // SAFETY: `s` was created by `create` (checked by the caller).
        let r = unsafe { sys::cuStreamDestroy_v2(s) };
        check("cuStreamDestroy", r, || "destroying a stream".into())
    }

    /// `cuStreamGetCtx`: the context a stream belongs to (also how a foreign handle is checked).
    pub fn get_ctx(s: sys::CUstream) -> DriverResult<sys::CUcontext> {
        let mut c = std::ptr::null_mut();
        // SAFETY: writes one handle; the driver reports an invalid stream as an error code.
        let r = unsafe { sys::cuStreamGetCtx(s, &mut c) };
        check("cuStreamGetCtx", r, || {
            format!("the context of stream {s:?}")
        })?;
        Ok(c)
    }

    /// `cuStreamSynchronize`
    pub fn synchronize(s: sys::CUstream) -> DriverResult<()> {
        // SAFETY: `s` is live (checked by the caller).
        let r = unsafe { sys::cuStreamSynchronize(s) };
        check("cuStreamSynchronize", r, || {
            format!("synchronizing stream {s:?}")
        })
    }

    /// `cuStreamQuery`: `Ok(false)` for `CUDA_ERROR_NOT_READY`.
    pub fn query(s: sys::CUstream) -> DriverResult<bool> {
        // SAFETY: `s` is live (checked by the caller).
        let r = unsafe { sys::cuStreamQuery(s) } as i32;
        if r == CudaCode::NOT_READY.0 {
            return Ok(false);
        }
        check_code("cuStreamQuery", r, || "querying a stream".into()).map(|()| true)
    }

    /// `cuStreamWaitEvent`
    pub fn wait_event(s: sys::CUstream, e: sys::CUevent) -> DriverResult<()> {
        // SAFETY: `s` and `e` are live (checked by the caller).
        let r = unsafe { sys::cuStreamWaitEvent(s, e, 0) };
        check("cuStreamWaitEvent", r, || {
            format!("stream {s:?} waits on event {e:?}")
        })
    }

    /// `cuEventCreate` with timing disabled (cheaper to record).
    pub fn event_create() -> DriverResult<sys::CUevent> {
        let mut e = std::ptr::null_mut();
        // SAFETY: writes one handle; 2 is CU_EVENT_DISABLE_TIMING.
        let r = unsafe { sys::cuEventCreate(&mut e, 2) };
        check("cuEventCreate", r, || "creating an event".into())?;
        Ok(e)
    }

    /// `cuEventDestroy`
    pub fn event_destroy(e: sys::CUevent) -> DriverResult<()> {
        // SAFETY: `e` was created by event_create (checked by the caller).
        let r = unsafe { sys::cuEventDestroy_v2(e) };
        check("cuEventDestroy", r, || "destroying an event".into())
    }

    /// `cuEventRecord`
    pub fn event_record(e: sys::CUevent, s: sys::CUstream) -> DriverResult<()> {
        // SAFETY: `e` and `s` are live (checked by the caller).
        let r = unsafe { sys::cuEventRecord(e, s) };
        check("cuEventRecord", r, || {
            format!("event {e:?} on stream {s:?}")
        })
    }

    /// `cuEventQuery`: `Ok(false)` for `CUDA_ERROR_NOT_READY`.
    pub fn event_query(e: sys::CUevent) -> DriverResult<bool> {
        // SAFETY: `e` is live (checked by the caller).
        let r = unsafe { sys::cuEventQuery(e) } as i32;
        if r == CudaCode::NOT_READY.0 {
            return Ok(false);
        }
        check_code("cuEventQuery", r, || "querying an event".into()).map(|()| true)
    }

    /// `cuEventSynchronize`
    pub fn event_synchronize(e: sys::CUevent) -> DriverResult<()> {
        // SAFETY: `e` is live (checked by the caller).
        let r = unsafe { sys::cuEventSynchronize(e) };
        check("cuEventSynchronize", r, || "synchronizing an event".into())
    }
}
