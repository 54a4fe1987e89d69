//! [`Subject`]: what a verdict is about — the exact bytes of a `.wasm` plugin, or a built-in
//! manager of one emm version.

use serde::{Deserialize, Serialize};

use super::content_hash::ContentHash;

/// What a verdict record is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Subject {
    /// A `.wasm` plugin: the sha256 of its bytes, 64 lower-case hex digits.
    Wasm {
        /// The hex sha256.
        sha256: String,
    },
    /// A manager built into emm: its name and emm's version.
    Builtin {
        /// The name `emm list` gives.
        name: String,
        /// The version of emm it is built into.
        emm_version: String,
    },
}

impl Subject {
    /// The plugin whose bytes hash to `hash`.
    pub fn wasm(hash: ContentHash) -> Subject {
        Subject::Wasm {
            sha256: hash.to_hex(),
        }
    }

    /// The built-in manager `name` of emm `emm_version`.
    pub fn builtin(name: &str, emm_version: &str) -> Subject {
        Subject::Builtin {
            name: name.to_string(),
            emm_version: emm_version.to_string(),
        }
    }

    /// The folder of the verdict store its records live in: the hex hash, or
    /// `builtin-NAME-VERSION` with anything but letters, digits, `.`, `_` and `-` as `_`.
    pub fn key(&self) -> String {
        match self {
            Subject::Wasm { sha256 } => safe(&sha256.to_ascii_lowercase()),
            Subject::Builtin { name, emm_version } => {
                format!("builtin-{}-{}", safe(name), safe(emm_version))
            }
        }
    }
}

fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_safe_folder_names() {
        let h = ContentHash::of(b"plugin");
        assert_eq!(Subject::wasm(h).key(), h.to_hex());
        assert_eq!(
            Subject::builtin("pool/../x", "0.1.0").key(),
            "builtin-pool_.._x-0.1.0"
        );
    }
}
