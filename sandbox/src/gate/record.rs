//! [`VerdictRecord`]: the verdict of one `emm check` run on the simulated GPU, as a small
//! JSON file of the verdict store, sealed by a checksum over its fields.
//!
//! The checksum is the sha256 of a fixed prefix and the record's fields (the record as JSON
//! with the checksum left empty). It detects a record edited by hand or corrupted: a changed
//! hash, verdict, depth or check no longer matches. It is **not a signature**: anyone who
//! knows this scheme can write a record that passes, so the store must be writable only by
//! those trusted to run `emm check`.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::check_verdict::CheckVerdict;
use super::content_hash::hex;
use super::depth::Depth;
use super::subject::Subject;

/// The record format this emm writes and reads.
pub const RECORD_FORMAT: u32 = 1;

/// What the checksum is computed over, before the fields.
const CHECKSUM_PREFIX: &[u8] = b"emm-verdict-v1\n";

/// The verdict of one conformance run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictRecord {
    /// [`RECORD_FORMAT`] of the emm that wrote it.
    pub format: u32,
    /// What was checked.
    pub subject: Subject,
    /// The plugin as it was named on the command line (a path or a built-in's name).
    pub plugin: String,
    /// The plugin ABI version of the host that ran it (`abi::ABI_VERSION`).
    pub abi_version: i32,
    /// The contract suite that judged it, e.g. `emm-conformance 0.1.0`.
    pub suite: String,
    /// Where it ran: `sim` (only simulator runs are recorded).
    pub backend: String,
    /// How deep the run went.
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
    /// `sha256:<hex>` over the other fields (see the module's doc).
    pub checksum: String,
}

impl VerdictRecord {
    /// The record with its checksum computed over its other fields.
    pub fn sealed(mut self) -> VerdictRecord {
        self.checksum = self.expected_checksum();
        self
    }

    /// The checksum the fields call for.
    pub fn expected_checksum(&self) -> String {
        let mut fields = self.clone();
        fields.checksum = String::new();
        // Serializing plain structs, strings and integers cannot fail; an empty body would
        // only make every record mismatch, never match.
        let body = serde_json::to_vec(&fields).unwrap_or_default();
        let mut h = Sha256::new();
        h.update(CHECKSUM_PREFIX);
        h.update(&body);
        format!("sha256:{}", hex(&h.finalize()))
    }

    /// Checks the format and the checksum.
    ///
    /// # Errors
    ///
    /// Why the record cannot be trusted: another format, or fields that do not match the
    /// checksum (edited by hand, or corrupted).
    pub fn verify(&self) -> Result<(), String> {
        if self.format != RECORD_FORMAT {
            return Err(format!(
                "record format {} (this emm reads format {RECORD_FORMAT})",
                self.format
            ));
        }
        let expected = self.expected_checksum();
        if self.checksum != expected {
            return Err(format!(
                "its checksum {} does not match its fields ({expected}): a field was changed \
                 after emm check wrote it",
                self.checksum
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
        serde_json::from_str(text).map_err(|e| format!("it is not a verdict record: {e}"))
    }
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
            checksum: String::new(),
        }
        .sealed()
    }

    #[test]
    fn a_sealed_record_verifies_and_an_edited_one_does_not() {
        let r = record();
        assert_eq!(r.verify(), Ok(()));
        let back = VerdictRecord::from_json(&r.to_json()).unwrap();
        assert_eq!(back, r);
        let mut edited = r.clone();
        edited.passed = false;
        assert!(edited.verify().unwrap_err().contains("does not match"));
        let mut edited = r.clone();
        edited.subject = Subject::wasm(ContentHash::of(b"other"));
        assert!(edited.verify().is_err());
        let mut edited = r.clone();
        edited.depth.cases = 4000;
        assert!(edited.verify().is_err());
        let mut other = r;
        other.format = 2;
        assert!(other.verify().unwrap_err().contains("format 2"));
        assert!(VerdictRecord::from_json("{\"format\": 1}").is_err());
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
