//! [`PluginModule`]: a plugin compiled and checked against ABI v1 — size, imports, exports and
//! their types — ready to be instantiated any number of times (one instance per context, and
//! again after a quarantine).

use std::path::Path;
use std::sync::Arc;

use emm_core::mr::DeviceMemoryResource;
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, InstancePre, Module, PoolingAllocationConfig,
    Store, TypedFunc,
};

use crate::abi;
use crate::budget::{self, OverBudget};
use crate::error::SandboxError;
use crate::exports::{check_exports, check_imports};
use crate::fault::{Breach, PluginFault};
use crate::gate::ContentHash;
use crate::host::{linker, HostState};
use crate::instance::{Exports, PluginInstance};
use crate::limits::PluginLimits;
use crate::read::{read_capped, ReadRefusal};
use crate::registry::Registry;
use crate::ticker::Ticker;

/// A compiled, checked plugin. Cheap to share (`Arc`); each `PluginModule::instantiate`
/// gives an independent instance.
pub struct PluginModule {
    name: String,
    engine: Engine,
    pre: InstancePre<HostState>,
    limits: PluginLimits,
    config: Vec<u8>,
    // The sha256 of the bytes it was compiled from (none when loaded precompiled).
    content_hash: Option<ContentHash>,
    // Whether it imports `emm::stream_order`.
    orders_streams: bool,
    // Advances the engine's epoch while the module lives (only with a deadline).
    _ticker: Option<Ticker>,
}

impl std::fmt::Debug for PluginModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginModule")
            .field("name", &self.name)
            .field("limits", &self.limits)
            .field("config_bytes", &self.config.len())
            .field("content_hash", &self.content_hash)
            .finish_non_exhaustive()
    }
}

impl PluginModule {
    /// Loads the `.wasm` file at `path`; the plugin is named after the file's stem. The file
    /// is opened without blocking and read only if it is a regular file, up to
    /// [`PluginLimits::max_module_bytes`]; it must be a wasm binary (WAT text is loaded only
    /// through [`PluginModule::from_wat`]).
    ///
    /// # Errors
    ///
    /// [`SandboxError::Io`] (missing, unreadable, a FIFO or a device), then as
    /// [`PluginModule::from_bytes`].
    pub fn from_file(
        path: &Path,
        limits: PluginLimits,
        config: Vec<u8>,
    ) -> Result<PluginModule, SandboxError> {
        let name = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        let limit = limits.get_max_module_bytes();
        // Refuse a huge file, a FIFO or a device before reading it; never read past the cap.
        let bytes = match read_capped(path, limit as u64, true) {
            Ok(bytes) => bytes,
            Err(ReadRefusal::TooLarge(len)) => {
                return Err(SandboxError::ModuleTooLarge {
                    plugin: name,
                    bytes: usize::try_from(len).unwrap_or(usize::MAX),
                    limit,
                })
            }
            Err(e) => {
                return Err(SandboxError::Io {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })
            }
        };
        PluginModule::from_bytes(&name, &bytes, limits, config)
    }

    /// Compiles the WAT text `text` as plugin `name`: the one way to load text (tests,
    /// fixtures, benchmarks); files and [`PluginModule::from_bytes`] take wasm binaries only.
    /// The content hash is the hash of the binary the text becomes.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Compile`] when the text does not parse, then as
    /// [`PluginModule::from_bytes`].
    pub fn from_wat(
        name: &str,
        text: &str,
        limits: PluginLimits,
        config: Vec<u8>,
    ) -> Result<PluginModule, SandboxError> {
        let bytes = wat_to_wasm(text).map_err(|reason| SandboxError::Compile {
            plugin: name.to_string(),
            reason,
        })?;
        PluginModule::from_bytes(name, &bytes, limits, config)
    }

    /// Compiles `bytes` (a wasm binary: WAT text is refused, see
    /// [`PluginModule::from_wat`]) as plugin `name`, checks it against ABI v1 and prepares its
    /// instantiation. `config` is the blob `emm_init` receives. Before anything is compiled
    /// the module is checked against the budgets of `limits` (size, functions, code, locals,
    /// a 32-bit memory within the cap); compiling then runs under
    /// [`PluginLimits::compile_deadline`].
    ///
    /// # Errors
    ///
    /// [`SandboxError::ModuleTooLarge`], [`SandboxError::NotWasm`],
    /// [`SandboxError::OverBudget`], [`SandboxError::Compile`] (with the compiler's whole
    /// chain of causes), [`SandboxError::CompileDeadline`], [`SandboxError::UnknownImport`],
    /// [`SandboxError::MissingExport`], [`SandboxError::WrongSignature`],
    /// [`SandboxError::InvalidConfig`].
    pub fn from_bytes(
        name: &str,
        bytes: &[u8],
        limits: PluginLimits,
        config: Vec<u8>,
    ) -> Result<PluginModule, SandboxError> {
        let plugin = name.to_string();
        let limit = limits.get_max_module_bytes();
        if bytes.len() > limit {
            return Err(SandboxError::ModuleTooLarge {
                plugin,
                bytes: bytes.len(),
                limit,
            });
        }
        if !bytes.starts_with(WASM_MAGIC) {
            return Err(SandboxError::NotWasm {
                plugin,
                reason: not_wasm_reason(bytes),
            });
        }
        let invalid = |reason: String| SandboxError::InvalidConfig {
            plugin: name.to_string(),
            reason,
        };
        limits.validate().map_err(invalid)?;
        if config.len() > abi::MAX_CONFIG_BYTES {
            return Err(invalid(format!(
                "the config blob is {} bytes; ABI v1 passes at most {}",
                config.len(),
                abi::MAX_CONFIG_BYTES
            )));
        }
        match budget::check(bytes, &limits) {
            Ok(()) => {}
            Err(OverBudget::Invalid(reason)) => {
                return Err(SandboxError::Compile { plugin, reason })
            }
            Err(OverBudget::Refused(reason)) => {
                return Err(SandboxError::OverBudget { plugin, reason })
            }
        }
        let engine = engine(&limits).map_err(|e| SandboxError::Instantiate {
            plugin: plugin.clone(),
            reason: format!("{e:#}"),
        })?;
        let module = compile(&plugin, &engine, bytes, limits.get_compile_deadline())?;
        // Hashed here, once: the verdict the gate looks up is for exactly these bytes.
        let hash = ContentHash::of(bytes);
        PluginModule::checked(plugin, engine, &module, limits, config, Some(hash))
    }

    fn checked(
        plugin: String,
        engine: Engine,
        module: &Module,
        limits: PluginLimits,
        config: Vec<u8>,
        content_hash: Option<ContentHash>,
    ) -> Result<PluginModule, SandboxError> {
        check_imports(&plugin, module)?;
        check_exports(&plugin, module)?;
        let linker = linker(&engine).map_err(|e| SandboxError::Instantiate {
            plugin: plugin.clone(),
            reason: format!("{e:#}"),
        })?;
        let pre = linker
            .instantiate_pre(module)
            .map_err(|e| SandboxError::Instantiate {
                plugin: plugin.clone(),
                reason: format!("{e:#}"),
            })?;
        let ticker = match limits.get_deadline() {
            Some(_) => Some(
                Ticker::start(engine.weak(), limits.get_epoch_tick()).map_err(|e| {
                    SandboxError::Instantiate {
                        plugin: plugin.clone(),
                        reason: format!("cannot start the epoch thread: {e}"),
                    }
                })?,
            ),
            None => None,
        };
        let orders_streams = module
            .imports()
            .any(|i| i.module() == abi::IMPORT_MODULE && i.name() == abi::IMPORT_STREAM_ORDER);
        Ok(PluginModule {
            name: plugin,
            engine,
            pre,
            limits,
            config,
            content_hash,
            orders_streams,
            _ticker: ticker,
        })
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The limits it runs under.
    pub fn limits(&self) -> &PluginLimits {
        &self.limits
    }

    /// Whether the plugin imports `emm::stream_order` (ABI v1.1): it orders its own reuse of
    /// memory across streams, so its manager offers the stream-ordered extension and the
    /// guest hears each request's stream. A plugin without it is used on one stream only.
    pub fn orders_streams(&self) -> bool {
        self.orders_streams
    }

    /// The config blob `emm_init` receives.
    pub fn config(&self) -> &[u8] {
        &self.config
    }

    /// Its config and limits as a verdict records them: a verdict vouches for the plugin's
    /// bytes only together with these.
    pub fn settings(&self) -> crate::gate::Settings {
        crate::gate::Settings::of(&self.config, &self.limits)
    }

    /// The sha256 of the bytes it was compiled from, under which its verdicts are kept;
    /// `None` for a module loaded with [`PluginModule::from_precompiled`] (the gate refuses
    /// such a module on hardware).
    pub fn content_hash(&self) -> Option<ContentHash> {
        self.content_hash
    }

    /// The module compiled for this host, to be loaded later with
    /// [`PluginModule::from_precompiled`] without compiling again.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Compile`] when wasmtime cannot serialize it.
    pub fn precompiled(&self) -> Result<Vec<u8>, SandboxError> {
        self.pre
            .module()
            .serialize()
            .map_err(|e| SandboxError::Compile {
                plugin: self.name.clone(),
                reason: format!("{e:#}"),
            })
    }

    /// Loads a module from [`PluginModule::precompiled`] bytes.
    ///
    /// # Errors
    ///
    /// As [`PluginModule::from_bytes`]; bytes made by another wasmtime version or with other
    /// limits are refused.
    ///
    /// # Safety
    ///
    /// 1. `bytes` must come from [`PluginModule::precompiled`] of this host build: precompiled
    ///    code is native code and runs unchecked, so only load bytes you made yourself (an
    ///    untrusted plugin is loaded from its `.wasm` with [`PluginModule::from_bytes`]).
    #[expect(unsafe_code, reason = "wasmtime's deserialize trusts its input")]
    pub unsafe fn from_precompiled(
        name: &str,
        bytes: &[u8],
        limits: PluginLimits,
        config: Vec<u8>,
    ) -> Result<PluginModule, SandboxError> {
        let plugin = name.to_string();
        limits
            .validate()
            .map_err(|reason| SandboxError::InvalidConfig {
                plugin: plugin.clone(),
                reason,
            })?;
        let engine = engine(&limits).map_err(|e| SandboxError::Instantiate {
            plugin: plugin.clone(),
            reason: format!("{e:#}"),
        })?;
        // SAFETY: the caller promises (item 1) the bytes are our own serialization; wasmtime
        // still checks the version and the engine's settings.
        let module =
            unsafe { Module::deserialize(&engine, bytes) }.map_err(|e| SandboxError::Compile {
                plugin: plugin.clone(),
                reason: format!("{e:#}"),
            })?;
        PluginModule::checked(plugin, engine, &module, limits, config, None)
    }

    /// A fresh instance: it gets `registry` (chunks of earlier instances stay there as
    /// orphans), checks the ABI version and runs `emm_init` with the config.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Instantiate`] (no pooled slot left), [`SandboxError::AbiVersion`],
    /// [`SandboxError::InitRefused`], [`SandboxError::Quarantined`] when start-up traps or
    /// breaks a limit. On error the registry is handed back.
    pub(crate) fn instantiate(
        &self,
        registry: Registry,
        upstream: Arc<dyn DeviceMemoryResource>,
    ) -> Result<PluginInstance, Box<(SandboxError, Registry)>> {
        let state = HostState::new(registry, upstream, &self.limits);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| s as &mut dyn wasmtime::ResourceLimiter);
        let ms = self.limits.get_deadline().map_or(0, |d| d.as_millis());
        let ticks = self.limits.deadline_ticks();
        let fuel = self.limits.get_fuel_per_call();
        if let Some(f) = fuel {
            // Start-up gets the same budget as a call.
            let _ = store.set_fuel(f);
        }
        if let Some(t) = ticks {
            store.set_epoch_deadline(t);
        }
        let started = self.start(&mut store);
        match started {
            Ok(exports) => Ok(PluginInstance::new(store, exports, fuel, ticks, ms)),
            Err(e) => {
                let registry = std::mem::take(&mut store.data_mut().registry);
                Err(Box::new((e, registry)))
            }
        }
    }

    fn start(&self, store: &mut Store<HostState>) -> Result<Exports, SandboxError> {
        let plugin = &self.name;
        let instance = self
            .pre
            .instantiate(&mut *store)
            .map_err(|e| self.startup_error(store, "instantiation", &e))?;
        let missing = |name| SandboxError::MissingExport {
            plugin: plugin.clone(),
            name,
            signature: "memory",
        };
        let memory = instance
            .get_memory(&mut *store, abi::EXPORT_MEMORY)
            .ok_or_else(|| missing(abi::EXPORT_MEMORY))?;
        let typed_err = |e: wasmtime::Error| SandboxError::Instantiate {
            plugin: plugin.clone(),
            reason: format!("{e:#}"),
        };
        let version = instance
            .get_typed_func::<(), i32>(&mut *store, abi::EXPORT_ABI_VERSION)
            .map_err(typed_err)?;
        let found = version
            .call(&mut *store, ())
            .map_err(|e| self.startup_error(store, "emm_abi_version()", &e))?;
        if found != abi::ABI_VERSION {
            return Err(SandboxError::AbiVersion {
                plugin: plugin.clone(),
                expected: abi::ABI_VERSION,
                found,
            });
        }
        self.init(store, &instance, memory)?;
        Ok(Exports {
            alloc: instance
                .get_typed_func(&mut *store, abi::EXPORT_ALLOC)
                .map_err(typed_err)?,
            free: instance
                .get_typed_func(&mut *store, abi::EXPORT_FREE)
                .map_err(typed_err)?,
            reset: optional(&instance, store, abi::EXPORT_RESET).map_err(typed_err)?,
            trim: optional(&instance, store, abi::EXPORT_TRIM).map_err(typed_err)?,
            stats: optional(&instance, store, abi::EXPORT_STATS).map_err(typed_err)?,
            defer_enter: optional(&instance, store, abi::EXPORT_DEFER_ENTER).map_err(typed_err)?,
            defer_exit: optional(&instance, store, abi::EXPORT_DEFER_EXIT).map_err(typed_err)?,
            memory,
        })
    }

    /// Passes the config blob: `emm_buffer(len)`, a checked write, `emm_init(ptr, len)`.
    fn init(
        &self,
        store: &mut Store<HostState>,
        instance: &wasmtime::Instance,
        memory: wasmtime::Memory,
    ) -> Result<(), SandboxError> {
        let plugin = &self.name;
        let typed_err = |e: wasmtime::Error| SandboxError::Instantiate {
            plugin: plugin.clone(),
            reason: format!("{e:#}"),
        };
        let buffer = instance
            .get_typed_func::<i32, i32>(&mut *store, abi::EXPORT_BUFFER)
            .map_err(typed_err)?;
        let init = instance
            .get_typed_func::<(i32, i32), i32>(&mut *store, abi::EXPORT_INIT)
            .map_err(typed_err)?;
        let len = i32::try_from(self.config.len()).map_err(|_| SandboxError::InvalidConfig {
            plugin: plugin.clone(),
            reason: "the config blob does not fit an i32 length".to_string(),
        })?;
        let call = format!("emm_buffer({len})");
        let ptr = buffer
            .call(&mut *store, len)
            .map_err(|e| self.startup_error(store, &call, &e))?;
        let written = usize::try_from(ptr)
            .ok()
            .filter(|_| ptr != 0 || len == 0)
            .and_then(|start| {
                let dst = memory
                    .data_mut(&mut *store)
                    .get_mut(start..start.checked_add(self.config.len())?)?;
                dst.copy_from_slice(&self.config);
                Some(())
            });
        if written.is_none() {
            return Err(SandboxError::Quarantined(Breach {
                plugin: plugin.clone(),
                fault: PluginFault::BadAnswer {
                    rule: crate::fault::Rule::BadGuestPointer,
                    detail: format!("emm_buffer returned {ptr}, which cannot hold {len} bytes"),
                },
                call,
            }));
        }
        let call = format!("emm_init({ptr}, {len})");
        let status = init
            .call(&mut *store, (ptr, len))
            .map_err(|e| self.startup_error(store, &call, &e))?;
        if status != abi::STATUS_OK {
            return Err(SandboxError::InitRefused {
                plugin: plugin.clone(),
                status,
                config_len: self.config.len(),
            });
        }
        Ok(())
    }

    fn startup_error(
        &self,
        store: &mut Store<HostState>,
        call: &str,
        e: &wasmtime::Error,
    ) -> SandboxError {
        let fault = store.data_mut().fault.take().unwrap_or_else(|| {
            match e.downcast_ref::<wasmtime::Trap>() {
                Some(wasmtime::Trap::OutOfFuel) => PluginFault::OutOfFuel {
                    fuel: self.limits.get_fuel_per_call().unwrap_or(0),
                },
                Some(wasmtime::Trap::Interrupt) => PluginFault::Deadline {
                    millis: self.limits.get_deadline().map_or(0, |d| d.as_millis()),
                },
                Some(t) => PluginFault::Trap(t.to_string()),
                None => PluginFault::Trap(format!("{e:#}")),
            }
        });
        SandboxError::Quarantined(Breach {
            plugin: self.name.clone(),
            fault,
            call: call.to_string(),
        })
    }
}

/// An optional export, typed; `None` when the guest lacks it.
fn optional<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
    instance: &wasmtime::Instance,
    store: &mut Store<HostState>,
    name: &str,
) -> wasmtime::Result<Option<TypedFunc<P, R>>> {
    match instance.get_func(&mut *store, name) {
        Some(f) => f.typed(&*store).map(Some),
        None => Ok(None),
    }
}

/// The engine for these limits: fuel and epochs only when asked for (each costs a check in
/// compiled code), the stack limit, and pooled instances.
fn engine(limits: &PluginLimits) -> wasmtime::Result<Engine> {
    let mut config = Config::new();
    config.consume_fuel(limits.get_fuel_per_call().is_some());
    config.epoch_interruption(limits.get_deadline().is_some());
    config.max_wasm_stack(limits.get_max_stack());
    // ABI v1 is wasm32: a 64-bit memory is refused (the budget check names it first).
    config.wasm_memory64(false);
    let slots = limits.get_pooled_instances();
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(slots)
        .total_memories(slots)
        .total_tables(slots)
        .max_memories_per_module(1)
        .max_tables_per_module(1)
        .max_memory_size(limits.get_memory_cap());
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config)
}

/// What every wasm binary starts with.
const WASM_MAGIC: &[u8] = b"\0asm";

/// Why `bytes`, which do not start with the wasm magic, are not loaded.
fn not_wasm_reason(bytes: &[u8]) -> String {
    let text = std::str::from_utf8(&bytes[..bytes.len().min(4096)]).is_ok();
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if text && matches!(first, Some(b'(') | Some(b';')) {
        "it is text (WebAssembly text format, WAT), not a wasm binary; a plugin file must be \
         a compiled .wasm (wat2wasm, or cargo build --target wasm32-unknown-unknown)"
            .to_string()
    } else {
        "it does not start with the wasm magic bytes \\0asm: it is not a WebAssembly binary \
         (build it for wasm32-unknown-unknown)"
            .to_string()
    }
}

/// The wasm binary of the WAT text `text`.
///
/// # Errors
///
/// The parser's message, when the text is not WAT.
pub fn wat_to_wasm(text: &str) -> Result<Vec<u8>, String> {
    wat::parse_str(text).map_err(|e| format!("{e}"))
}

/// Compiles `bytes`, giving up after `deadline` (the compiling thread then finishes on its
/// own: the budgets checked before bound how long).
fn compile(
    plugin: &str,
    engine: &Engine,
    bytes: &[u8],
    deadline: Option<std::time::Duration>,
) -> Result<Module, SandboxError> {
    let failed = |e: wasmtime::Error| SandboxError::Compile {
        plugin: plugin.to_string(),
        reason: format!("{e:#}"),
    };
    let Some(deadline) = deadline else {
        return Module::from_binary(engine, bytes).map_err(failed);
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (engine2, owned) = (engine.clone(), bytes.to_vec());
    let spawned = std::thread::Builder::new()
        .name("emm-compile".to_string())
        .spawn(move || {
            let _ = tx.send(Module::from_binary(&engine2, &owned));
        });
    if spawned.is_err() {
        // No thread to spare: compile here, without the deadline (the budgets still hold).
        return Module::from_binary(engine, bytes).map_err(failed);
    }
    match rx.recv_timeout(deadline) {
        Ok(result) => result.map_err(failed),
        Err(_) => Err(SandboxError::CompileDeadline {
            plugin: plugin.to_string(),
            millis: deadline.as_millis(),
        }),
    }
}
