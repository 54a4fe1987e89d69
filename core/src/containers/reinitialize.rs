//! [`reinitialize`]: one call that (re)builds the current resource of every device from
//! options, as RMM's `rmm.reinitialize`.

use std::path::PathBuf;
use std::sync::Arc;

use crate::containers::current::set_current_device_resource;
use crate::driver::{DeviceId, Driver};
use crate::mr::{
    CudaResource, DeviceMemoryResource, LogHealth, LoggingAdaptor, ManagedResource, MrError,
    MrResult, PoolOptions, PoolResource, StatisticsAdaptor,
};

/// What [`reinitialize`] builds for each device, innermost first: driver memory (device or
/// managed), an optional pool, an optional log, optional statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReinitializeOptions {
    /// Put a [`PoolResource`] in front of the driver.
    pub pool_allocator: bool,
    /// The pool's initial size in bytes (taken at once); `None` starts empty.
    pub initial_pool_size: Option<u64>,
    /// The most the pool may hold; `None` is no limit.
    pub maximum_pool_size: Option<u64>,
    /// Allocate managed memory (`cuMemAllocManaged`) instead of device memory.
    pub managed_memory: bool,
    /// Log every allocation and free in RMM's CSV format to this file, flushed line by line;
    /// with several devices, device N logs to the name with `.devN` before the extension.
    pub log_file_name: Option<PathBuf>,
    /// Count bytes and allocations ([`StatisticsAdaptor`]).
    pub statistics: bool,
    /// The devices to set up; `None` is every device.
    pub devices: Option<Vec<DeviceId>>,
}

/// The log file of `device` when `devices` are set up.
fn log_path(base: &std::path::Path, device: DeviceId, devices: usize) -> PathBuf {
    if devices <= 1 {
        return base.to_path_buf();
    }
    let stem = base
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match base.extension() {
        Some(ext) => format!("{stem}.dev{}.{}", device.0, ext.to_string_lossy()),
        None => format!("{stem}.dev{}", device.0),
    };
    base.with_file_name(name)
}

/// One device's chain from [`reinitialize_chains`].
#[derive(Clone)]
pub struct ReinitializedChain {
    /// The chain, outermost resource first: the device's current resource.
    pub resource: Arc<dyn DeviceMemoryResource>,
    /// What became of its log's lines, when it logs ([`ReinitializeOptions::log_file_name`]).
    pub log: Option<LogHealth>,
}

fn build(
    driver: &Arc<dyn Driver>,
    device: DeviceId,
    devices: usize,
    o: &ReinitializeOptions,
) -> MrResult<ReinitializedChain> {
    let mut r: Arc<dyn DeviceMemoryResource> = if o.managed_memory {
        Arc::new(ManagedResource::<Arc<dyn Driver>>::new(Arc::clone(driver)))
    } else {
        Arc::new(CudaResource::<Arc<dyn Driver>>::new(Arc::clone(driver)))
    };
    if o.pool_allocator {
        let mut opts = PoolOptions::default();
        if let Some(n) = o.initial_pool_size {
            opts = opts.initial_size(n);
        }
        if let Some(n) = o.maximum_pool_size {
            opts = opts.maximum_size(n);
        }
        r = Arc::new(PoolResource::with_options(r, opts)?);
    } else if o.initial_pool_size.is_some() || o.maximum_pool_size.is_some() {
        return Err(MrError::InvalidArgument {
            resource: "reinitialize",
            reason: "a pool size was given without pool_allocator: set pool_allocator = true"
                .into(),
        });
    }
    let mut health = None;
    if let Some(base) = &o.log_file_name {
        let path = log_path(base, device, devices);
        let log = LoggingAdaptor::to_file(r, &path).map_err(|e| MrError::InvalidArgument {
            resource: "reinitialize",
            reason: format!("cannot create the log file {}: {e}", path.display()),
        })?;
        // Flushed line by line: the log is most wanted when the program dies.
        health = Some(log.health());
        r = Arc::new(log.with_auto_flush(true));
    }
    if o.statistics {
        r = Arc::new(StatisticsAdaptor::new(r));
    }
    Ok(ReinitializedChain {
        resource: r,
        log: health,
    })
}

/// Builds a fresh resource chain for each device from `options` and makes it that device's
/// current resource (see [`crate::containers::current_device_resource`]); returns them in
/// device order. Each is built with its device's primary context current; the caller's
/// context is restored after.
///
/// Buffers made from the previous resources keep them alive until they are dropped.
///
/// # Errors
///
/// A device that does not exist, an empty list of devices, a pool size without a pool, a log
/// file that cannot be created, an initial pool size the device cannot give; on error no
/// device's resource has changed.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use emm_core::containers::{reinitialize, DeviceBuffer, ReinitializeOptions};
/// use emm_core::{Driver, StreamId};
/// # use emm_sim::{SimConfig, SimDriver};
/// # let gpu: Arc<dyn Driver> = Arc::new(SimDriver::new(SimConfig::new(1)).unwrap());
/// reinitialize(gpu, &ReinitializeOptions { pool_allocator: true, ..Default::default() }).unwrap();
/// let buf = DeviceBuffer::from_host(b"pooled", StreamId::DEFAULT).unwrap();
/// assert_eq!(buf.resource().name(), "PoolResource");
/// ```
pub fn reinitialize(
    driver: Arc<dyn Driver>,
    options: &ReinitializeOptions,
) -> MrResult<Vec<Arc<dyn DeviceMemoryResource>>> {
    Ok(reinitialize_chains(driver, options)?
        .into_iter()
        .map(|c| c.resource)
        .collect())
}

/// [`reinitialize`], giving each chain with a handle on its log's health, for an owner that
/// reports lost log lines (the C ABI's statistics).
///
/// # Errors
///
/// As [`reinitialize`]; an empty list of devices.
pub fn reinitialize_chains(
    driver: Arc<dyn Driver>,
    options: &ReinitializeOptions,
) -> MrResult<Vec<ReinitializedChain>> {
    let devices: Vec<DeviceId> = match &options.devices {
        Some(d) if d.is_empty() => {
            return Err(MrError::InvalidArgument {
                resource: "reinitialize",
                reason: "devices is empty, so no device would have a resource: name the \
                         devices to set up, or leave devices out for every device"
                    .into(),
            })
        }
        Some(d) => {
            let mut seen = std::collections::BTreeSet::new();
            if let Some(twice) = d.iter().find(|x| !seen.insert(x.0)) {
                return Err(MrError::InvalidArgument {
                    resource: "reinitialize",
                    reason: format!(
                        "device {} is listed twice in devices; name each device once",
                        twice.0
                    ),
                });
            }
            d.clone()
        }
        None => (0..driver.device_count()?).map(DeviceId).collect(),
    };
    let before = driver.current_context()?;
    let mut built = Vec::with_capacity(devices.len());
    let result = (|| {
        for &d in &devices {
            driver.set_current_context(driver.primary_context(d)?)?;
            built.push(build(&driver, d, devices.len(), options)?);
        }
        Ok::<(), MrError>(())
    })();
    driver.set_current_context(before)?;
    result?;
    for (&d, c) in devices.iter().zip(&built) {
        set_current_device_resource(d, Arc::clone(&c.resource));
    }
    Ok(built)
}
