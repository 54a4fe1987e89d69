//! [`GateKey`]: the per-user secret that authenticates verdict records (HMAC-SHA256), kept
//! outside the verdict store.
//!
//! The key file holds 32 random bytes as 64 hex digits. It is `$EMM_GATE_KEY` when set, else
//! `$XDG_CONFIG_HOME/emm/gate.key`, else `~/.config/emm/gate.key`; `emm check` creates it on
//! first use, readable and writable by its owner only (mode 0600), in a folder of mode 0700.
//! A key file that others can read or write is refused: whoever can read it can forge a
//! record. A record written or edited by anyone without the key does not authenticate, and
//! the gate refuses the plugin.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::content_hash::hex;
use super::error::GateError;
use crate::read::{read_capped, ReadRefusal};

/// The environment variable naming the key file.
pub const KEY_VAR: &str = "EMM_GATE_KEY";

/// What a record's `mac` field starts with.
pub(crate) const MAC_PREFIX: &str = "hmac-sha256:";

/// A key, 32 bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct GateKey([u8; 32]);

impl std::fmt::Debug for GateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GateKey(..)")
    }
}

impl GateKey {
    /// A key of these bytes (tests; a real key comes from [`GateKey::load_or_create`]).
    pub fn from_bytes(bytes: [u8; 32]) -> GateKey {
        GateKey(bytes)
    }

    /// The key file the environment names: `$EMM_GATE_KEY`, else
    /// `$XDG_CONFIG_HOME/emm/gate.key`, else `$HOME/.config/emm/gate.key`.
    ///
    /// # Errors
    ///
    /// [`GateError::Store`] when none of these is set.
    pub fn default_path() -> Result<PathBuf, GateError> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        if let Some(p) = var(KEY_VAR) {
            return Ok(p);
        }
        if let Some(d) = var("XDG_CONFIG_HOME") {
            return Ok(d.join("emm").join("gate.key"));
        }
        if let Some(h) = var("HOME").or_else(|| var("USERPROFILE")) {
            return Ok(h.join(".config").join("emm").join("gate.key"));
        }
        Err(GateError::Store {
            path: PathBuf::from("~/.config/emm/gate.key"),
            reason: format!(
                "no home folder is set (HOME, XDG_CONFIG_HOME) to keep the gate's key in; name \
                 the key file with {KEY_VAR}"
            ),
        })
    }

    /// The key in `path`; `None` when there is no such file.
    ///
    /// # Errors
    ///
    /// [`GateError::Store`] when the file cannot be read, is not a regular file, can be read
    /// or written by others, or does not hold a key.
    pub fn load(path: &Path) -> Result<Option<GateKey>, GateError> {
        let bad = |reason: String| GateError::Store {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = match read_capped(path, 256, false) {
            Ok(b) => b,
            Err(ReadRefusal::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(bad(format!("the gate's key file cannot be read: {e}"))),
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let meta = std::fs::symlink_metadata(path).map_err(|e| bad(e.to_string()))?;
            // The process's own folder belongs to its effective user (no `unsafe` geteuid).
            let me = std::fs::metadata("/proc/self")
                .map(|m| m.uid())
                .map_err(|e| bad(format!("cannot tell who you are (/proc/self: {e})")))?;
            if meta.uid() != me {
                return Err(bad(format!(
                    "the gate's key file belongs to user {}, not to you (user {me}): whoever \
                     owns it can read it and forge verdicts; delete it (a new key is made on \
                     the next `emm check`), and check every plugin again",
                    meta.uid()
                )));
            }
            let mode = meta.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(bad(format!(
                    "the gate's key file has mode {:04o}: others may read or change it, and \
                     whoever reads it can forge verdicts; `chmod 600` it (or delete it, and \
                     check every plugin again)",
                    mode & 0o7777
                )));
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        let digits = text.trim();
        let parsed = super::content_hash::ContentHash::from_hex(digits)
            .ok_or_else(|| bad("the gate's key file does not hold 64 hex digits".to_string()))?;
        Ok(Some(GateKey(*parsed.as_bytes())))
    }

    /// The key in `path`, created (32 random bytes, mode 0600) when there is none. Two
    /// processes creating it at once end with the same key: it is written beside and linked
    /// into place only if nothing is there yet.
    ///
    /// # Errors
    ///
    /// As [`GateKey::load`], and [`GateError::Store`] when it cannot be created.
    pub fn load_or_create(path: &Path) -> Result<GateKey, GateError> {
        if let Some(k) = GateKey::load(path)? {
            return Ok(k);
        }
        let io = |p: &Path, e: std::io::Error| GateError::Store {
            path: p.to_path_buf(),
            reason: format!("cannot create the gate's key file: {e}; name another with {KEY_VAR}"),
        };
        let key = GateKey(random_bytes().map_err(|e| io(path, e))?);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            super::folders::create_dirs(dir, 0o700).map_err(|e| io(dir, e))?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
        }
        let mut file = options.open(&tmp).map_err(|e| io(&tmp, e))?;
        let written = file
            .write_all(format!("{}\n", hex(&key.0)).as_bytes())
            .and_then(|()| file.sync_all());
        drop(file);
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(&tmp, e));
        }
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(key),
            // Another process made it first: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                GateKey::load(path)?.ok_or_else(|| io(path, std::io::Error::other("it vanished")))
            }
            Err(e) => Err(io(path, e)),
        }
    }

    /// `hmac-sha256:<hex>` of `parts`, in order.
    pub(crate) fn mac(&self, parts: &[&[u8]]) -> String {
        format!("{MAC_PREFIX}{}", hex(&self.tag(parts)))
    }

    /// Whether `mac` is the MAC of `parts` (compared in constant time).
    pub(crate) fn verifies(&self, parts: &[&[u8]], mac: &str) -> bool {
        let Some(digits) = mac.strip_prefix(MAC_PREFIX) else {
            return false;
        };
        let Some(tag) = super::content_hash::ContentHash::from_hex(digits) else {
            return false;
        };
        let mut m = self.hmac();
        for p in parts {
            m.update(p);
        }
        m.verify_slice(tag.as_bytes()).is_ok()
    }

    fn hmac(&self) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this cannot fail.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!())
    }

    fn tag(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut m = self.hmac();
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }
}

/// 32 bytes from the operating system's random source.
fn random_bytes() -> std::io::Result<[u8; 32]> {
    let mut out = [0u8; 32];
    let mut f = std::fs::File::open("/dev/urandom")?;
    std::io::Read::read_exact(&mut f, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_created_private_once_and_macs_verify_only_with_it() {
        let dir = std::env::temp_dir().join(format!("emm-key-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("sub").join("gate.key");
        assert_eq!(GateKey::load(&path).unwrap(), None);
        let k = GateKey::load_or_create(&path).unwrap();
        assert_eq!(GateKey::load_or_create(&path).unwrap(), k);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = GateKey::load(&path).unwrap_err().to_string();
            assert!(e.contains("chmod 600"), "{e}");
        }
        let mac = k.mac(&[b"a", b"b"]);
        assert!(k.verifies(&[b"a", b"b"], &mac));
        assert!(!k.verifies(&[b"a", b"c"], &mac));
        assert!(!GateKey::from_bytes([1; 32]).verifies(&[b"a", b"b"], &mac));
        assert!(!k.verifies(&[b"a", b"b"], "sha256:00"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
