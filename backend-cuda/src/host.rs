//! Host memory the driver object knows, so that host loads and stores (`host_read`,
//! `host_write`) only ever touch memory that is really there: pinned and pageable allocations
//! made through this driver, registered ranges, and managed allocations.

use std::alloc::Layout;
use std::collections::BTreeMap;

use emm_core::units::Bytes;
use emm_core::{CudaCode, DriverError, DriverResult};

/// Alignment of pageable allocations: a page, like `malloc` of large sizes.
const PAGE: usize = 4096;

/// Address ranges (base → size) by kind.
#[derive(Debug, Default)]
pub(crate) struct HostRegions {
    pub(crate) pinned: BTreeMap<u64, usize>,
    pub(crate) pageable: BTreeMap<u64, usize>,
    pub(crate) registered: BTreeMap<u64, usize>,
    pub(crate) managed: BTreeMap<u64, usize>,
}

fn within(map: &BTreeMap<u64, usize>, addr: u64, len: usize) -> bool {
    map.range(..=addr).next_back().is_some_and(|(b, s)| {
        addr.checked_add(len as u64)
            .is_some_and(|end| end <= b + *s as u64)
    })
}

impl HostRegions {
    /// Whether `addr..addr+len` lies inside one known host-accessible range.
    pub(crate) fn accessible(&self, addr: u64, len: usize) -> bool {
        [
            &self.pinned,
            &self.pageable,
            &self.registered,
            &self.managed,
        ]
        .into_iter()
        .any(|m| within(m, addr, len))
    }

    fn check(&self, call: &'static str, addr: u64, len: usize) -> DriverResult<()> {
        if self.accessible(addr, len) {
            Ok(())
        } else {
            Err(DriverError::new(
                call,
                CudaCode::INVALID_VALUE,
                format!("{len} bytes at {addr:#x} are not inside host memory this driver allocated, registered or manages"),
            ))
        }
    }

    /// Copies host memory at `src` into `dst`.
    pub(crate) fn read(&self, src: u64, dst: &mut [u8]) -> DriverResult<()> {
        self.check("host load", src, dst.len())?;
        // SAFETY: `src..src+len` lies inside a live allocation or registration (checked above),
        // and `dst` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into host memory at `dst`.
    pub(crate) fn write(&self, dst: u64, src: &[u8]) -> DriverResult<()> {
        self.check("host store", dst, src.len())?;
        // SAFETY: `dst..dst+len` lies inside a live allocation or registration (checked above),
        // and `src` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    /// Allocates zeroed pageable memory.
    pub(crate) fn pageable_alloc(&mut self, size: usize) -> DriverResult<u64> {
        let layout = Layout::from_size_align(size, PAGE)
            .ok()
            .filter(|_| size > 0)
            .ok_or_else(|| {
                DriverError::new(
                    "malloc",
                    CudaCode::INVALID_VALUE,
                    format!("cannot allocate {} of pageable memory", Bytes(size as u64)),
                )
            })?;
        // SAFETY: the layout has a non-zero size (checked above).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(DriverError::new(
                "malloc",
                CudaCode::OUT_OF_MEMORY,
                format!("the host has no {} to spare", Bytes(size as u64)),
            ));
        }
        self.pageable.insert(p as u64, size);
        Ok(p as u64)
    }

    /// Frees pageable memory from [`HostRegions::pageable_alloc`].
    pub(crate) fn pageable_free(&mut self, addr: u64) -> DriverResult<()> {
        let size = *self.pageable.get(&addr).ok_or_else(|| {
            DriverError::new(
                "free",
                CudaCode::INVALID_VALUE,
                format!(
                    "{addr:#x} is not pageable memory from pageable_alloc (or was freed already)"
                ),
            )
        })?;
        if let Some((&reg, _)) = self.registered.range(addr..addr + size as u64).next() {
            return Err(DriverError::new(
                "free",
                CudaCode::INVALID_VALUE,
                format!(
                    "{addr:#x} still has a registration at {reg:#x}; call host_unregister first"
                ),
            ));
        }
        self.pageable.remove(&addr);
        let layout = Layout::from_size_align(size, PAGE)
            .map_err(|e| DriverError::new("free", CudaCode::INVALID_VALUE, e.to_string()))?;
        // SAFETY: `addr` was returned by alloc_zeroed with this exact layout and is freed once
        // (it was just removed from the map).
        unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
        Ok(())
    }
}

impl Drop for HostRegions {
    fn drop(&mut self) {
        for (&addr, &size) in &self.pageable {
            if let Ok(layout) = Layout::from_size_align(size, PAGE) {
                // SAFETY: allocated by pageable_alloc with this layout, still live.
                unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
            }
        }
    }
}
