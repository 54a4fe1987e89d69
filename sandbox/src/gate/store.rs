//! [`VerdictStore`]: the folder of verdict records.
//!
//! Layout: `DIR/<subject key>/<cases>x<ops>-seed<seed>.json`, where the key is the plugin's
//! hex sha256 (or `builtin-NAME-VERSION`). `DIR` is `--verdicts DIR`, else
//! `$EMM_VERDICT_DIR`, else `$XDG_DATA_HOME/emm/verdicts`, else
//! `~/.local/share/emm/verdicts`.
//!
//! Records are authenticated with the per-user [`GateKey`] (HMAC-SHA256), kept outside the
//! store. emm never removes a record and never replaces a failing one: checking again with
//! the same depth and seed replaces a passing record, but a failing (or untrusted) record
//! stays, and the new one is kept beside it as `<cases>x<ops>-seed<seed>-<n>.json`. The store
//! and its folders are refused when their group or others may write them; a record is
//! written to a temporary file created exclusively (never through a link) and linked into
//! place; a record is read only if it is a regular file, without blocking, up to
//! [`MAX_RECORD_BYTES`].

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use super::error::GateError;
use super::folders::create_dirs;
use super::key::{GateKey, KEY_VAR};
use super::record::VerdictRecord;
use super::stored_record::StoredRecord;
use super::subject::Subject;
use crate::read::read_capped;

/// The environment variable naming the verdict store's folder.
pub const VERDICT_DIR_VAR: &str = "EMM_VERDICT_DIR";

/// The largest record read; a longer file is not a record emm wrote.
pub const MAX_RECORD_BYTES: u64 = 1 << 20;

/// A folder of verdict records, and the key that authenticates them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerdictStore {
    dir: PathBuf,
    // `None`: the key file the environment names ([`GateKey::default_path`]).
    key_file: Option<PathBuf>,
}

impl VerdictStore {
    /// The store in `dir` (created when the first record is saved), its records
    /// authenticated with the key file the environment names ([`GateKey::default_path`]).
    pub fn new(dir: impl Into<PathBuf>) -> VerdictStore {
        VerdictStore {
            dir: dir.into(),
            key_file: None,
        }
    }

    /// With the key kept in `path` rather than where the environment says.
    pub fn key_file(mut self, path: impl Into<PathBuf>) -> VerdictStore {
        self.key_file = Some(path.into());
        self
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

    /// The key file.
    ///
    /// # Errors
    ///
    /// As [`GateKey::default_path`].
    pub fn key_path(&self) -> Result<PathBuf, GateError> {
        match &self.key_file {
            Some(p) => Ok(p.clone()),
            None => GateKey::default_path(),
        }
    }

    /// Where a record of `record`'s subject, depth and seed is kept first.
    pub fn path_of(&self, record: &VerdictRecord) -> PathBuf {
        self.dir
            .join(record.subject.key())
            .join(format!("{}-seed{}.json", record.depth, record.seed))
    }

    /// Authenticates `record` with the key (created on first use) and saves it; returns its
    /// path. A passing record of the same subject, depth and seed is replaced; a failing or
    /// untrusted one never is: the new record is then kept beside it under a new name. The
    /// file is written beside, created exclusively, and linked into place, so a reader never
    /// sees half a record and nothing is written through a link.
    ///
    /// # Errors
    ///
    /// [`GateError::Store`] when the key, the folder or the file cannot be written, or the
    /// folder may be written by its group or others.
    pub fn save(&self, record: &VerdictRecord) -> Result<PathBuf, GateError> {
        let key = GateKey::load_or_create(&self.key_path()?)?;
        let record = record.clone().sealed(&key);
        let path = self.path_of(&record);
        let io = |p: &Path, e: std::io::Error| GateError::Store {
            path: p.to_path_buf(),
            reason: format!("{e}; give a writable folder with --verdicts DIR or {VERDICT_DIR_VAR}"),
        };
        let folder = path.parent().unwrap_or(&self.dir).to_path_buf();
        create_dirs(&self.dir, 0o755).map_err(|e| io(&self.dir, e))?;
        guarded(&self.dir)?;
        create_dirs(&folder, 0o755).map_err(|e| io(&folder, e))?;
        guarded(&folder)?;
        let tmp =
            write_exclusive(&folder, &(record.to_json() + "\n")).map_err(|e| io(&folder, e))?;
        let placed = self.place(&tmp, &path, &key, record.passed);
        let _ = std::fs::remove_file(&tmp);
        placed.map_err(|e| io(&path, e))
    }

    /// Puts the file `tmp` at `path`, where a passing record (`passed`) replaces only a
    /// trusted passing record; otherwise at the first free `…-<n>.json` beside it. A failing
    /// record never replaces anything: another run may have read `path` as passing and be
    /// about to rename its own pass over it, which would erase the failure.
    fn place(
        &self,
        tmp: &Path,
        path: &Path,
        key: &GateKey,
        passed: bool,
    ) -> std::io::Result<PathBuf> {
        match std::fs::hard_link(tmp, path) {
            Ok(()) => return Ok(path.to_path_buf()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let passing = passed
            && read_record(path)
                .and_then(|r| {
                    r.verify(key)?;
                    Ok(r)
                })
                .is_ok_and(|r| r.passed);
        if passing {
            std::fs::rename(tmp, path)?;
            return Ok(path.to_path_buf());
        }
        let stem = path
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        for n in 2..10_000u32 {
            let other = path.with_file_name(format!("{stem}-{n}.json"));
            match std::fs::hard_link(tmp, &other) {
                Ok(()) => return Ok(other),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(
            "10 000 records of this depth and seed are kept already",
        ))
    }

    /// Every record kept for `subject`, in file-name order, each judged: a record that is not
    /// a regular file, is too long, does not parse, does not authenticate under the key, or
    /// names another subject than its folder's is returned with the reason it cannot be
    /// trusted.
    ///
    /// # Errors
    ///
    /// [`GateError::Store`] when a folder exists but cannot be read or may be written by its
    /// group or others, or when records exist and the key cannot be read.
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
        guarded(&self.dir)?;
        guarded(&folder)?;
        let mut paths = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| io(&folder, e))?.path();
            let hidden = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if !hidden && path.extension().is_some_and(|x| x == "json") {
                paths.push(path);
            }
        }
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        paths.sort();
        let key_path = self.key_path()?;
        let key = GateKey::load(&key_path)?;
        let mut out = Vec::with_capacity(paths.len());
        for path in paths {
            let record = match &key {
                Some(key) => read_record(&path).and_then(|r| judge(r, key, subject)),
                None => Err(format!(
                    "there is no gate key at {} ({KEY_VAR}) to authenticate it: it was not \
                     written by emm check as this user",
                    key_path.display()
                )),
            };
            out.push(StoredRecord { path, record });
        }
        Ok(out)
    }
}

/// The record in the file at `path`, read safely, not yet judged.
fn read_record(path: &Path) -> Result<VerdictRecord, String> {
    let bytes = read_capped(path, MAX_RECORD_BYTES, false)
        .map_err(|e| format!("it cannot be read as a record: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())?;
    VerdictRecord::from_json(&text)
}

/// `record`, if it authenticates under `key` as a record of `subject`.
fn judge(record: VerdictRecord, key: &GateKey, subject: &Subject) -> Result<VerdictRecord, String> {
    record.verify(key)?;
    if record.subject.key() != subject.key() {
        return Err(format!(
            "it is a record of {:?}, kept in the folder of {subject:?}",
            record.subject
        ));
    }
    Ok(record)
}

/// Refuses `dir` when it is not a folder, or when its group or others may write it: whoever
/// can write there can plant, replace or remove records.
fn guarded(dir: &Path) -> Result<(), GateError> {
    let refuse = |reason: String| GateError::Store {
        path: dir.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(dir).map_err(|e| refuse(e.to_string()))?;
    if !meta.is_dir() {
        return Err(refuse("it is not a folder".to_string()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o022 != 0 {
            return Err(refuse(format!(
                "the folder may be written by its group or by others (mode {:04o}), who could \
                 plant, replace or remove verdicts; `chmod go-w` it, or give a private folder \
                 with --verdicts DIR or {VERDICT_DIR_VAR}",
                mode & 0o7777
            )));
        }
    }
    Ok(())
}

/// Writes `text` to a new hidden file in `folder`, created exclusively (`O_EXCL`, never
/// through a link); returns its path.
fn write_exclusive(folder: &Path, text: &str) -> std::io::Result<PathBuf> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    for _ in 0..100 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tmp = folder.join(format!(".record-{}-{n}-{nanos}.tmp", std::process::id()));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o644).custom_flags(libc::O_NOFOLLOW);
        }
        let mut file = match options.open(&tmp) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        let written = file
            .write_all(text.as_bytes())
            .and_then(|()| file.sync_all());
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        return Ok(tmp);
    }
    Err(std::io::Error::other("no free name for a temporary file"))
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
