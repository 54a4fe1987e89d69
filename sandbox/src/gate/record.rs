//! [`VerdictRecord`]: the verdict of one `emm check` run on the simulated GPU, as a small
//! JSON file of the verdict store, authenticated by an HMAC over its fields.
//!
//! The MAC is HMAC-SHA256, under the per-user [`GateKey`] kept outside the store, of a fixed
//! prefix and the record's fields (the record as JSON with the MAC left empty). A record
//! written or edited by anyone without the key — a changed hash, verdict, depth, config or
//! check — does not authenticate, and the gate refuses the plugin.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::check_verdict::CheckVerdict;
use super::content_hash::hex;
use super::depth::Depth;
use super::key::GateKey;
use super::subject::Subject;
use crate::limits::PluginLimits;

/// The record format this emm writes and reads (2: authenticated by HMAC, with the settings).
pub const RECORD_FORMAT: u32 = 2;

/// What the MAC is computed over, before the fields.
const MAC_CONTEXT: &[u8] = b"emm-verdict-v2\n";

/// What a `.wasm` plugin was checked with besides its bytes: its config blob and its limits.
/// A verdict vouches for the plugin only with the same settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The hex sha256 of the config blob `emm_init` received (`EMM_PLUGIN_CONFIG`).
    pub config_sha256: String,
    /// The limits it ran under, as [`PluginLimits::fingerprint`] writes them.
    pub limits: String,
}

impl Settings {
    /// The settings of a plugin given `config` and run under `limits`.
    pub fn of(config: &[u8], limits: &PluginLimits) -> Settings {
        Settings {
            config_sha256: hex(&Sha256::digest(config)),
            limits: limits.fingerprint(),
        }
    }
}

/// The verdict of one conformance run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictRecord {
    /// [`RECORD_FORMAT`] of the emm that wrote it.
    pub format: u32,
    /// What was checked.
    pub subject: Subject,
    /// The config and limits a `.wasm` plugin was checked with (`None` for a built-in).
    pub settings: Option<Settings>,
    /// The plugin as it was named on the command line (a path or a built-in's name).
    pub plugin: String,
    /// The plugin ABI version of the host that ran it (`abi::ABI_VERSION`).
    pub abi_version: i32,
    /// The contract suite that judged it, e.g. `emm-conformance 0.1.0`.
    pub suite: String,
    /// Where it ran: `sim` (only simulator runs are recorded).
    pub backend: String,
    /// How deep the run went: the random cases that actually ran, and the most operations
    /// of one.
    pub depth: Depth,
    /// The run's seed (`EMM_SEED=<seed> emm check …` runs it again).
    pub seed: u64,
    /// When it ran, UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub date: String,
    /// Whether every check passed and the plugin could be run.
    pub passed: bool,
    /// Why the plugin could not be run, if it could not.
    pub error: Option<String>,
    /// Every check, in the suite's order.
    pub checks: Vec<CheckVerdict>,
    /// `hmac-sha256:<hex>` over the other fields (see the module's doc).
    pub mac: String,
}

impl VerdictRecord {
    /// The record with its MAC computed under `key`.
    pub fn sealed(mut self, key: &GateKey) -> VerdictRecord {
        self.mac = key.mac(&[MAC_CONTEXT, &self.body()]);
        self
    }

    /// The fields the MAC covers: the record as JSON with the MAC empty.
    fn body(&self) -> Vec<u8> {
        let mut fields = self.clone();
        fields.mac = String::new();
        // Serializing plain structs, strings and integers cannot fail; an empty body would
        // only make every record fail to authenticate, never pass.
        serde_json::to_vec(&fields).unwrap_or_default()
    }

    /// Checks the format and the MAC under `key`.
    ///
    /// # Errors
    ///
    /// Why the record cannot be trusted: another format, or a MAC that `key` did not make
    /// over these fields (written or edited without the key, or corrupted).
    pub fn verify(&self, key: &GateKey) -> Result<(), String> {
        if self.format != RECORD_FORMAT {
            return Err(old_format(self.format));
        }
        if !key.verifies(&[MAC_CONTEXT, &self.body()], &self.mac) {
            return Err(format!(
                "its MAC {:?} does not authenticate its fields under this user's gate key: it \
                 was written or changed by something other than emm check with this key",
                self.mac
            ));
        }
        Ok(())
    }

    /// The names of the checks that failed.
    pub fn failed_checks(&self) -> Vec<&str> {
        self.checks
            .iter()
            .filter(|c| c.failure.is_some())
            .map(|c| c.name.as_str())
            .collect()
    }

    /// The record as the store keeps it: pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads a record (without verifying it: see [`VerdictRecord::verify`]).
    ///
    /// # Errors
    ///
    /// The text is not a record, with serde's reason.
    pub fn from_json(text: &str) -> Result<VerdictRecord, String> {
        serde_json::from_str(text).map_err(|e| {
            // A record of another format may lack this format's fields: say which it is.
            #[derive(Deserialize)]
            struct Format {
                format: u32,
            }
            match serde_json::from_str::<Format>(text) {
                Ok(f) if f.format != RECORD_FORMAT => old_format(f.format),
                _ => format!("it is not a verdict record: {e}"),
            }
        })
    }
}

/// Why a record of `format` is refused, and what to do.
fn old_format(format: u32) -> String {
    format!(
        "it is a record of format {format}, written by {} emm; this emm reads format \
         {RECORD_FORMAT} only: re-run `emm check <plugin>` to record a new verdict",
        if format < RECORD_FORMAT {
            "an older"
        } else {
            "a newer"
        }
    )
}

/// The time `t` as UTC `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 as (year, month, day): Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::gate::content_hash::ContentHash;

    fn record() -> VerdictRecord {
        VerdictRecord {
            format: RECORD_FORMAT,
            subject: Subject::wasm(ContentHash::of(b"plugin")),
            settings: Some(Settings::of(b"", &PluginLimits::default())),
            plugin: "p.wasm".into(),
            abi_version: 1,
            suite: "emm-conformance 0.1.0".into(),
            backend: "sim".into(),
            depth: Depth::new(4, 8),
            seed: 7,
            date: utc_date(UNIX_EPOCH),
            passed: true,
            error: None,
            checks: vec![CheckVerdict {
                name: "no_overlap".into(),
                passed: true,
                skipped: false,
                failure: None,
            }],
            mac: String::new(),
        }
        .sealed(&key())
    }

    fn key() -> GateKey {
        GateKey::from_bytes([3; 32])
    }

    #[test]
    fn a_sealed_record_verifies_and_an_edited_one_does_not() {
        let r = record();
        assert_eq!(r.verify(&key()), Ok(()));
        assert!(r.verify(&GateKey::from_bytes([4; 32])).is_err());
        let back = VerdictRecord::from_json(&r.to_json()).unwrap();
        assert_eq!(back, r);
        let mut edited = r.clone();
        edited.passed = false;
        assert!(edited
            .verify(&key())
            .unwrap_err()
            .contains("does not authenticate"));
        let mut edited = r.clone();
        edited.subject = Subject::wasm(ContentHash::of(b"other"));
        assert!(edited.verify(&key()).is_err());
        let mut edited = r.clone();
        edited.depth.cases = 4000;
        assert!(edited.verify(&key()).is_err());
        let mut edited = r.clone();
        edited.settings = Some(Settings::of(b"chunk_bytes=1", &PluginLimits::default()));
        assert!(edited.verify(&key()).is_err());
        let mut other = r;
        other.format = 1;
        let e = other.verify(&key()).unwrap_err();
        assert!(
            e.contains("format 1") && e.contains("re-run `emm check"),
            "{e}"
        );
        let e = VerdictRecord::from_json("{\"format\": 1}").unwrap_err();
        assert!(
            e.contains("an older emm") && e.contains("re-run `emm check"),
            "{e}"
        );
    }

    #[test]
    fn dates_are_utc_iso_8601() {
        assert_eq!(utc_date(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day) 12:34:56.
        let t = UNIX_EPOCH + Duration::from_secs(951_827_696);
        assert_eq!(utc_date(t), "2000-02-29T12:34:56Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_312_332);
        assert_eq!(utc_date(t), "2026-11-22T01:52:12Z");
    }
}
