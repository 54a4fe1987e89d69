//! [`SandboxError`]: why a plugin could not be loaded or started, or why it stopped.

use emm_core::contract::EmmError;
use emm_core::units::Bytes;

use crate::fault::Breach;
use crate::gate::GateError;

/// Why loading, starting or calling a plugin failed. Every message names the plugin (or file),
/// what went wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The module file could not be read.
    #[error("cannot read plugin {path}: {reason}; check the path given to EMM_MEMORY_MANAGER")]
    Io {
        /// The path.
        path: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The module is larger than the limit; nothing was compiled.
    #[error("plugin {plugin} is {}, over the limit of {}; raise PluginLimits::max_module_bytes if it is trusted to be this large", Bytes(*bytes as u64), Bytes(*limit as u64))]
    ModuleTooLarge {
        /// The plugin.
        plugin: String,
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The module is not valid WebAssembly, or cannot be compiled.
    #[error("plugin {plugin} is not a valid wasm module: {reason}")]
    Compile {
        /// The plugin.
        plugin: String,
        /// The compiler's reason, with its whole chain of causes.
        reason: String,
    },
    /// The bytes are not a wasm binary (WAT text, say); nothing was parsed.
    #[error("plugin {plugin} is refused: {reason}")]
    NotWasm {
        /// The plugin.
        plugin: String,
        /// What the bytes are instead, and what to give.
        reason: String,
    },
    /// The module is over a compile budget of [`crate::PluginLimits`], or breaks ABI v1's
    /// memory model; nothing was compiled.
    #[error("plugin {plugin} is refused before compiling: {reason}; raise that limit only if the plugin is trusted")]
    OverBudget {
        /// The plugin.
        plugin: String,
        /// The budget it breaks (named as the `PluginLimits` setter that raises it).
        reason: String,
    },
    /// Compiling took longer than [`crate::PluginLimits::compile_deadline`].
    #[error("plugin {plugin} took more than {millis} ms to compile (PluginLimits::compile_deadline) and is refused")]
    CompileDeadline {
        /// The plugin.
        plugin: String,
        /// The deadline in milliseconds.
        millis: u128,
    },
    /// The module lacks an export the ABI requires.
    #[error("plugin {plugin} does not export {name} ({signature}); build it with emm-plugin-sdk's export_plugin! (see plugins/ABI.md)")]
    MissingExport {
        /// The plugin.
        plugin: String,
        /// The export's name.
        name: &'static str,
        /// Its type, as the ABI gives it.
        signature: &'static str,
    },
    /// An export has the wrong type.
    #[error("plugin {plugin} exports {name} as {found}, but ABI v1 wants {expected} (see plugins/ABI.md)")]
    WrongSignature {
        /// The plugin.
        plugin: String,
        /// The export's name.
        name: &'static str,
        /// The type the ABI wants.
        expected: &'static str,
        /// The type found.
        found: String,
    },
    /// The module imports something the host does not provide (WASI, say).
    #[error("plugin {plugin} imports {module}::{name}, which the host does not provide (it offers emm::upstream_alloc, emm::upstream_free, emm::log; no WASI); rebuild it for wasm32-unknown-unknown")]
    UnknownImport {
        /// The plugin.
        plugin: String,
        /// The import's module.
        module: String,
        /// The import's name.
        name: String,
    },
    /// `emm_abi_version` returned another version.
    #[error("plugin {plugin} speaks ABI version {found}, this host speaks version {expected}; rebuild it against emm-plugin-sdk for ABI v{expected}")]
    AbiVersion {
        /// The plugin.
        plugin: String,
        /// The version the host speaks.
        expected: i32,
        /// The version the plugin reported.
        found: i32,
    },
    /// `emm_init` returned a failure status.
    #[error("plugin {plugin} refused its config ({} bytes): emm_init returned {status} ({}); check the config blob", config_len, crate::abi::status_name(i64::from(*status)))]
    InitRefused {
        /// The plugin.
        plugin: String,
        /// The status it returned.
        status: i32,
        /// The config's length.
        config_len: usize,
    },
    /// The limits or the configuration are not usable.
    #[error("invalid sandbox configuration for plugin {plugin}: {reason}")]
    InvalidConfig {
        /// The plugin.
        plugin: String,
        /// What is wrong and what to give instead.
        reason: String,
    },
    /// wasmtime could not create the engine or an instance (no pooled slot left, say).
    #[error("cannot start plugin {plugin}: {reason}")]
    Instantiate {
        /// The plugin.
        plugin: String,
        /// wasmtime's reason.
        reason: String,
    },
    /// The plugin broke a rule or a limit, during start-up or a call, and is quarantined.
    #[error(transparent)]
    Quarantined(#[from] Breach),
    /// The gate refuses to run the plugin on a real GPU (no passing verdict, a failed or an
    /// edited one), or cannot decide; the message says which command to run.
    #[error(transparent)]
    Refused(Box<GateError>),
}

impl From<GateError> for SandboxError {
    fn from(e: GateError) -> Self {
        SandboxError::Refused(Box::new(e))
    }
}

impl SandboxError {
    /// The breach, when the plugin was quarantined.
    pub fn breach(&self) -> Option<&Breach> {
        match self {
            SandboxError::Quarantined(b) => Some(b),
            _ => None,
        }
    }
}

impl From<SandboxError> for EmmError {
    fn from(e: SandboxError) -> Self {
        if let SandboxError::Refused(g) = &e {
            if let GateError::BadSetting {
                variable,
                value,
                reason,
            } = g.as_ref()
            {
                return EmmError::InvalidConfig {
                    setting: variable,
                    value: value.clone(),
                    reason: reason.clone(),
                };
            }
        }
        EmmError::InvalidConfig {
            setting: "EMM_MEMORY_MANAGER (wasm plugin)",
            value: plugin_of(&e).to_string(),
            reason: e.to_string(),
        }
    }
}

fn plugin_of(e: &SandboxError) -> &str {
    match e {
        SandboxError::Io { path, .. } => path,
        SandboxError::ModuleTooLarge { plugin, .. }
        | SandboxError::Compile { plugin, .. }
        | SandboxError::NotWasm { plugin, .. }
        | SandboxError::OverBudget { plugin, .. }
        | SandboxError::CompileDeadline { plugin, .. }
        | SandboxError::MissingExport { plugin, .. }
        | SandboxError::WrongSignature { plugin, .. }
        | SandboxError::UnknownImport { plugin, .. }
        | SandboxError::AbiVersion { plugin, .. }
        | SandboxError::InitRefused { plugin, .. }
        | SandboxError::InvalidConfig { plugin, .. }
        | SandboxError::Instantiate { plugin, .. } => plugin,
        SandboxError::Quarantined(b) => &b.plugin,
        SandboxError::Refused(g) => match g.as_ref() {
            GateError::Unchecked { plugin, .. }
            | GateError::TooShallow { plugin, .. }
            | GateError::Failed { plugin, .. }
            | GateError::Tampered { plugin, .. }
            | GateError::OtherSettings { plugin, .. }
            | GateError::NoContentHash { plugin } => plugin,
            _ => "the verdict store",
        },
    }
}
