//! [`VerdictStore`]: the folder of verdict records.
//!
//! Layout: `DIR/<subject key>/<cases>x<ops>-seed<seed>.json`, where the key is the plugin's
//! hex sha256 (or `builtin-NAME-VERSION`): one record per plugin, depth and seed; checking
//! again with the same depth and seed replaces it. `DIR` is `--verdicts DIR`, else
//! `$EMM_VERDICT_DIR`, else `$XDG_DATA_HOME/emm/verdicts`, else
//! `~/.local/share/emm/verdicts`.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::error::GateError;
use super::record::VerdictRecord;
use super::stored_record::StoredRecord;
use super::subject::Subject;

/// The environment variable naming the verdict store's folder.
pub const VERDICT_DIR_VAR: &str = "EMM_VERDICT_DIR";

/// A folder of verdict records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerdictStore {
    dir: PathBuf,
}

impl VerdictStore {
    /// The store in `dir` (created when the first record is saved).
    pub fn new(dir: impl Into<PathBuf>) -> VerdictStore {
        VerdictStore { dir: dir.into() }
    }

    /// The store `$EMM_VERDICT_DIR` names, else the per-user default.
    ///
    /// # Errors
    ///
    /// [`GateError::Store`] when neither the variable nor a home folder is set.
    pub fn from_env() -> Result<VerdictStore, GateError> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        default_dir(
            var(VERDICT_DIR_VAR),
            var("XDG_DATA_HOME"),
            var("HOME").or_else(|| var("USERPROFILE")),
        )
        .map(VerdictStore::new)
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where `record` is kept.
    pub fn path_of(&self, record: &VerdictRecord) -> PathBuf {
        self.dir
            .join(record.subject.key())
            .join(format!("{}-seed{}.json", record.depth, record.seed))
    }

    /// Saves `record` (sealed by the caller), replacing one of the same subject, depth and
    /// seed; returns its path. The file is written beside and renamed, so a reader never sees
    /// half a record.
    ///
    /// # Errors
    ///
    /// [`GateError::Store`] when the folder or the file cannot be written.
    pub fn save(&self, record: &VerdictRecord) -> Result<PathBuf, GateError> {
        let path = self.path_of(record);
        let io = |p: &Path, e: std::io::Error| GateError::Store {
            path: p.to_path_buf(),
            reason: format!("{e}; give a writable folder with --verdicts DIR or {VERDICT_DIR_VAR}"),
        };
        let folder = path.parent().unwrap_or(&self.dir);
        std::fs::create_dir_all(folder).map_err(|e| io(folder, e))?;
        let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
        std::fs::write(&tmp, record.to_json() + "\n").map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
        Ok(path)
    }

    /// Every record kept for `subject`, in file-name order, each verified: a record that does
    /// not parse, fails its checksum, or names another subject than its folder's is returned
    /// with the reason it cannot be trusted.
    ///
    /// # Errors
    ///
    /// [`GateError::Store`] when the folder exists but cannot be read.
    pub fn records(&self, subject: &Subject) -> Result<Vec<StoredRecord>, GateError> {
        let folder = self.dir.join(subject.key());
        let io = |p: &Path, e: std::io::Error| GateError::Store {
            path: p.to_path_buf(),
            reason: e.to_string(),
        };
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&folder, e)),
        };
        let mut paths = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| io(&folder, e))?.path();
            if path.extension().is_some_and(|x| x == "json") {
                paths.push(path);
            }
        }
        paths.sort();
        let mut out = Vec::with_capacity(paths.len());
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
            let record = judge(&text, subject);
            out.push(StoredRecord { path, record });
        }
        Ok(out)
    }
}

/// The record in `text`, if it can be trusted as a record of `subject`.
fn judge(text: &str, subject: &Subject) -> Result<VerdictRecord, String> {
    let record = VerdictRecord::from_json(text)?;
    record.verify()?;
    if record.subject.key() != subject.key() {
        return Err(format!(
            "it is a record of {:?}, kept in the folder of {subject:?}",
            record.subject
        ));
    }
    Ok(record)
}

/// The store's folder: `explicit`, else `data_home/emm/verdicts`, else
/// `home/.local/share/emm/verdicts`.
fn default_dir(
    explicit: Option<PathBuf>,
    data_home: Option<PathBuf>,
    home: Option<PathBuf>,
) -> Result<PathBuf, GateError> {
    if let Some(d) = explicit {
        return Ok(d);
    }
    if let Some(d) = data_home {
        return Ok(d.join("emm").join("verdicts"));
    }
    if let Some(h) = home {
        return Ok(h.join(".local").join("share").join("emm").join("verdicts"));
    }
    Err(GateError::Store {
        path: PathBuf::from("~/.local/share/emm/verdicts"),
        reason: format!(
            "no home folder is set (HOME, XDG_DATA_HOME); name the store with --verdicts DIR \
             or {VERDICT_DIR_VAR}"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_comes_from_the_variable_then_xdg_then_home() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(
            default_dir(p("/v"), p("/x"), p("/h")),
            Ok(PathBuf::from("/v"))
        );
        assert_eq!(
            default_dir(None, p("/x"), p("/h")),
            Ok(PathBuf::from("/x/emm/verdicts"))
        );
        assert_eq!(
            default_dir(None, None, p("/h")),
            Ok(PathBuf::from("/h/.local/share/emm/verdicts"))
        );
        let e = default_dir(None, None, None).unwrap_err().to_string();
        assert!(e.contains("--verdicts DIR or EMM_VERDICT_DIR"), "{e}");
    }
}
