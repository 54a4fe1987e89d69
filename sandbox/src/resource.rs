//! [`PluginResource`]: a sandboxed allocation policy as a device memory resource.
//!
//! - **What it does**: asks the guest for an answer `(chunk, offset)` to each request, checks
//!   it (a chunk the guest holds, aligned, inside the chunk, overlapping no live allocation)
//!   and only then hands out `chunk base + offset`. Chunks come from the upstream resource
//!   through the guest's `upstream_alloc`; the host owns them and records every live
//!   allocation, so a free is checked before the guest hears of it.
//! - **Quarantine**: a guest that breaks a rule, traps, runs out of fuel, passes its deadline
//!   or its memory cap is dropped. Every allocation already handed out stays valid; its chunk
//!   goes back upstream once the last one in it is freed. Later requests start a fresh
//!   instance (as many times as [`PluginLimits::max_restarts`] allows), then go to the
//!   fallback resource if one is set, else fail with the breach in the message.
//! - **Thread safety**: `Send + Sync`; one store behind one lock. Measured against an instance
//!   per thread, the lock costs less than the chunk registry such instances would have to
//!   share, and a policy sees every allocation, as a pool must.
//! - **Streams**: each request's stream is passed to the guest, which may keep per-stream free
//!   lists. The host does not order reuse across streams itself: a guest that hands memory
//!   freed on stream A to stream B must first call `emm::stream_order(A, B)` (ABI v1.1), and
//!   a guest that imports it says so ([`PluginResource::orders_streams`]); its manager then
//!   offers the stream-ordered extension, and `emm check` holds it to the rule. A guest that
//!   does not import it cannot order streams, so use its resource on one stream; its manager
//!   does (the legacy default stream).
//! - **Clone and ownership**: not `Clone`; share it in an `Arc`. Owns the instance, the
//!   chunks and a handle to the upstream; dropping it returns every chunk.
//! - **Use and cost**: a guest call plus O(1) checks under a lock: per allocation two bitmap
//!   queries, a hash probe and a hash insert; per free a hash removal. `cargo bench -p emm-sandbox
//!   --bench workloads` gives ns per op.

use std::sync::{Arc, Mutex, MutexGuard};

use emm_core::attribution::CallerScope;
use emm_core::mr::{
    assert_resource, check_alignment, DeviceMemoryResource, MrError, MrResult, MIN_ALIGNMENT,
};
use emm_core::{DevicePtr, Driver, MemInfo, StreamId};

use crate::abi::{self, Answer, MAX_CHUNK_BYTES};
use crate::error::SandboxError;
use crate::fault::{Breach, PluginFault, Rule};
use crate::host::{LogLine, LOG_LINES, PLUGIN_CALLER};
use crate::instance::PluginInstance;
use crate::limits::PluginLimits;
use crate::module::PluginModule;
use crate::registry::{Chunk, Registry, FALLBACK};

/// The resource's name in messages.
const NAME: &str = "PluginResource";

/// Where the instance is.
pub(crate) enum Slot {
    /// Not started yet (the first request or `start` starts it).
    Idle,
    /// Running.
    Running(Box<PluginInstance>),
    /// Quarantined: no instance; the registry lives in `Inner::registry`.
    Down,
}

pub(crate) struct Inner {
    pub slot: Slot,
    // The registry when no instance holds it (idle or quarantined).
    pub registry: Registry,
    pub breaches: Vec<Breach>,
    pub restarts: u32,
    pub logs: Vec<LogLine>,
    // `defer_cleanup` scopes open now: an instance started inside them (the first, or one
    // after a quarantine) is told of each, so that it too keeps its chunks until they end.
    pub defer_depth: u32,
}

impl Inner {
    pub fn registry(&mut self) -> &mut Registry {
        match &mut self.slot {
            Slot::Running(i) => &mut i.store.data_mut().registry,
            Slot::Idle | Slot::Down => &mut self.registry,
        }
    }
}

/// A sandboxed wasm allocation policy over an upstream resource. See the module docs.
pub struct PluginResource {
    module: Arc<PluginModule>,
    upstream: Arc<dyn DeviceMemoryResource>,
    fallback: Option<Arc<dyn DeviceMemoryResource>>,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for PluginResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(NAME)
            .field("plugin", &self.module.name())
            .field("upstream", &self.upstream.name())
            .finish_non_exhaustive()
    }
}

impl PluginResource {
    /// A resource running `module`, whose chunks come from `upstream`. The instance starts
    /// with the first request (or [`PluginResource::start`]).
    pub fn new(module: Arc<PluginModule>, upstream: Arc<dyn DeviceMemoryResource>) -> Self {
        PluginResource {
            module,
            upstream,
            fallback: None,
            inner: Mutex::new(Inner {
                slot: Slot::Idle,
                registry: Registry::default(),
                breaches: Vec::new(),
                restarts: 0,
                logs: Vec::new(),
                defer_depth: 0,
            }),
        }
    }

    /// Serves requests from `fallback` once the plugin is quarantined for good.
    pub fn with_fallback(mut self, fallback: Arc<dyn DeviceMemoryResource>) -> Self {
        self.fallback = Some(fallback);
        self
    }

    /// The plugin's name.
    pub fn plugin(&self) -> &str {
        self.module.name()
    }

    /// The limits the plugin runs under.
    pub fn limits(&self) -> &PluginLimits {
        self.module.limits()
    }

    /// Whether the plugin orders its reuse across streams (it imports `emm::stream_order`):
    /// see [`PluginModule::orders_streams`].
    pub fn orders_streams(&self) -> bool {
        self.module.orders_streams()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing inside can be left half-changed by a panic that matters more than serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the instance now (ABI check, `emm_init`), so that a bad plugin fails here
    /// rather than on the first allocation. Does nothing when it runs or is quarantined.
    ///
    /// # Errors
    ///
    /// What [`PluginModule`] instantiation reports; the plugin is then quarantined.
    pub fn start(&self) -> Result<(), SandboxError> {
        let mut inner = self.lock();
        if matches!(inner.slot, Slot::Idle) {
            self.launch(&mut inner)?;
        }
        Ok(())
    }

    /// Starts an instance with the registry; on failure records the breach and stays down.
    #[cold]
    fn launch(&self, inner: &mut Inner) -> Result<(), SandboxError> {
        let registry = std::mem::take(&mut inner.registry);
        match self
            .module
            .instantiate(registry, Arc::clone(&self.upstream))
        {
            Ok(mut instance) => {
                for _ in 0..inner.defer_depth {
                    if let Err(fault) = instance.defer_enter() {
                        inner.slot = Slot::Running(Box::new(instance));
                        let breach = self.quarantine(inner, fault, "emm_defer_enter()".into());
                        return Err(SandboxError::Quarantined(breach));
                    }
                }
                inner.slot = Slot::Running(Box::new(instance));
                Ok(())
            }
            Err(failed) => {
                let (e, registry) = *failed;
                inner.registry = registry;
                inner.slot = Slot::Down;
                let breach = match &e {
                    SandboxError::Quarantined(b) => b.clone(),
                    other => Breach {
                        plugin: self.plugin().to_string(),
                        fault: PluginFault::Trap(other.to_string()),
                        call: "start-up".to_string(),
                    },
                };
                self.settle(inner, breach);
                Err(e)
            }
        }
    }

    /// Quarantines the running instance for `fault` in `call`.
    #[cold]
    #[inline(never)]
    pub(crate) fn quarantine(&self, inner: &mut Inner, fault: PluginFault, call: String) -> Breach {
        if let Slot::Running(mut instance) = std::mem::replace(&mut inner.slot, Slot::Down) {
            inner.registry = instance.take_registry();
            inner.logs.extend(instance.store.data_mut().logs.drain(..));
            let excess = inner.logs.len().saturating_sub(LOG_LINES);
            inner.logs.drain(..excess);
        }
        let breach = Breach {
            plugin: self.plugin().to_string(),
            fault,
            call,
        };
        self.settle(inner, breach.clone());
        breach
    }

    /// Records a breach, orphans the instance's chunks and returns the empty ones upstream.
    fn settle(&self, inner: &mut Inner, breach: Breach) {
        inner.registry.orphan_all();
        let empty = inner.registry.take_empty_orphans();
        self.give_back(&empty);
        inner.breaches.push(breach);
    }

    pub(crate) fn give_back(&self, chunks: &[Chunk]) {
        let _scope = CallerScope::enter(PLUGIN_CALLER);
        for c in chunks {
            let bytes = usize::try_from(c.size).unwrap_or(usize::MAX);
            // A chunk the upstream refuses was not ours to keep either; nothing else to do.
            let _ = self.upstream.deallocate(c.base, bytes, StreamId::DEFAULT);
        }
    }

    /// The error for a request refused because the plugin is down.
    fn down_error(&self, inner: &Inner) -> MrError {
        let reason = match inner.breaches.last() {
            Some(b) => format!(
                "{b}. Requests fail until it is reloaded; set PluginLimits::max_restarts to \
                 restart it, or give PluginResource::with_fallback a resource"
            ),
            None => format!("plugin {} is not running", self.plugin()),
        };
        MrError::InvalidArgument {
            resource: NAME,
            reason,
        }
    }

    /// `bytes` aligned to `align` from the guest (starting or restarting it as allowed), or
    /// from the fallback when it is down.
    #[inline]
    fn alloc(&self, bytes: usize, align: u64, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let size = bytes as u64;
        if size > MAX_CHUNK_BYTES {
            return Err(MrError::OutOfMemory {
                resource: NAME,
                requested: size,
                available: None,
            });
        }
        let mut inner = self.lock();
        loop {
            // Fast path: one guest call, one check, one insert.
            if let Slot::Running(instance) = &mut inner.slot {
                let raw = instance.alloc(size as i64, align as i64, stream.0 as i64);
                if let Ok(raw) = raw {
                    if let Ok(a) = Answer::decode(raw) {
                        let reg = &mut instance.store.data_mut().registry;
                        if let Ok(ptr) = reg.accept(a, size, align) {
                            return Ok(ptr);
                        }
                    }
                }
                return self.alloc_slow(&mut inner, raw, size, align, stream);
            }
            if let Some(ptr) = self.alloc_down(&mut inner, size, align, stream)? {
                return Ok(ptr);
            }
        }
    }

    /// Everything but an accepted answer: statuses, breaches.
    #[cold]
    #[inline(never)]
    fn alloc_slow(
        &self,
        inner: &mut Inner,
        raw: Result<i64, PluginFault>,
        size: u64,
        align: u64,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        let call = || format!("emm_alloc(size={size}, align={align}, stream={})", stream.0);
        let fault = match raw.map(Answer::decode) {
            Err(fault) => fault,
            Ok(Ok(a)) => match inner.registry().check_answer(a, size, align) {
                Err((rule, detail)) => PluginFault::BadAnswer { rule, detail },
                Ok(_) => crate::fault::host_bug!(),
            },
            Ok(Err(status)) if status == i64::from(abi::STATUS_OUT_OF_MEMORY) => {
                // The upstream failed for another reason than memory (a driver error): that is
                // the cause the caller must see, not out of memory.
                if let Slot::Running(instance) = &mut inner.slot {
                    if let Some(e) = instance.store.data_mut().upstream_error.take() {
                        return Err(e);
                    }
                }
                return Err(MrError::OutOfMemory {
                    resource: NAME,
                    requested: size,
                    available: self.upstream.memory_info().map(|m| m.free),
                });
            }
            Ok(Err(status)) if status == i64::from(abi::STATUS_UNSUPPORTED) => {
                return Err(MrError::UnsupportedAlignment {
                    resource: NAME,
                    requested: size,
                    alignment: usize::try_from(align).unwrap_or(usize::MAX),
                    max: MIN_ALIGNMENT,
                })
            }
            Ok(Err(status)) => PluginFault::BadAnswer {
                rule: Rule::BadStatus,
                detail: format!("emm_alloc returned {status} ({})", abi::status_name(status)),
            },
        };
        let breach = self.quarantine(inner, fault, call());
        Err(MrError::InvalidArgument {
            resource: NAME,
            reason: breach.to_string(),
        })
    }

    /// A request while the plugin is idle or down: start or restart it (`None`: it runs now,
    /// ask it), else serve from the fallback, else refuse.
    #[cold]
    #[inline(never)]
    fn alloc_down(
        &self,
        inner: &mut Inner,
        size: u64,
        align: u64,
        stream: StreamId,
    ) -> MrResult<Option<DevicePtr>> {
        let restart = matches!(inner.slot, Slot::Down)
            && inner.restarts < self.module.limits().get_max_restarts();
        if matches!(inner.slot, Slot::Idle) || restart {
            if restart {
                inner.restarts += 1;
            }
            if self.launch(inner).is_ok() {
                return Ok(None);
            }
        }
        let Some(fallback) = &self.fallback else {
            return Err(self.down_error(inner));
        };
        let bytes = usize::try_from(size).unwrap_or(usize::MAX);
        let align = usize::try_from(align).unwrap_or(usize::MAX);
        let ptr = fallback.allocate_aligned(bytes, align, stream)?;
        inner.registry().insert_live(ptr, size, FALLBACK);
        Ok(Some(ptr))
    }

    /// Returns `ptr` of `bytes`: checked against the live set first (a bad free changes
    /// nothing and never reaches the guest), then told to the guest, the fallback, or — for a
    /// quarantined instance's chunk — counted until the chunk can go back upstream.
    #[inline]
    fn free(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        let size = bytes as u64;
        let mut inner = self.lock();
        let live =
            inner
                .registry()
                .remove_live(ptr, size)
                .map_err(|reason| MrError::InvalidFree {
                    resource: NAME,
                    ptr,
                    bytes: size,
                    reason,
                })?;
        if live.origin == FALLBACK {
            drop(inner);
            return match &self.fallback {
                Some(f) => f.deallocate(ptr, bytes, stream),
                None => Ok(()),
            };
        }
        if let Slot::Running(instance) = &mut inner.slot {
            let reg = &instance.store.data_mut().registry;
            if let Some(chunk) = reg
                .chunk(live.origin)
                .filter(|c| c.generation == reg.generation)
            {
                let offset = ptr.0.wrapping_sub(chunk.base.0);
                let chunk_id = live.origin as i32;
                let status = instance.free(chunk_id, offset as i64, size as i64, stream.0 as i64);
                if status == Ok(abi::STATUS_OK) {
                    return Ok(());
                }
                let call = format!(
                    "emm_free(chunk={chunk_id}, offset={offset:#x}, size={size}, stream={})",
                    stream.0
                );
                let fault = match status {
                    Err(fault) => fault,
                    Ok(s) => PluginFault::BadAnswer {
                        rule: Rule::FreeRefused,
                        detail: format!(
                            "emm_free returned {s} ({}) for an allocation it handed out",
                            abi::status_name(i64::from(s))
                        ),
                    },
                };
                // The caller's free succeeded: the host took the memory back. The breach is
                // reported by the next request and by `breaches()`.
                self.quarantine(&mut inner, fault, call);
                return Ok(());
            }
        }
        // An orphan of a quarantined instance: return its chunk once nothing in it is live.
        let empty = inner.registry().take_empty_orphans();
        self.give_back(&empty);
        Ok(())
    }
}

impl DeviceMemoryResource for PluginResource {
    fn name(&self) -> &'static str {
        NAME
    }

    /// # Time complexity
    ///
    /// The guest's own, plus O(1) for the check.
    #[inline]
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        self.alloc(bytes, MIN_ALIGNMENT as u64, stream)
    }

    /// # Time complexity
    ///
    /// The guest's own, plus O(1).
    #[inline]
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        self.free(ptr, bytes, stream)
    }

    fn allocate_aligned(
        &self,
        bytes: usize,
        alignment: usize,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        check_alignment(NAME, bytes, alignment, usize::MAX)?;
        self.alloc(bytes, alignment.max(MIN_ALIGNMENT) as u64, stream)
    }

    fn memory_info(&self) -> Option<MemInfo> {
        self.upstream.memory_info()
    }

    fn driver(&self) -> &dyn Driver {
        self.upstream.driver()
    }

    /// The bytes of the chunks the host gave the plugin (a quarantined instance's included,
    /// until emptied): the host's count, not the plugin's word.
    fn held(&self) -> Option<u64> {
        Some(self.lock().registry().held_bytes)
    }
}

impl Drop for PluginResource {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        let chunks = inner.registry().take_all();
        self.give_back(&chunks);
    }
}

const _: () = assert_resource::<PluginResource>();
