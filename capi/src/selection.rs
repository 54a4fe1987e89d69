//! What `emm_configure` accepts, and how it becomes a manager factory: a built-in manager
//! name (`pool`, `default`, `arena`, …), the path of a `.wasm` plugin (loaded only through
//! emm-sandbox's loader in emm-core's selection registry, so every check that loader makes
//! applies), or a JSON object of resource-chain options (`emm_reinitialize`'s).
//!
//! `EMM_MEMORY_MANAGER`, when set, wins over the program's choice with a warning, as the seed
//! says of `NUMBA_CUDA_MEMORY_MANAGER`. With neither, the C ABI uses `pool-vmm-tight`: one pool
//! shared by every library of the process, holding within a few percent of live bytes. A
//! library that needs another kind (Numba's IPC needs memory `cuIpcGetMemHandle` exports) asks
//! for it with `emm_configure_if_unset`, which the program's and the environment's choices
//! win over.

use std::path::PathBuf;
use std::sync::Arc;

use emm_core::contract::selection::{self, ManagerFactory, MANAGER_ENV_VAR};
use emm_core::{DeviceId, ReinitializeOptions};
use serde::Deserialize;

use crate::status::{CapiError, CapiResult, EmmStatus};

/// The manager the C ABI uses when nothing is configured.
pub(crate) const DEFAULT_CAPI_MANAGER: &str = "pool-vmm-tight";

/// A parsed manager spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Spec {
    /// A built-in name or a `.wasm` path: resolved by emm-core's registry.
    Registry(String),
    /// Resource-chain options: built by `emm_core::reinitialize`.
    Chain(ReinitializeOptions),
}

/// `emm_reinitialize`'s options as JSON, RMM's `rmm.reinitialize` keywords.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChainJson {
    #[serde(default)]
    pool_allocator: bool,
    initial_pool_size: Option<u64>,
    maximum_pool_size: Option<u64>,
    #[serde(default)]
    managed_memory: bool,
    log_file_name: Option<PathBuf>,
    #[serde(default)]
    statistics: bool,
    devices: Option<Vec<u32>>,
}

/// The longest manager name or plugin path `emm_configure` takes (Linux's `PATH_MAX`).
const MAX_NAME_BYTES: usize = 4096;

/// How much of a caller's text an error message quotes.
const EXCERPT_CHARS: usize = 64;

/// `text` quoted for an error message: whole when short, else its first [`EXCERPT_CHARS`]
/// characters and its length, so that a message never grows with what it was given.
pub(crate) fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes in all)", &text[..cut], text.len()),
    }
}

/// [`excerpt`] unquoted, for a message that quotes in its own way (serde's).
fn shortened(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}… ({} bytes in all)", &text[..cut], text.len()),
    }
}

/// Parses reinitialize options from JSON.
///
/// # Errors
///
/// `InvalidArgument` naming the bad field.
pub(crate) fn parse_chain(json: &str) -> CapiResult<ReinitializeOptions> {
    let c: ChainJson = serde_json::from_str(json).map_err(|e| {
        CapiError::invalid(
            "emm_reinitialize",
            format!(
                "options {} are not valid: {}; give a JSON object with pool_allocator, \
                 initial_pool_size, maximum_pool_size, managed_memory, log_file_name, \
                 statistics, devices",
                excerpt(json),
                // serde quotes an unknown field or a bad string whole: cut that too.
                shortened(&e.to_string())
            ),
        )
    })?;
    if let Some(path) = &c.log_file_name {
        let text = path.to_string_lossy();
        if text.len() > MAX_NAME_BYTES {
            return Err(CapiError::invalid(
                "emm_reinitialize",
                format!(
                    "log_file_name {} is longer than a path can be ({MAX_NAME_BYTES} bytes)",
                    excerpt(&text)
                ),
            ));
        }
    }
    Ok(ReinitializeOptions {
        pool_allocator: c.pool_allocator,
        initial_pool_size: c.initial_pool_size,
        maximum_pool_size: c.maximum_pool_size,
        managed_memory: c.managed_memory,
        log_file_name: c.log_file_name,
        statistics: c.statistics,
        devices: c.devices.map(|d| d.into_iter().map(DeviceId).collect()),
    })
}

/// Parses what `emm_configure` was given (`None` or blank: nothing).
///
/// # Errors
///
/// `InvalidArgument` for malformed JSON.
pub(crate) fn parse(spec: Option<&str>) -> CapiResult<Option<Spec>> {
    let Some(s) = spec.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if s.starts_with('{') {
        return Ok(Some(Spec::Chain(parse_chain(s)?)));
    }
    if s.len() > MAX_NAME_BYTES {
        return Err(CapiError::new(
            EmmStatus::Config,
            format!(
                "emm_configure: {} is longer than any manager name or plugin path \
                 ({MAX_NAME_BYTES} bytes); give a built-in name, a .wasm path or a JSON object",
                excerpt(s)
            ),
        ));
    }
    Ok(Some(Spec::Registry(s.to_string())))
}

/// The spec that applies: the environment's `EMM_MEMORY_MANAGER` if set (with a warning on
/// stderr when it overrides `requested`), else `requested`, else [`DEFAULT_CAPI_MANAGER`];
/// and whether it is that default (nothing chose).
pub(crate) fn effective(requested: Option<Spec>) -> (Spec, bool) {
    let env = std::env::var(MANAGER_ENV_VAR)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    match (env, requested) {
        (Some(e), Some(r)) => {
            eprintln!(
                "emm: warning: {MANAGER_ENV_VAR}={e} overrides the manager the program \
                 configured ({r:?}); unset {MANAGER_ENV_VAR} to use the program's"
            );
            (Spec::Registry(e), false)
        }
        (Some(e), None) => (Spec::Registry(e), false),
        (None, Some(r)) => (r, false),
        (None, None) => (Spec::Registry(DEFAULT_CAPI_MANAGER.to_string()), true),
    }
}

/// The factory for a registry name or `.wasm` path, through emm-core's selection registry
/// (which holds emm-sandbox's loader when the `wasm` feature is on).
///
/// # Errors
///
/// `Config`: an unknown name (the message lists the known ones), a plugin that does not load.
pub(crate) fn registry_factory(name: &str) -> CapiResult<Arc<dyn ManagerFactory>> {
    install_plugin_loader();
    selection::current_factory_with_env(Some(name)).map_err(|e| {
        let mut err = CapiError::from(e);
        if err.status != EmmStatus::OutOfMemory {
            err.status = EmmStatus::Config;
        }
        err
    })
}

#[cfg(feature = "wasm")]
fn install_plugin_loader() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(emm_sandbox::install_loader);
}

#[cfg(not(feature = "wasm"))]
fn install_plugin_loader() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_into_names_paths_and_chains() {
        assert_eq!(parse(None), Ok(None));
        assert_eq!(parse(Some("  ")), Ok(None));
        assert_eq!(
            parse(Some("arena")),
            Ok(Some(Spec::Registry("arena".into())))
        );
        let Ok(Some(Spec::Chain(o))) = parse(Some(
            r#"{"pool_allocator": true, "initial_pool_size": 1024}"#,
        )) else {
            panic!("a chain spec");
        };
        assert!(o.pool_allocator);
        assert_eq!(o.initial_pool_size, Some(1024));
        let e = parse(Some(r#"{"pool": true}"#)).unwrap_err();
        assert_eq!(e.status, EmmStatus::InvalidArgument);
        assert!(e.message.contains("unknown field `pool`"), "{}", e.message);
    }

    /// A message quotes a short excerpt of what it was given, never the whole of a huge
    /// input: bad JSON, a huge unknown field, a huge name.
    #[test]
    fn errors_quote_an_excerpt_of_a_huge_spec() {
        let big = "x".repeat(1 << 20);
        for (spec, words) in [
            (
                format!("{{\"pool_allocator\": {big}"),
                "(1048595 bytes in all)",
            ),
            (format!("{{\"{big}\": 1}}"), "unknown field"),
            (
                format!("{{\"log_file_name\": 1, \"a\": \"{big}"),
                "bytes in all",
            ),
            (big.clone(), "longer than any manager name"),
            (
                format!("{{\"log_file_name\": \"/tmp/{big}\"}}"),
                "longer than a path can be",
            ),
        ] {
            let e = parse(Some(&spec)).unwrap_err();
            assert!(
                e.message.len() < 1024,
                "{} bytes of message",
                e.message.len()
            );
            assert!(e.message.contains(words), "{}", e.message);
        }
        assert_eq!(excerpt("short"), "\"short\"");
        let multibyte = "é".repeat(100);
        assert!(excerpt(&multibyte).ends_with("… (200 bytes in all)"));
    }
}
