//! [`GatePolicy`]: where verdicts are kept, how deep a check must go and how strict the gate
//! is; [`GatePolicy::admit`] decides whether a plugin may run on a real GPU.

use std::path::{Path, PathBuf};

use super::admission::Admission;
use super::depth::{Depth, DEFAULT_MIN_DEPTH};
use super::error::GateError;
use super::mode::{GateMode, GATE_VAR};
use super::record::{Settings, VerdictRecord};
use super::store::VerdictStore;
use super::subject::Subject;
use crate::abi::ABI_VERSION;
use crate::factory::CONFIG_ENV_VAR;
use crate::module::PluginModule;

/// The environment variable giving the minimum depth as `CASESxOPS` (default
/// [`DEFAULT_MIN_DEPTH`], `256x64`).
pub const MIN_DEPTH_VAR: &str = "EMM_GATE_MIN_DEPTH";

/// How the gate decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatePolicy {
    store: VerdictStore,
    min_depth: Depth,
    mode: GateMode,
}

/// What the records of one plugin say.
#[derive(Default)]
struct Findings {
    tampered: Option<(PathBuf, String)>,
    failed: Option<(PathBuf, VerdictRecord)>,
    covering: Option<(PathBuf, Depth)>,
    deepest: Option<(PathBuf, Depth)>,
    // A passing record deep enough, but of another config or other limits.
    other_settings: Option<PathBuf>,
}

impl GatePolicy {
    /// Verdicts in `store`, at least [`DEFAULT_MIN_DEPTH`], enforced.
    pub fn new(store: VerdictStore) -> GatePolicy {
        GatePolicy {
            store,
            min_depth: DEFAULT_MIN_DEPTH,
            mode: GateMode::Enforce,
        }
    }

    /// The policy the environment gives: the store of `EMM_VERDICT_DIR` (or the per-user
    /// default), the depth of [`MIN_DEPTH_VAR`], the mode of [`GATE_VAR`].
    ///
    /// # Errors
    ///
    /// [`GateError::BadSetting`] for a value that cannot be read; [`GateError::Store`] when
    /// no store can be named.
    pub fn from_env() -> Result<GatePolicy, GateError> {
        GatePolicy::from_env_with(None)
    }

    /// [`GatePolicy::from_env`], with `store` (when given) instead of the environment's: for
    /// a `--verdicts DIR` flag.
    ///
    /// # Errors
    ///
    /// As [`GatePolicy::from_env`].
    pub fn from_env_with(store: Option<VerdictStore>) -> Result<GatePolicy, GateError> {
        let mode = GateMode::parse(std::env::var(GATE_VAR).ok().as_deref())?;
        let min_depth = match std::env::var(MIN_DEPTH_VAR) {
            Ok(v) if !v.trim().is_empty() => {
                Depth::parse(&v).map_err(|reason| GateError::BadSetting {
                    variable: MIN_DEPTH_VAR,
                    value: v.clone(),
                    reason,
                })?
            }
            _ => DEFAULT_MIN_DEPTH,
        };
        let store = match store {
            Some(s) => s,
            None => VerdictStore::from_env()?,
        };
        Ok(GatePolicy {
            store,
            min_depth,
            mode,
        })
    }

    /// With verdicts kept in `store`.
    pub fn store(mut self, store: VerdictStore) -> GatePolicy {
        self.store = store;
        self
    }

    /// Asking for a passing run at least `depth` deep.
    /// Default: [`DEFAULT_MIN_DEPTH`].
    pub fn min_depth(mut self, depth: Depth) -> GatePolicy {
        self.min_depth = depth;
        self
    }

    /// With strictness `mode`.
    /// Default: [`GateMode::Enforce`].
    pub fn mode(mut self, mode: GateMode) -> GatePolicy {
        self.mode = mode;
        self
    }

    /// The verdict store.
    pub fn get_store(&self) -> &VerdictStore {
        &self.store
    }

    /// The minimum depth.
    pub fn get_min_depth(&self) -> Depth {
        self.min_depth
    }

    /// The strictness.
    pub fn get_mode(&self) -> GateMode {
        self.mode
    }

    /// The command that checks `plugin` (loaded from `source`, given the config blob
    /// `config`) deep enough, recording the verdict in this policy's store.
    pub fn check_command(&self, plugin: &str, source: Option<&Path>, config: &[u8]) -> String {
        let path = source.map_or_else(|| format!("{plugin}.wasm"), |p| p.display().to_string());
        let env = if config.is_empty() {
            String::new()
        } else {
            format!(
                "{CONFIG_ENV_VAR}={} ",
                shell_quote(&String::from_utf8_lossy(config))
            )
        };
        format!(
            "{env}emm check {path} --verdicts {}{}",
            self.store.dir().display(),
            self.min_depth.flags()
        )
    }

    /// Whether `module` (loaded from `source`) may run on a real GPU. A warning an override
    /// gives is returned in the admission, not printed.
    ///
    /// Refused, unless an override says otherwise: any record of its bytes that cannot be
    /// trusted; any failing record of its bytes, whatever config or limits it was checked
    /// with (a counterexample exists, whatever else passed); no passing record at the minimum
    /// depth under this host's ABI version with the module's own config blob and limits.
    ///
    /// # Errors
    ///
    /// The [`GateError`] that says why, and which command to run.
    pub fn admit(
        &self,
        module: &PluginModule,
        source: Option<&Path>,
    ) -> Result<Admission, GateError> {
        let plugin = module.name();
        let command = self.check_command(plugin, source, module.config());
        let Some(hash) = module.content_hash() else {
            return self.unless_overridden(
                plugin,
                false,
                GateError::NoContentHash {
                    plugin: plugin.to_string(),
                },
            );
        };
        let found = self.findings(&Subject::wasm(hash), &module.settings())?;
        let hash = hash.to_hex();
        if let Some((record, reason)) = found.tampered {
            let e = GateError::Tampered {
                plugin: plugin.to_string(),
                record,
                reason,
                command,
            };
            return self.unless_overridden(plugin, true, e);
        }
        if let Some((record, r)) = found.failed {
            let failed = match (&r.error, r.failed_checks()) {
                (Some(e), _) => format!("it could not be run: {e}"),
                (None, f) if f.is_empty() => "a check failed".to_string(),
                (None, f) => format!("failed checks: {}", f.join(", ")),
            };
            let e = GateError::Failed {
                plugin: plugin.to_string(),
                hash,
                failed: format!("{failed}; seed {}", r.seed),
                record,
                command,
            };
            return self.unless_overridden(plugin, true, e);
        }
        if let Some((record, depth)) = found.covering {
            return Ok(Admission::Verified { record, depth });
        }
        let e = match (found.deepest, found.other_settings) {
            (Some((record, best)), _) => GateError::TooShallow {
                plugin: plugin.to_string(),
                hash,
                best,
                min: self.min_depth,
                record,
                command,
            },
            (None, Some(record)) => GateError::OtherSettings {
                plugin: plugin.to_string(),
                hash,
                record,
                command,
            },
            (None, None) => GateError::Unchecked {
                plugin: plugin.to_string(),
                hash,
                store: self.store.dir().to_path_buf(),
                command,
            },
        };
        self.unless_overridden(plugin, false, e)
    }

    fn findings(&self, subject: &Subject, settings: &Settings) -> Result<Findings, GateError> {
        let mut f = Findings::default();
        for stored in self.store.records(subject)? {
            let (path, r) = match stored.record {
                Err(reason) => {
                    f.tampered.get_or_insert((stored.path, reason));
                    continue;
                }
                Ok(r) => (stored.path, r),
            };
            let ran = r.depth.cases > 0 && r.depth.max_ops > 0;
            if !r.passed {
                f.failed.get_or_insert((path, r));
            } else if r.abi_version != ABI_VERSION || r.backend != "sim" || !ran {
                // Passed under another ABI, not on the simulator, or without running a case:
                // it vouches for nothing here.
            } else if r.settings.as_ref() != Some(settings) {
                // Checked with another config or other limits: it vouches for those only.
                if r.depth.covers(self.min_depth) {
                    f.other_settings.get_or_insert(path);
                }
            } else if r.depth.covers(self.min_depth) {
                f.covering.get_or_insert((path, r.depth));
            } else {
                let size = |d: Depth| u64::from(d.cases) * u64::from(d.max_ops);
                if f.deepest
                    .as_ref()
                    .is_none_or(|(_, d)| size(r.depth) > size(*d))
                {
                    f.deepest = Some((path, r.depth));
                }
            }
        }
        Ok(f)
    }

    /// `refusal`, unless the mode lets it through; `known_bad` refusals (a failed or an
    /// untrustworthy record) pass only the loud override.
    fn unless_overridden(
        &self,
        plugin: &str,
        known_bad: bool,
        refusal: GateError,
    ) -> Result<Admission, GateError> {
        let warning = match (self.mode, known_bad) {
            (GateMode::Enforce, _) | (GateMode::Warn, true) => return Err(refusal),
            (GateMode::Warn, false) => format!(
                "{GATE_VAR}=warn: plugin {plugin} runs on a real GPU although the gate refuses \
                 it: {refusal}. An allocator that has not passed the EMM contract can hand out \
                 overlapping or out-of-bounds device memory and silently corrupt the data of \
                 every program on this GPU; use {GATE_VAR}=warn only while developing"
            ),
            (GateMode::AllowFailed, _) => format!(
                "{GATE_VAR}=allow-failed: plugin {plugin} runs on a real GPU although the gate \
                 refuses it: {refusal}. If it failed the contract it is KNOWN to break it: expect \
                 corrupted data, leaks or crashes on this GPU; use this only to compare the \
                 simulator with hardware, never for real work"
            ),
        };
        Ok(Admission::Overridden { warning })
    }
}

/// `text` as one word of a POSIX shell: in single quotes unless it is plain.
fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "=_-.,/:+".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("chunk_bytes=1048576"), "chunk_bytes=1048576");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
