//! [`Runtime`]: the process-wide state behind the C ABI — the backend, the manager every
//! device's context is made with, one context per device (made on first use), the live
//! allocations of each device, host memory, `DeviceBuffer`s and deferral guards.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use emm_core::contract::selection::ManagerFactory;
use emm_core::contract::{Context, DeferCleanupGuard};
use emm_core::mr::LogHealth;
use emm_core::{ContextId, DeviceId, Driver, StreamId};

use crate::backend::Backend;
use crate::buffers::Buffers;
use crate::chain_factory::ChainFactory;
use crate::ffi::lock;
use crate::host_table::HostEntry;
use crate::live_table::{Ctx, Live, LiveTable};
use crate::selection::{self, Spec};
use crate::status::{CapiError, CapiResult, EmmStatus};

/// The manager in use: what it was called, its factory, and the health of the allocation log
/// of each device whose chain logs.
struct Selected {
    name: String,
    factory: Arc<dyn ManagerFactory>,
    logs: BTreeMap<DeviceId, LogHealth>,
    /// Whether nothing chose it (the C ABI's default): `emm_configure_if_unset` replaces only
    /// such a manager.
    by_default: bool,
}

/// One device: its context (made on first use with the selected manager) and live memory.
#[derive(Default)]
struct DeviceSlot {
    context: RwLock<Option<Arc<Ctx>>>,
    live: Mutex<LiveTable>,
}

/// The process-wide state of the C ABI.
pub(crate) struct Runtime {
    backend: Backend,
    devices: Vec<DeviceSlot>,
    selected: RwLock<Selected>,
    /// Pinned host memory and pins, by the host address the caller holds.
    pub(crate) host: Mutex<BTreeMap<u64, HostEntry>>,
    /// `DeviceBuffer`s by handle.
    pub(crate) buffers: Buffers,
    deferrals: Mutex<BTreeMap<u64, DeferCleanupGuard>>,
    next_token: AtomicU64,
}

/// The factory for `spec` on a machine of `n` devices.
fn select(
    driver: &Arc<dyn Driver>,
    n: usize,
    (spec, by_default): (Spec, bool),
) -> CapiResult<Selected> {
    Ok(match spec {
        Spec::Registry(name) => Selected {
            factory: selection::registry_factory(&name)?,
            name,
            logs: BTreeMap::new(),
            by_default,
        },
        Spec::Chain(options) => {
            let built = emm_core::reinitialize_chains(Arc::clone(driver), &options)?;
            let devices: Vec<DeviceId> = match &options.devices {
                Some(d) => d.clone(),
                None => (0..n as u32).map(DeviceId).collect(),
            };
            let logs = devices
                .iter()
                .zip(&built)
                .filter_map(|(&d, c)| Some((d, c.log.clone()?)))
                .collect();
            let chains = devices
                .into_iter()
                .zip(built)
                .map(|(d, c)| (d, c.resource))
                .collect();
            Selected {
                name: format!("reinitialize({options:?})"),
                factory: Arc::new(ChainFactory::new(chains, options.managed_memory)),
                logs,
                by_default,
            }
        }
    })
}

/// The runtime, made on the first call (the backend from `EMM_BACKEND`, the manager from
/// `EMM_MEMORY_MANAGER` or `pool-vmm-tight`). A failure is kept: every later call reports it.
///
/// # Errors
///
/// No GPU on the cuda backend, a bad configuration.
pub(crate) fn runtime() -> CapiResult<&'static Runtime> {
    static RUNTIME: OnceLock<CapiResult<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(Runtime::new)
        .as_ref()
        .map_err(Clone::clone)
}

impl Runtime {
    fn new() -> CapiResult<Runtime> {
        let backend = Backend::from_env()?;
        let n = backend.driver().device_count()? as usize;
        if n == 0 {
            return Err(CapiError::new(
                EmmStatus::NoDevice,
                "the backend sees no device; set EMM_BACKEND=sim to use the simulated GPU",
            ));
        }
        let selected = select(backend.driver(), n, selection::effective(None))?;
        Ok(Runtime {
            devices: (0..n).map(|_| DeviceSlot::default()).collect(),
            backend,
            selected: RwLock::new(selected),
            host: Mutex::default(),
            buffers: Buffers::default(),
            deferrals: Mutex::default(),
            next_token: AtomicU64::new(1),
        })
    }

    /// The backend.
    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The driver.
    pub(crate) fn driver(&self) -> &Arc<dyn Driver> {
        self.backend.driver()
    }

    /// The number of devices.
    pub(crate) fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// The name of the manager in use.
    pub(crate) fn manager_name(&self) -> String {
        self.selected
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .name
            .clone()
    }

    /// The health of `d`'s allocation log, when the manager in use logs (`emm_reinitialize`'s
    /// `log_file_name`).
    pub(crate) fn log(&self, d: DeviceId) -> Option<LogHealth> {
        self.selected
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .logs
            .get(&d)
            .cloned()
    }

    /// Makes `spec` (`None`: the environment's or the default) the manager of every device.
    /// Contexts are remade on next use; live memory stays valid and goes back to the manager
    /// that made it.
    ///
    /// # Errors
    ///
    /// A spec that does not parse or does not resolve; nothing changes then.
    pub(crate) fn configure(&self, spec: Option<&str>) -> CapiResult<()> {
        self.configure_when(spec, |_| true).map(|_| ())
    }

    /// [`Runtime::configure`] if nothing chose the manager in use (the C ABI's default, neither
    /// the program nor `EMM_MEMORY_MANAGER`); returns whether it did. A spec that does not
    /// parse is refused either way; one that would not apply is not resolved (no plugin
    /// loaded, no warning that the environment overrides it).
    ///
    /// # Errors
    ///
    /// As [`Runtime::configure`].
    pub(crate) fn configure_if_unset(&self, spec: &str) -> CapiResult<bool> {
        self.configure_when(Some(spec), |current| current.by_default)
    }

    /// Selects `spec` and makes it the manager if `replace` says so of the one in use; asked
    /// again under the lock that replaces it, so that two libraries asking at once see one
    /// answer.
    fn configure_when(
        &self,
        spec: Option<&str>,
        replace: impl Fn(&Selected) -> bool,
    ) -> CapiResult<bool> {
        let spec = selection::parse(spec)?;
        if !replace(&self.selected.read().unwrap_or_else(|e| e.into_inner())) {
            return Ok(false);
        }
        let chosen = select(
            self.driver(),
            self.devices.len(),
            selection::effective(spec),
        )?;
        let mut selected = self.selected.write().unwrap_or_else(|e| e.into_inner());
        if !replace(&selected) {
            return Ok(false);
        }
        *selected = chosen;
        for slot in &self.devices {
            *slot.context.write().unwrap_or_else(|e| e.into_inner()) = None;
        }
        Ok(true)
    }

    /// The device of ordinal `device`, checked.
    ///
    /// # Errors
    ///
    /// `NoDevice` for a negative or too large ordinal.
    pub(crate) fn device(&self, device: i32) -> CapiResult<DeviceId> {
        match u32::try_from(device) {
            Ok(d) if (d as usize) < self.devices.len() => Ok(DeviceId(d)),
            _ => Err(CapiError::new(
                EmmStatus::NoDevice,
                format!(
                    "device {device} does not exist; this process sees {} device(s) (0 to {})",
                    self.devices.len(),
                    self.devices.len().saturating_sub(1)
                ),
            )),
        }
    }

    fn slot(&self, d: DeviceId) -> &DeviceSlot {
        // `d` came from `device`, which checked it; fall back to the first slot rather than
        // panic if a caller inside the crate ever passes an unchecked one.
        self.devices
            .get(d.0 as usize)
            .unwrap_or_else(|| &self.devices[0])
    }

    /// The context of `d`, made with the selected manager on first use.
    ///
    /// # Errors
    ///
    /// The driver or the manager factory failed.
    pub(crate) fn context(&self, d: DeviceId) -> CapiResult<Arc<Ctx>> {
        let slot = self.slot(d);
        if let Some(c) = &*slot.context.read().unwrap_or_else(|e| e.into_inner()) {
            return Ok(Arc::clone(c));
        }
        let mut w = slot.context.write().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = &*w {
            return Ok(Arc::clone(c));
        }
        let factory = Arc::clone(
            &self
                .selected
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .factory,
        );
        let driver = Arc::new(Arc::clone(self.driver()));
        let c = Arc::new(Context::with_factory(driver, d, &*factory)?);
        *w = Some(Arc::clone(&c));
        Ok(c)
    }

    /// The contexts made so far, by device.
    pub(crate) fn contexts(&self) -> Vec<(DeviceId, Arc<Ctx>)> {
        self.devices
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let c = s.context.read().unwrap_or_else(|e| e.into_inner());
                c.as_ref().map(|c| (DeviceId(i as u32), Arc::clone(c)))
            })
            .collect()
    }

    /// The live table of `d`.
    pub(crate) fn live(&self, d: DeviceId) -> MutexGuard<'_, LiveTable> {
        lock(&self.slot(d).live)
    }

    /// The caller's raw stream as a driver stream of `d`.
    ///
    /// # Errors
    ///
    /// Not a live stream of `d`.
    pub(crate) fn stream(&self, raw: *mut c_void, d: DeviceId) -> CapiResult<StreamId> {
        self.backend.stream(raw, d)
    }

    /// `size` bytes on `d`: stream-ordered on `stream` when the manager offers it and a stream
    /// other than the legacy default is given, else usable on every stream (the v1 `memalloc`).
    ///
    /// # Errors
    ///
    /// Size 0, out of memory, the manager's errors.
    pub(crate) fn alloc(&self, d: DeviceId, size: usize, stream: StreamId) -> CapiResult<u64> {
        if size == 0 {
            return Err(CapiError::invalid(
                "emm_alloc",
                "size 0: ask for at least one byte (a zero-size request has no address)",
            ));
        }
        let context = self.context(d)?;
        let ordered = stream != StreamId::DEFAULT && context.capabilities().stream_ordered;
        let memory = if ordered {
            context.memalloc_async(size, stream)?
        } else {
            context.memalloc(size)?
        };
        let addr = memory.device_ptr().0;
        self.live(d).insert(
            addr,
            Live::Device {
                memory,
                ordered,
                context,
            },
        );
        Ok(addr)
    }

    /// Finds which device's table holds `addr` (trying `hint` first).
    pub(crate) fn device_of(&self, addr: u64, hint: Option<DeviceId>) -> Option<DeviceId> {
        let hinted = hint.filter(|d| (d.0 as usize) < self.devices.len());
        hinted
            .into_iter()
            .chain((0..self.devices.len() as u32).map(DeviceId))
            .find(|&d| self.live(d).starts_at(addr))
    }

    /// Frees the allocation at `addr`: on `stream` when it was stream-ordered and a stream is
    /// given, else as its finalizer does (on its own stream, or at once). Pinned host memory
    /// and pins are released too.
    ///
    /// # Errors
    ///
    /// `UnknownPointer` for an address that is not a live allocation (with the enclosing one
    /// named when it is inside one); the manager's errors (the memory is then released by its
    /// finalizer: nothing is lost).
    pub(crate) fn free(
        &self,
        function: &str,
        addr: u64,
        stream: Option<StreamId>,
        hint: Option<DeviceId>,
    ) -> CapiResult<()> {
        if addr == 0 {
            return Err(CapiError::null(function, "ptr"));
        }
        let Some((_, live)) = self.take(addr, hint) else {
            if lock(&self.host).remove(&addr).is_some() {
                return Ok(());
            }
            return Err(self.unknown(function, addr));
        };
        Self::release(live, stream)
    }

    /// Takes the allocation at `addr` out of its device's table (trying `hint` first): its
    /// device and entry, or `None` when no device's table holds it.
    ///
    /// # Time complexity
    ///
    /// O(1) expected with the right hint, else O(devices).
    pub(crate) fn take(&self, addr: u64, hint: Option<DeviceId>) -> Option<(DeviceId, Live)> {
        let hinted = hint.filter(|d| (d.0 as usize) < self.devices.len());
        hinted
            .into_iter()
            .chain((0..self.devices.len() as u32).map(DeviceId))
            .find_map(|d| self.live(d).remove(addr).map(|live| (d, live)))
    }

    /// Frees `live`, taken from its table: on `stream` when it was stream-ordered and a stream
    /// is given, else as its finalizer does (on its own stream, or at once).
    ///
    /// # Errors
    ///
    /// The manager's (the memory is then released by its finalizer: nothing is lost).
    pub(crate) fn release(live: Live, stream: Option<StreamId>) -> CapiResult<()> {
        match (live, stream) {
            (
                Live::Device {
                    memory,
                    ordered: true,
                    context,
                },
                Some(s),
            ) if s != StreamId::DEFAULT => Ok(context.memfree_async(memory, s)?),
            // Dropping the last owner runs the finalizer.
            (other, _) => {
                drop(other);
                Ok(())
            }
        }
    }

    /// Frees the allocation at `addr` for a hook that cannot report a failure (PyTorch's and
    /// CuPy's frees): the pointer decides the device, `device` is only a hint (another
    /// device's ordinal, or one this process does not see, must not leak it). A stream-ordered
    /// allocation is freed on `stream` when it resolves on that device, else on its own.
    /// A failure (an unknown pointer) is returned and written to stderr.
    ///
    /// # Errors
    ///
    /// `UnknownPointer`; the manager's (the memory is then released by its finalizer).
    pub(crate) fn free_from_hook(
        &self,
        function: &str,
        addr: u64,
        device: i32,
        stream: Option<*mut c_void>,
    ) -> CapiResult<()> {
        let freed = match self.take(addr, self.device(device).ok()) {
            Some((d, live)) => Self::release(live, stream.and_then(|s| self.stream(s, d).ok())),
            None => Err(self.unknown(function, addr)),
        };
        freed.inspect_err(|e| eprintln!("emm: {e}"))
    }

    /// The error for an address that is no live allocation.
    pub(crate) fn unknown(&self, function: &str, addr: u64) -> CapiError {
        let inside = (0..self.devices.len() as u32).find_map(|d| {
            self.live(DeviceId(d))
                .containing(addr)
                .map(|(b, l)| (b, l.size()))
        });
        let hint = match inside {
            Some((base, size)) => format!(
                "; it lies inside the allocation at {base:#x} ({size} bytes): free that address"
            ),
            None => String::new(),
        };
        CapiError::new(
            EmmStatus::UnknownPointer,
            format!(
                "{function}: {addr:#x} is not a live emm allocation (never allocated by emm, or \
                 already freed); nothing was freed{hint}"
            ),
        )
    }

    /// Holds a deferral of `d`'s cleanup until [`Runtime::end_deferral`]; returns its token.
    ///
    /// # Errors
    ///
    /// The context could not be made.
    pub(crate) fn begin_deferral(&self, d: DeviceId) -> CapiResult<u64> {
        let guard = self.context(d)?.defer_cleanup();
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        lock(&self.deferrals).insert(token, guard);
        Ok(token)
    }

    /// Ends the deferral `token`.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a token that is not held (ended already, or never given).
    pub(crate) fn end_deferral(&self, token: u64) -> CapiResult<()> {
        let guard = lock(&self.deferrals).remove(&token).ok_or_else(|| {
            CapiError::invalid(
                "emm_defer_cleanup_end",
                format!("token {token} is not a held deferral (ended already, or never given)"),
            )
        })?;
        drop(guard);
        Ok(())
    }

    /// Runs `f` with `d`'s primary context current on this thread, restoring the caller's.
    ///
    /// # Errors
    ///
    /// The driver's, or `f`'s.
    pub(crate) fn in_context<T>(
        &self,
        d: DeviceId,
        f: impl FnOnce() -> CapiResult<T>,
    ) -> CapiResult<T> {
        let driver = self.driver();
        let target = driver.primary_context(d)?;
        let before: ContextId = driver.current_context()?;
        if before == target {
            return f();
        }
        driver.set_current_context(target)?;
        let r = f();
        // Best effort: the target context being current is still valid for the caller.
        let _ = driver.set_current_context(before);
        r
    }
}
