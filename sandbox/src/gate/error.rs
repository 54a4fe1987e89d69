//! [`GateError`]: why a plugin may not run on a real GPU, or why the gate cannot decide.
//! Every message says what to run.

use std::path::PathBuf;

use super::depth::Depth;

/// Why the gate refuses a plugin on hardware.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// No record of this plugin's exact bytes is in the store.
    #[error("plugin {plugin} (sha256 {hash}) has no verdict in {}: it has not been checked against the EMM contract on the simulated GPU, so it may not run on a real GPU; run `{command}` first (a plugin changed by even one byte needs a new check)", store.display())]
    Unchecked {
        /// The plugin.
        plugin: String,
        /// Its hex sha256.
        hash: String,
        /// The verdict store that was searched.
        store: PathBuf,
        /// The command that checks it and records the verdict there.
        command: String,
    },
    /// It passed, but no passing run went as deep as the gate asks.
    #[error("plugin {plugin} (sha256 {hash}) passed the EMM contract only to depth {best} ({}), less than the {min} (cases x operations) asked for loading on a real GPU; run `{command}`", record.display())]
    TooShallow {
        /// The plugin.
        plugin: String,
        /// Its hex sha256.
        hash: String,
        /// The deepest passing run.
        best: Depth,
        /// The depth asked for.
        min: Depth,
        /// The record of the deepest passing run.
        record: PathBuf,
        /// The command that checks it deep enough.
        command: String,
    },
    /// It passed deep enough, but only with another config blob or other limits than it is
    /// loaded with now: a verdict covers the bytes with the settings they were checked with.
    #[error("plugin {plugin} (sha256 {hash}) passed the EMM contract only with another config ({}) or other limits than it is loaded with now ({}); a verdict covers a plugin's bytes together with the config (EMM_PLUGIN_CONFIG) and the PluginLimits it was checked with; run `{command}` (emm check uses the default limits)", crate::factory::CONFIG_ENV_VAR, record.display())]
    OtherSettings {
        /// The plugin.
        plugin: String,
        /// Its hex sha256.
        hash: String,
        /// A passing record of other settings.
        record: PathBuf,
        /// The command that checks it with these settings.
        command: String,
    },
    /// A run of these exact bytes failed the contract: a counterexample exists.
    #[error("plugin {plugin} (sha256 {hash}) FAILED the EMM contract on the simulated GPU ({failed}; record {}): it may not run on a real GPU, and EMM_GATE=warn does not change that; fix the plugin, then check the new build with `{command}`", record.display())]
    Failed {
        /// The plugin.
        plugin: String,
        /// Its hex sha256.
        hash: String,
        /// The checks that failed (or why it could not run), and the run's seed.
        failed: String,
        /// The failing record.
        record: PathBuf,
        /// The command that checks a new build.
        command: String,
    },
    /// A record of this plugin cannot be trusted: written or edited without the gate's key,
    /// corrupted, or not a regular file.
    #[error("the verdict record {} of plugin {plugin} cannot be trusted ({reason}); the plugin is refused. Delete the record and run `{command}` again", record.display())]
    Tampered {
        /// The plugin.
        plugin: String,
        /// The record.
        record: PathBuf,
        /// What does not match.
        reason: String,
        /// The command that checks it again.
        command: String,
    },
    /// The module was loaded from precompiled code: there are no `.wasm` bytes to hash.
    #[error("plugin {plugin} was loaded from precompiled code, which carries no content hash, so no verdict can vouch for it on a real GPU; load its .wasm file instead")]
    NoContentHash {
        /// The plugin.
        plugin: String,
    },
    /// A setting of the gate is not valid.
    #[error("{variable}={value:?}: {reason}")]
    BadSetting {
        /// The environment variable or flag.
        variable: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        reason: String,
    },
    /// The verdict store cannot be read or written.
    #[error("verdict store {}: {reason}", path.display())]
    Store {
        /// The file or folder.
        path: PathBuf,
        /// The operating system's reason and what to do.
        reason: String,
    },
}
